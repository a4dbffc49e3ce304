// Family "winograd": Winograd F(2x2, 3x3) for 3x3 convolutions with stride 1 and dilation 1:
// each 2x2 output tile costs 16 multiplies per (input, output) channel pair instead of 36. The
// weight is transformed once per weight version (U = G g G^T, kept as 16 [k, c] matrices);
// the zero-padded input is cut into overlapping 4x4 tiles, `tile_block` tiles at a time, each
// transformed (V = B^T d B) into 16 [c, tiles] matrices; 16 GEMMs (torch's BLAS) give M = U V
// and the output transform (Y = A^T M A) adds the bias and writes 2x2 outputs (clipped at
// odd edges) in the op's output layout.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>

#include "csrc/kernels/cpu/cpu_families.h"
#include "csrc/kernels/cpu/cpu_kernel_support.h"

namespace nimble::kernels {
namespace {

constexpr int64_t kPositions = 16;  // elements of a 4x4 transformed tile

// B^T d B of the 4x4 tile at `d` (row stride `ld`) into v[p * stride], p = 4 * row + column.
inline void input_transform(const float* d, int64_t ld, float* v, int64_t stride) {
  float t[4][4];
  for (int j = 0; j < 4; ++j) {
    const float d0 = d[j], d1 = d[ld + j], d2 = d[2 * ld + j], d3 = d[3 * ld + j];
    t[0][j] = d0 - d2;
    t[1][j] = d1 + d2;
    t[2][j] = d2 - d1;
    t[3][j] = d1 - d3;
  }
  for (int i = 0; i < 4; ++i) {
    v[(4 * i + 0) * stride] = t[i][0] - t[i][2];
    v[(4 * i + 1) * stride] = t[i][1] + t[i][2];
    v[(4 * i + 2) * stride] = t[i][2] - t[i][1];
    v[(4 * i + 3) * stride] = t[i][1] - t[i][3];
  }
}

// A^T m A (m[p * stride]) plus `bias`: the 2x2 outputs, y[row][column].
inline void output_transform(const float* m, int64_t stride, float bias, float y[2][2]) {
  float t[2][4];
  for (int j = 0; j < 4; ++j) {
    const float m0 = m[j * stride], m1 = m[(4 + j) * stride], m2 = m[(8 + j) * stride],
                m3 = m[(12 + j) * stride];
    t[0][j] = m0 + m1 + m2;
    t[1][j] = m1 - m2 - m3;
  }
  for (int i = 0; i < 2; ++i) {
    y[i][0] = t[i][0] + t[i][1] + t[i][2] + bias;
    y[i][1] = t[i][1] - t[i][2] - t[i][3] + bias;
  }
}

class WinogradConv : public TunedKernel {
 public:
  WinogradConv(TunableOp op, int64_t tile_block, int64_t threads)
      : op_(std::move(op)), tile_block_(tile_block), threads_(threads) {}

  at::Tensor run(at::TensorList operands) const override {
    ThreadsScope threads(threads_);
    const at::Tensor& u = weight_.get(operands[1], [&](const at::Tensor& g) {
      const at::Tensor gm =
          at::tensor({1.0F, 0.0F, 0.0F, 0.5F, 0.5F, 0.5F, 0.5F, -0.5F, 0.5F, 0.0F, 0.0F, 1.0F},
                     g.options())
              .view({4, 3});
      return at::matmul(at::matmul(gm, g), gm.t())  // [k, c, 4, 4]
          .permute({2, 3, 0, 1})
          .reshape({kPositions, op_.k, op_.c})
          .contiguous();
    });
    const int64_t oh = op_.out_h(), ow = op_.out_w();
    const int64_t tiles_h = (oh + 1) / 2, tiles_w = (ow + 1) / 2;
    const int64_t plane_tiles = tiles_h * tiles_w, tiles = op_.n * plane_tiles;
    // Padded so that every tile's 4x4 input exists: 2 * tiles + 2 rows and columns.
    const at::Tensor x =
        at::constant_pad_nd(operands[0], {op_.padding[1], 2 * tiles_w + 2 - op_.w - op_.padding[1],
                                          op_.padding[0], 2 * tiles_h + 2 - op_.h - op_.padding[0]})
            .contiguous();
    const int64_t hp = x.size(2), wp = x.size(3);
    at::Tensor out = op_.empty_output();
    const auto st = out.strides();
    const float* in = x.data_ptr<float>();
    const at::Tensor bias_values = op_.bias ? operands[2].contiguous() : at::Tensor();
    const float* bias = op_.bias ? bias_values.data_ptr<float>() : nullptr;
    float* dst = out.data_ptr<float>();
    const int64_t block = std::min(tile_block_, tiles);
    at::Tensor v_full = at::empty({kPositions, op_.c, block}, x.options());
    at::Tensor m_full = at::empty({kPositions, op_.k, block}, x.options());
    for (int64_t t0 = 0; t0 < tiles; t0 += block) {
      const int64_t count = std::min(block, tiles - t0);
      at::Tensor v = count == block ? v_full : at::empty({kPositions, op_.c, count}, x.options());
      at::Tensor m = count == block ? m_full : at::empty({kPositions, op_.k, count}, x.options());
      float* vp = v.data_ptr<float>();
      at::parallel_for(0, op_.c, 1, [&](int64_t begin, int64_t end) {
        for (int64_t c = begin; c < end; ++c)
          for (int64_t t = 0; t < count; ++t) {
            const int64_t tile = t0 + t, image = tile / plane_tiles;
            const int64_t ty = tile % plane_tiles / tiles_w, tx = tile % tiles_w;
            const float* d = in + ((image * op_.c + c) * hp + 2 * ty) * wp + 2 * tx;
            input_transform(d, wp, vp + c * count + t, op_.c * count);
          }
      });
      at::bmm_out(m, u, v);
      const float* mp = m.data_ptr<float>();
      at::parallel_for(0, op_.k, 1, [&](int64_t begin, int64_t end) {
        for (int64_t k = begin; k < end; ++k)
          for (int64_t t = 0; t < count; ++t) {
            const int64_t tile = t0 + t, image = tile / plane_tiles;
            const int64_t ty = tile % plane_tiles / tiles_w, tx = tile % tiles_w;
            float y[2][2];
            output_transform(mp + k * count + t, op_.k * count, bias ? bias[k] : 0.0F, y);
            float* to = dst + image * st[0] + k * st[1];
            for (int64_t i = 0; i < 2 && 2 * ty + i < oh; ++i)
              for (int64_t j = 0; j < 2 && 2 * tx + j < ow; ++j)
                to[(2 * ty + i) * st[2] + (2 * tx + j) * st[3]] = y[i][j];
          }
      });
    }
    return out;
  }

 private:
  TunableOp op_;
  int64_t tile_block_;
  int64_t threads_;
  DerivedTensor weight_;
};

class WinogradConvFamily : public KernelFamily {
 public:
  std::string name() const override { return "winograd"; }
  bool supports(const TunableOp& op) const override {
    const std::array<int64_t, 2> one{1, 1};
    return op.device == c10::DeviceType::CPU && op.dtype == c10::ScalarType::Float &&
           op.groups == 1 && op.r == 3 && op.s == 3 && op.stride == one && op.dilation == one;
  }
  std::vector<tuning::Knob> knobs(const TunableOp& op) const override {
    const int64_t tiles = op.n * ((op.out_h() + 1) / 2) * ((op.out_w() + 1) / 2);
    int64_t most = 16;
    while (most < tiles && most < 1024) most *= 2;
    return {tuning::Knob::power_of_two_range("tile_block", 16, most), threads_knob()};
  }
  std::unique_ptr<TunedKernel> build(const TunableOp& op, const KnobValues& k) const override {
    return std::make_unique<WinogradConv>(op, k.value("tile_block"), k.value("threads"));
  }
};

}  // namespace

std::shared_ptr<const KernelFamily> winograd_conv_family() {
  return std::make_shared<WinogradConvFamily>();
}

}  // namespace nimble::kernels

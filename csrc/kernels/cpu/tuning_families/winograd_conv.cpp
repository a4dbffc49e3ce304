// Family "winograd": Winograd F(2x2, 3x3) for 3x3 convolutions with stride 1 and dilation 1:
// each 2x2 output tile costs 16 multiplies per (input, output) channel pair instead of 36. The
// weight is transformed once per weight version (U = G g G^T, kept as 16 [k, c] matrices);
// the zero-padded input is cut into overlapping 4x4 tiles, `tile_block` tiles at a time, each
// transformed (V = B^T d B) into 16 [tiles, c] matrices; 16 GEMMs (torch's BLAS) give M = V U
// and the output transform (Y = A^T M A) adds the bias and writes 2x2 outputs (clipped at
// odd edges) in the op's output layout. Both transforms are vectorized over channels.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>

#include "csrc/kernels/cpu/channels_last/isa.h"
#include "csrc/kernels/cpu/tuning_families/cpu_families.h"
#include "csrc/kernels/cpu/tuning_families/cpu_kernel_support.h"

namespace nimble::kernels {
namespace {

constexpr int64_t kPositions = 16;  // elements of a 4x4 transformed tile

// Where tile `tile` (numbered image by image, row by row) lies.
struct TileGrid {
  int64_t tiles_h, tiles_w;
  int64_t image(int64_t tile) const { return tile / (tiles_h * tiles_w); }
  int64_t row(int64_t tile) const { return tile % (tiles_h * tiles_w) / tiles_w; }
  int64_t column(int64_t tile) const { return tile % tiles_w; }
};

// V = B^T d B of tiles [t0, t0 + count) of the padded channels-last input `x` ([n][hp][wp][c])
// into v ([16][count][c]), every channel of a tile in one vectorized sweep.
__attribute__((always_inline)) inline void input_transform(const float* x, float* v, int64_t c,
                                                           int64_t hp, int64_t wp,
                                                           const TileGrid& grid, int64_t t0,
                                                           int64_t count, int64_t begin,
                                                           int64_t end) {
  const int64_t position = count * c;
  for (int64_t t = begin; t < end; ++t) {
    const int64_t tile = t0 + t;
    const float* d =
        x + ((grid.image(tile) * hp + 2 * grid.row(tile)) * wp + 2 * grid.column(tile)) * c;
    float* dst = v + t * c;
#pragma GCC ivdep
    for (int64_t ch = 0; ch < c; ++ch) {
      float bt[4][4];  // B^T d
      for (int j = 0; j < 4; ++j) {
        const float d0 = d[j * c + ch], d1 = d[(wp + j) * c + ch], d2 = d[(2 * wp + j) * c + ch],
                    d3 = d[(3 * wp + j) * c + ch];
        bt[0][j] = d0 - d2;
        bt[1][j] = d1 + d2;
        bt[2][j] = d2 - d1;
        bt[3][j] = d1 - d3;
      }
      for (int i = 0; i < 4; ++i) {
        dst[(4 * i + 0) * position + ch] = bt[i][0] - bt[i][2];
        dst[(4 * i + 1) * position + ch] = bt[i][1] + bt[i][2];
        dst[(4 * i + 2) * position + ch] = bt[i][2] - bt[i][1];
        dst[(4 * i + 3) * position + ch] = bt[i][1] - bt[i][3];
      }
    }
  }
}

// Y = A^T m A + bias of one tile, every output channel, m ([16][count][k]) at the tile's row;
// Rows x Cols of the 2x2 outputs exist (fewer at odd edges).
template <int Rows, int Cols>
__attribute__((always_inline)) inline void output_tile(const float* m, int64_t position, int64_t k,
                                                       const float* bias, float* out,
                                                       int64_t channel_stride, int64_t row_stride,
                                                       int64_t column_stride) {
#pragma GCC ivdep
  for (int64_t ch = 0; ch < k; ++ch) {
    float am[2][4];  // A^T m
    for (int j = 0; j < 4; ++j) {
      const float m0 = m[j * position + ch], m1 = m[(4 + j) * position + ch],
                  m2 = m[(8 + j) * position + ch], m3 = m[(12 + j) * position + ch];
      am[0][j] = m0 + m1 + m2;
      am[1][j] = m1 - m2 - m3;
    }
    const float b = bias ? bias[ch] : 0.0F;
    const float y[2][2] = {
        {am[0][0] + am[0][1] + am[0][2] + b, am[0][1] - am[0][2] - am[0][3] + b},
        {am[1][0] + am[1][1] + am[1][2] + b, am[1][1] - am[1][2] - am[1][3] + b}};
    for (int i = 0; i < Rows; ++i)
      for (int j = 0; j < Cols; ++j)
        out[ch * channel_stride + i * row_stride + j * column_stride] = y[i][j];
  }
}

__attribute__((always_inline)) inline void output_transform(const float* m, const float* bias,
                                                            float* out, const int64_t* out_strides,
                                                            int64_t k, int64_t oh, int64_t ow,
                                                            const TileGrid& grid, int64_t t0,
                                                            int64_t count, int64_t begin,
                                                            int64_t end) {
  const int64_t position = count * k;
  for (int64_t t = begin; t < end; ++t) {
    const int64_t tile = t0 + t, oy = 2 * grid.row(tile), ox = 2 * grid.column(tile);
    const float* src = m + t * k;
    float* dst =
        out + grid.image(tile) * out_strides[0] + oy * out_strides[2] + ox * out_strides[3];
    const int64_t sc = out_strides[1], sy = out_strides[2], sx = out_strides[3];
    const bool rows = oy + 1 < oh, cols = ox + 1 < ow;
    if (rows && cols) {
      output_tile<2, 2>(src, position, k, bias, dst, sc, sy, sx);
    } else if (rows) {
      output_tile<2, 1>(src, position, k, bias, dst, sc, sy, sx);
    } else if (cols) {
      output_tile<1, 2>(src, position, k, bias, dst, sc, sy, sx);
    } else {
      output_tile<1, 1>(src, position, k, bias, dst, sc, sy, sx);
    }
  }
}

class WinogradConv : public TunedKernel {
 public:
  WinogradConv(TunableOp op, int64_t tile_block, int64_t threads)
      : op_(std::move(op)), tile_block_(tile_block), threads_(threads) {}

  at::Tensor run(at::TensorList operands) const override {
    ThreadsScope threads(threads_);
    // [16][c][k]: GEMMs are [tiles, c] x [c, k], the orientation torch's BLAS runs fastest
    // when there are few tiles.
    const at::Tensor& u = weight_.get(operands[1], [&](const at::Tensor& g) {
      const at::Tensor gm =
          at::tensor({1.0F, 0.0F, 0.0F, 0.5F, 0.5F, 0.5F, 0.5F, -0.5F, 0.5F, 0.0F, 0.0F, 1.0F},
                     g.options())
              .view({4, 3});
      return at::matmul(at::matmul(gm, g), gm.t())  // [k, c, 4, 4]
          .permute({2, 3, 1, 0})
          .reshape({kPositions, op_.c, op_.k})
          .contiguous();
    });
    const int64_t oh = op_.out_h(), ow = op_.out_w();
    const TileGrid grid{(oh + 1) / 2, (ow + 1) / 2};
    const int64_t tiles = op_.n * grid.tiles_h * grid.tiles_w;
    // Padded so that every tile's 4x4 input exists (2 * tiles + 2 rows and columns), channels
    // innermost so that a tile's channels transform in one sweep.
    const at::Tensor x =
        at::constant_pad_nd(operands[0],
                            {op_.padding[1], 2 * grid.tiles_w + 2 - op_.w - op_.padding[1],
                             op_.padding[0], 2 * grid.tiles_h + 2 - op_.h - op_.padding[0]})
            .contiguous(at::MemoryFormat::ChannelsLast);
    at::Tensor out = op_.empty_output();
    const at::Tensor bias_values = op_.bias ? operands[2].contiguous() : at::Tensor();
    const float* bias = op_.bias ? bias_values.data_ptr<float>() : nullptr;
    const int64_t block = std::min(tile_block_, tiles);
    at::Tensor v_full = at::empty({kPositions, block, op_.c}, x.options());
    at::Tensor m_full = at::empty({kPositions, block, op_.k}, x.options());
    for (int64_t t0 = 0; t0 < tiles; t0 += block) {
      const int64_t count = std::min(block, tiles - t0);
      at::Tensor v = count == block ? v_full : at::empty({kPositions, count, op_.c}, x.options());
      at::Tensor m = count == block ? m_full : at::empty({kPositions, count, op_.k}, x.options());
      at::parallel_for(0, count, 1, [&](int64_t begin, int64_t end) {
        nhwc::run_for_isa(
            isa_, [&]() __attribute__((always_inline)) {
              input_transform(x.data_ptr<float>(), v.data_ptr<float>(), op_.c, x.size(2), x.size(3),
                              grid, t0, count, begin, end);
            });
      });
      at::bmm_out(m, v, u);
      at::parallel_for(0, count, 1, [&](int64_t begin, int64_t end) {
        nhwc::run_for_isa(
            isa_, [&]() __attribute__((always_inline)) {
              output_transform(m.data_ptr<float>(), bias, out.data_ptr<float>(),
                               out.strides().data(), op_.k, oh, ow, grid, t0, count, begin, end);
            });
      });
    }
    return out;
  }

 private:
  TunableOp op_;
  int64_t tile_block_;
  int64_t threads_;
  nhwc::Isa isa_ = nhwc::best_isa();  // the transforms' code (channels_last/isa.h)
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

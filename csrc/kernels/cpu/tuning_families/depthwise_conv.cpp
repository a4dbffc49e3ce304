// Family "depthwise": nimble's depthwise convolution (groups == channels, one filter per
// channel), where oneDNN and ATen are weakest at small batch. Each work item is `rows` output
// rows of one channel; a row is computed in tiles of `tile_w` outputs held in registers, each
// tap's contribution added in one contiguous (stride 1) or strided sweep. Interior tiles run a
// fixed-length loop the compiler vectorizes, compiled for the kernel's Isa (AVX-512, AVX2 or
// baseline; channels_last/isa.h's run_for_isa). The epilogue (residual add, activation) is applied
// as a tile is stored, so the result is written once.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>

#include "csrc/kernels/cpu/channels_last/isa.h"
#include "csrc/kernels/cpu/tuning_families/cpu_families.h"
#include "csrc/kernels/cpu/tuning_families/cpu_kernel_support.h"

namespace nimble::kernels {
namespace {

struct Geometry {
  int64_t h, w, oh, ow, r, s, sh, sw, ph, pw, dh, dw;
};

// First and one-past-last output column whose input column ox * sw + offset is in [0, w).
inline std::pair<int64_t, int64_t> valid_columns(const Geometry& g, int64_t offset) {
  const int64_t lo = offset >= 0 ? 0 : (-offset + g.sw - 1) / g.sw;
  const int64_t hi = g.w - 1 - offset < 0 ? 0 : (g.w - 1 - offset) / g.sw + 1;
  return {lo, std::min(hi, g.ow)};
}

// The epilogue and the residual plane (null: none) applied as each tile is stored.
struct Store {
  const Epilogue& epilogue;
  const float* residual;
};

template <int TileW>
__attribute__((always_inline)) inline void rows_of_plane(const float* in, const float* weight,
                                                         float bias, float* out, const Geometry& g,
                                                         int64_t oy0, int64_t oy1,
                                                         const Store& store) {
  for (int64_t oy = oy0; oy < oy1; ++oy) {
    float* out_row = out + oy * g.ow;
    for (int64_t t0 = 0; t0 < g.ow; t0 += TileW) {
      const int64_t t1 = std::min<int64_t>(t0 + TileW, g.ow);
      float acc[TileW];
      for (int j = 0; j < TileW; ++j) acc[j] = bias;
      for (int64_t kr = 0; kr < g.r; ++kr) {
        const int64_t iy = oy * g.sh - g.ph + kr * g.dh;
        if (iy < 0 || iy >= g.h) continue;
        const float* in_row = in + iy * g.w;
        for (int64_t ks = 0; ks < g.s; ++ks) {
          const float wv = weight[kr * g.s + ks];
          const int64_t offset = ks * g.dw - g.pw;
          const auto [lo, hi] = valid_columns(g, offset);
          if (lo <= t0 && hi >= t0 + TileW) {
            const float* src = in_row + t0 * g.sw + offset;
            if (g.sw == 1) {
              for (int j = 0; j < TileW; ++j) acc[j] += wv * src[j];
            } else {
              for (int j = 0; j < TileW; ++j) acc[j] += wv * src[j * g.sw];
            }
          } else {
            for (int64_t ox = std::max(lo, t0); ox < std::min(hi, t1); ++ox)
              acc[ox - t0] += wv * in_row[ox * g.sw + offset];
          }
        }
      }
      if (store.epilogue.empty()) {
        std::copy(acc, acc + (t1 - t0), out_row + t0);
      } else {
        const float* res = store.residual ? store.residual + oy * g.ow + t0 : nullptr;
        for (int64_t j = 0; j < t1 - t0; ++j)
          out_row[t0 + j] = store.epilogue.apply(acc[j], res ? res[j] : 0.0F);
      }
    }
  }
}

__attribute__((always_inline)) inline void rows_of_plane_dispatch(int tile_w, const float* in,
                                                                  const float* weight, float bias,
                                                                  float* out, const Geometry& g,
                                                                  int64_t oy0, int64_t oy1,
                                                                  const Store& store) {
  switch (tile_w) {
    case 8:
      return rows_of_plane<8>(in, weight, bias, out, g, oy0, oy1, store);
    case 16:
      return rows_of_plane<16>(in, weight, bias, out, g, oy0, oy1, store);
    case 32:
      return rows_of_plane<32>(in, weight, bias, out, g, oy0, oy1, store);
    default:
      return rows_of_plane<64>(in, weight, bias, out, g, oy0, oy1, store);
  }
}

class DepthwiseConv : public TunedKernel {
 public:
  DepthwiseConv(TunableOp op, int tile_w, int64_t rows, int64_t threads)
      : op_(std::move(op)), tile_w_(tile_w), rows_(rows), threads_(threads) {}

  at::Tensor run(at::TensorList operands) const override {
    ThreadsScope threads(threads_);
    const at::Tensor x = operands[0].contiguous();
    const at::Tensor w = operands[1].contiguous();
    const Geometry g{op_.h,          op_.w,          op_.out_h(),     op_.out_w(),
                     op_.r,          op_.s,          op_.stride[0],   op_.stride[1],
                     op_.padding[0], op_.padding[1], op_.dilation[0], op_.dilation[1]};
    at::Tensor out = at::empty({op_.n, op_.k, g.oh, g.ow}, x.options());
    const float* in = x.data_ptr<float>();
    const float* wt = w.data_ptr<float>();
    const at::Tensor b = op_.bias ? operands[2].contiguous() : at::Tensor();
    const float* bias = op_.bias ? b.data_ptr<float>() : nullptr;
    // The residual in the layout this kernel writes (NCHW), for the fused epilogue.
    const at::Tensor r = op_.epilogue.residual ? operands.back().contiguous() : at::Tensor();
    const float* residual = op_.epilogue.residual ? r.data_ptr<float>() : nullptr;
    float* dst = out.data_ptr<float>();
    const int64_t blocks = (g.oh + rows_ - 1) / rows_;
    at::parallel_for(0, op_.n * op_.c * blocks, 1, [&](int64_t begin, int64_t end) {
      for (int64_t item = begin; item < end; ++item) {
        const int64_t plane = item / blocks;  // image * channels + channel
        const int64_t channel = plane % op_.c;
        const int64_t oy0 = (item % blocks) * rows_;
        const Store store{op_.epilogue, residual ? residual + plane * g.oh * g.ow : nullptr};
        nhwc::run_for_isa(
            isa_, [&]() __attribute__((always_inline)) {
              rows_of_plane_dispatch(tile_w_, in + plane * g.h * g.w, wt + channel * g.r * g.s,
                                     bias ? bias[channel] : 0.0F, dst + plane * g.oh * g.ow, g, oy0,
                                     std::min(oy0 + rows_, g.oh), store);
            });
      }
    });
    return in_output_layout(op_, std::move(out));
  }

 private:
  TunableOp op_;
  int tile_w_;
  int64_t rows_;
  int64_t threads_;
  nhwc::Isa isa_ = nhwc::best_isa();  // the rows' code (channels_last/isa.h)
};

class DepthwiseConvFamily : public KernelFamily {
 public:
  std::string name() const override { return "depthwise"; }
  bool fuses_epilogue() const override { return true; }
  bool supports(const TunableOp& op) const override {
    return op.device == c10::DeviceType::CPU && op.dtype == c10::ScalarType::Float &&
           op.depthwise();
  }
  std::vector<tuning::Knob> knobs(const TunableOp&) const override {
    return {tuning::Knob::power_of_two_range("tile_w", 8, 64),
            tuning::Knob::power_of_two_range("rows", 1, 8), threads_knob()};
  }
  std::unique_ptr<TunedKernel> build(const TunableOp& op, const KnobValues& k) const override {
    return std::make_unique<DepthwiseConv>(op, static_cast<int>(k.value("tile_w")), k.value("rows"),
                                           k.value("threads"));
  }
};

}  // namespace

std::shared_ptr<const KernelFamily> depthwise_conv_family() {
  return std::make_shared<DepthwiseConvFamily>();
}

}  // namespace nimble::kernels

// Family "direct": nimble's direct convolution in a channel-blocked layout. The weight is
// packed once per weight version into [group][k / oc_tile][c][r][s][oc_tile] (output channels
// zero-padded to whole blocks), so that one tap of one input channel is a contiguous vector of
// `oc_tile` weights; the input is zero-padded once per call, so no tap needs a bounds check.
// Each work item is one output row of one output-channel block: `ow_tile` outputs by
// `oc_tile` channels are accumulated in registers over input channels in blocks of `ic_tile`
// (partial sums kept in a blocked output buffer), the inner loop over output channels
// vectorized, compiled for the kernel's Isa (channels_last/isa.h's run_for_isa).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>

#include "csrc/kernels/cpu/channels_last/isa.h"
#include "csrc/kernels/cpu/tuning_families/cpu_families.h"
#include "csrc/kernels/cpu/tuning_families/cpu_kernel_support.h"

namespace nimble::kernels {
namespace {

// Sizes of one group's problem on the padded input.
struct Geometry {
  int64_t c, hp, wp, ow, r, s, sh, sw, dh, dw;
};

// Accumulates OWT outputs (columns ox0.., input column ix0 = ox0 * sw) by OCB output channels
// over input channels [c0, c1) into `out` ([OWT][OCB]), starting from `init` ([OCB], the bias)
// when given, else from what `out` holds.
template <int OCB, int OWT>
__attribute__((always_inline)) inline void tile(const float* in, const float* weight,
                                                const float* init, float* out, const Geometry& g,
                                                int64_t iy0, int64_t ix0, int64_t c0, int64_t c1) {
  float acc[OWT][OCB];
  for (int i = 0; i < OWT; ++i)
    for (int j = 0; j < OCB; ++j) acc[i][j] = init ? init[j] : out[i * OCB + j];
  for (int64_t c = c0; c < c1; ++c) {
    const float* plane = in + c * g.hp * g.wp + iy0 * g.wp + ix0;
    const float* wc = weight + c * g.r * g.s * OCB;
    for (int64_t kr = 0; kr < g.r; ++kr) {
      const float* row = plane + kr * g.dh * g.wp;
      for (int64_t ks = 0; ks < g.s; ++ks) {
        const float* wv = wc + (kr * g.s + ks) * OCB;
        const float* src = row + ks * g.dw;
        for (int i = 0; i < OWT; ++i) {
          const float xv = src[i * g.sw];
          for (int j = 0; j < OCB; ++j) acc[i][j] += xv * wv[j];
        }
      }
    }
  }
  for (int i = 0; i < OWT; ++i)
    for (int j = 0; j < OCB; ++j) out[i * OCB + j] = acc[i][j];
}

// Output columns [ox0, ox1) of a row over input channels [c0, c1): whole tiles, then the
// columns left over one at a time.
template <int OCB, int OWT>
__attribute__((always_inline)) inline void sweep(const float* in, const float* weight,
                                                 const float* bias, float* out, const Geometry& g,
                                                 int64_t iy0, int64_t c0, int64_t c1, int64_t ox0,
                                                 int64_t ox1) {
  const float* init = c0 == 0 ? bias : nullptr;
  const int64_t full = std::min(ox1, g.ow / OWT * OWT);
  int64_t ox = ox0;
  for (; ox + OWT <= full; ox += OWT)
    tile<OCB, OWT>(in, weight, init, out + ox * OCB, g, iy0, ox * g.sw, c0, c1);
  for (; ox < ox1; ++ox) tile<OCB, 1>(in, weight, init, out + ox * OCB, g, iy0, ox * g.sw, c0, c1);
}

// One output row ([ow][OCB] at `out`) of one output-channel block; `c_outer` sweeps the row
// once per input-channel block (the block's weights stay in cache), otherwise each tile runs
// through every input-channel block (its partial sums stay in cache).
template <int OCB, int OWT>
__attribute__((always_inline)) inline void row(const float* in, const float* weight,
                                               const float* bias, float* out, const Geometry& g,
                                               int64_t iy0, int64_t ic_tile, bool c_outer) {
  if (c_outer) {
    for (int64_t c0 = 0; c0 < g.c; c0 += ic_tile)
      sweep<OCB, OWT>(in, weight, bias, out, g, iy0, c0, std::min(c0 + ic_tile, g.c), 0, g.ow);
  } else {
    for (int64_t ox0 = 0; ox0 < g.ow; ox0 += OWT)
      for (int64_t c0 = 0; c0 < g.c; c0 += ic_tile)
        sweep<OCB, OWT>(in, weight, bias, out, g, iy0, c0, std::min(c0 + ic_tile, g.c), ox0,
                        std::min(ox0 + OWT, g.ow));
  }
}

template <int OCB>
__attribute__((always_inline)) inline void row_of_width(int ow_tile, const float* in,
                                                        const float* weight, const float* bias,
                                                        float* out, const Geometry& g, int64_t iy0,
                                                        int64_t ic_tile, bool c_outer) {
  switch (ow_tile) {
    case 2:
      return row<OCB, 2>(in, weight, bias, out, g, iy0, ic_tile, c_outer);
    case 4:
      return row<OCB, 4>(in, weight, bias, out, g, iy0, ic_tile, c_outer);
    default:
      return row<OCB, 8>(in, weight, bias, out, g, iy0, ic_tile, c_outer);
  }
}

__attribute__((always_inline)) inline void row_dispatch(int oc_tile, int ow_tile, const float* in,
                                                        const float* weight, const float* bias,
                                                        float* out, const Geometry& g, int64_t iy0,
                                                        int64_t ic_tile, bool c_outer) {
  switch (oc_tile) {
    case 8:
      return row_of_width<8>(ow_tile, in, weight, bias, out, g, iy0, ic_tile, c_outer);
    case 16:
      return row_of_width<16>(ow_tile, in, weight, bias, out, g, iy0, ic_tile, c_outer);
    default:
      return row_of_width<32>(ow_tile, in, weight, bias, out, g, iy0, ic_tile, c_outer);
  }
}

class DirectConv : public TunedKernel {
 public:
  DirectConv(TunableOp op, int oc_tile, int64_t ic_tile, int ow_tile, bool c_outer, int64_t threads)
      : op_(std::move(op)),
        oc_tile_(oc_tile),
        ic_tile_(ic_tile),
        ow_tile_(ow_tile),
        c_outer_(c_outer),
        threads_(threads),
        kg_(op_.k / op_.groups),
        blocks_((kg_ + oc_tile - 1) / oc_tile),
        zero_bias_(at::zeros({op_.groups, blocks_ * oc_tile})) {}

  at::Tensor run(at::TensorList operands) const override {
    ThreadsScope threads(threads_);
    const int64_t groups = op_.groups, cg = op_.c / groups, oh = op_.out_h(), ow = op_.out_w();
    const int64_t padded_k = blocks_ * oc_tile_;
    const at::Tensor& weight = weight_.get(operands[1], [&](const at::Tensor& w) {
      at::Tensor padded = at::zeros({groups, padded_k, cg, op_.r, op_.s}, w.options());
      padded.narrow(1, 0, kg_).copy_(w.reshape({groups, kg_, cg, op_.r, op_.s}));
      return padded.view({groups, blocks_, oc_tile_, cg, op_.r, op_.s})
          .permute({0, 1, 3, 4, 5, 2})
          .contiguous();
    });
    const at::Tensor& bias =
        op_.bias ? bias_.get(operands[2],
                             [&](const at::Tensor& b) {
                               at::Tensor padded = at::zeros({groups, padded_k}, b.options());
                               padded.narrow(1, 0, kg_).copy_(b.view({groups, kg_}));
                               return padded;
                             })
                 : zero_bias_;
    const at::Tensor x = at::constant_pad_nd(operands[0], {op_.padding[1], op_.padding[1],
                                                           op_.padding[0], op_.padding[0]})
                             .contiguous();
    const Geometry g{cg,
                     x.size(2),
                     x.size(3),
                     ow,
                     op_.r,
                     op_.s,
                     op_.stride[0],
                     op_.stride[1],
                     op_.dilation[0],
                     op_.dilation[1]};
    at::Tensor blocked = at::empty({op_.n, groups, blocks_, oh, ow, oc_tile_}, x.options());
    const float* in = x.data_ptr<float>();
    const float* wt = weight.data_ptr<float>();
    const float* b = bias.data_ptr<float>();
    float* dst = blocked.data_ptr<float>();
    const int64_t weight_block = cg * op_.r * op_.s * oc_tile_;
    // Items: (image, group, output-channel block, output row), rows innermost.
    at::parallel_for(0, op_.n * groups * blocks_ * oh, 1, [&](int64_t begin, int64_t end) {
      for (int64_t item = begin; item < end; ++item) {
        const int64_t oy = item % oh, block = item / oh;  // block: (image, group, kb)
        const int64_t group_block = block % (groups * blocks_), image = block / (groups * blocks_);
        const int64_t group = group_block / blocks_;
        nhwc::run_for_isa(
            isa_, [&]() __attribute__((always_inline)) {
              row_dispatch(oc_tile_, ow_tile_, in + (image * groups + group) * cg * g.hp * g.wp,
                           wt + group_block * weight_block, b + group_block * oc_tile_,
                           dst + item * ow * oc_tile_, g, oy * g.sh, ic_tile_, c_outer_);
            });
      }
    });
    return unblock(blocked);
  }

 private:
  // `blocked` ([n][group][kb][oh][ow][oc_tile]) in the op's output layout, padding dropped.
  at::Tensor unblock(const at::Tensor& blocked) const {
    at::Tensor out = op_.empty_output();
    const int64_t oh = op_.out_h(), ow = op_.out_w();
    const auto st = out.strides();
    const float* src = blocked.data_ptr<float>();
    float* dst = out.data_ptr<float>();
    at::parallel_for(0, op_.n * op_.k, 1, [&](int64_t begin, int64_t end) {
      for (int64_t plane = begin; plane < end; ++plane) {
        const int64_t image = plane / op_.k, channel = plane % op_.k;
        const int64_t group = channel / kg_, kk = channel % kg_;
        const float* from =
            src + (((image * op_.groups + group) * blocks_ + kk / oc_tile_) * oh * ow) * oc_tile_ +
            kk % oc_tile_;
        float* to = dst + image * st[0] + channel * st[1];
        for (int64_t oy = 0; oy < oh; ++oy)
          for (int64_t ox = 0; ox < ow; ++ox)
            to[oy * st[2] + ox * st[3]] = from[(oy * ow + ox) * oc_tile_];
      }
    });
    return out;
  }

  TunableOp op_;
  int oc_tile_;
  int64_t ic_tile_;
  int ow_tile_;
  bool c_outer_;
  int64_t threads_;
  nhwc::Isa isa_ = nhwc::best_isa();  // the rows' code (channels_last/isa.h)
  int64_t kg_;                        // output channels per group
  int64_t blocks_;                    // output-channel blocks per group
  at::Tensor zero_bias_;
  DerivedTensor weight_, bias_;
};

class DirectConvFamily : public KernelFamily {
 public:
  std::string name() const override { return "direct"; }
  // Depthwise convolutions would fill one lane of each output-channel block: the depthwise
  // family is for them.
  bool supports(const TunableOp& op) const override {
    return op.device == c10::DeviceType::CPU && op.dtype == c10::ScalarType::Float &&
           !op.depthwise();
  }
  std::vector<tuning::Knob> knobs(const TunableOp& op) const override {
    int64_t most = 1;
    while (most < op.c / op.groups && most < 256) most *= 2;
    return {tuning::Knob::power_of_two_range("oc_tile", 8, 32),
            tuning::Knob::power_of_two_range("ic_tile", std::min<int64_t>(4, most), most),
            tuning::Knob::power_of_two_range("ow_tile", 2, 8),
            tuning::Knob::categorical("order", {"w_outer", "c_outer"}), threads_knob()};
  }
  std::unique_ptr<TunedKernel> build(const TunableOp& op, const KnobValues& k) const override {
    return std::make_unique<DirectConv>(op, static_cast<int>(k.value("oc_tile")),
                                        k.value("ic_tile"), static_cast<int>(k.value("ow_tile")),
                                        k.label("order") == "c_outer", k.value("threads"));
  }
};

}  // namespace

std::shared_ptr<const KernelFamily> direct_conv_family() {
  return std::make_shared<DirectConvFamily>();
}

}  // namespace nimble::kernels

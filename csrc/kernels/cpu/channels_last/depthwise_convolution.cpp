// Depthwise convolution over NHWC activations (depthwise_convolution.h). Channels are the
// vector lanes: an output pixel's channels are contiguous, and so are those of the input
// pixel each tap reads and of each tap's packed weights. Tap rows outside the image are
// dropped once a row; the row is then computed in three parts:
// - border pixels (whose taps run off the image's sides), one pixel a block over its own
//   clipped range of tap columns, up to four channel vectors at a time;
// - the interior in register windows where the kernel allows (window(): 3, 5 or 7 tap
//   columns one pixel apart, stride 1 or 2): accumulators for P pixels and a tap row's
//   weights held in registers, each input vector loaded once for all taps that read it;
// - the rest of the interior in blocks (block()) of P pixels by up to four channel
//   vectors, each weight vector loaded once for the P pixels, inputs read by the FMAs.
// Interior code has no bounds checks. Sums start from the bias; a residual, relu, clamp, silu,
// sigmoid, hardswish and hardsigmoid are applied in registers as results are stored, other
// activations by finish() over the row right after it was written (it is in L1 then). (Silu by
// finish() cost more than the convolution on efficientnet's large maps: 0.75 ns an element, after
// the row had left L1.) The vector code is written once, in depthwise_convolution.inc, over the
// AVX-512 and AVX2 operations of vector_ops.h (isa.h).
#include "csrc/kernels/cpu/channels_last/depthwise_convolution.h"

#include <algorithm>
#include <limits>
#include <stdexcept>

#include "csrc/kernels/cpu/channels_last/vector_ops.h"

namespace nimble::kernels::nhwc {
namespace {

constexpr int64_t kChannelPad = 16;  // AVX-512's width; a multiple of AVX2's
// Most channel vectors a block (depthwise_convolution.inc says why).
constexpr int kMostChannelVectors = 4;
constexpr float kInfinity = std::numeric_limits<float>::infinity();

// One output row of one image, as every path below reads it.
struct Row {
  const float* in;        // input at the first tap row inside the image, column 0
  const float* weight;    // packed taps from that tap row on
  const float* bias;      // padded
  float* out;             // the output row
  const float* residual;  // the residual row, null: none (or left to finish())
  int64_t tap_rows;       // tap rows inside the image
  int64_t row_step;       // input floats between tap rows
  int64_t col_step;       // input floats between tap columns
  int64_t pixel_step;     // input floats between neighbouring output pixels
  int64_t channels, padded, kernel_w;
  int64_t width, stride_w, pad_w, dilation_w, out_width;
  int64_t inner_begin, inner_end;  // output columns whose taps all land inside the image
  // DepthwiseBlocking's, resolved: most vectors a channel group (1-4), most pixels a block
  // (1 or more), and whether register windows may run.
  int64_t max_vectors, max_pixels;
  bool windows;
  // Results are stored as min(max(y, lo), hi): +-infinity for none (and for the activations
  // finish() applies afterwards), 0 and infinity for relu.
  float lo, hi;
  // The activation applied in registers before the store by vector_math.inc, or none.
  enum class Curve : int8_t { kNone, kSigmoid, kSilu, kHardsigmoid, kHardswish } curve;
};

// The tap columns [first, first + count) of output column `ox` that land inside the image.
struct TapColumns {
  int64_t first, count;
};
inline TapColumns tap_columns(const Row& r, int64_t ox) {
  const int64_t x0 = ox * r.stride_w - r.pad_w;
  const int64_t first = x0 >= 0 ? 0 : (-x0 + r.dilation_w - 1) / r.dilation_w;
  const int64_t last = r.width - 1 - x0 < 0 ? 0 : (r.width - 1 - x0) / r.dilation_w + 1;
  return {first, std::max<int64_t>(0, std::min(last, r.kernel_w) - first)};
}

// depthwise_convolution.inc for each ISA (isa.h), with the block sizes that fit its registers.
#pragma GCC push_options
#pragma GCC target("avx512f")
namespace avx512 {
struct Ops : Avx512Ops {
  // Output pixels a block holds for `vectors` channel vectors: P x V accumulators, V
  // weights and the loads fit the 32 registers.
  static constexpr int pixels(int vectors) { return vectors <= 2 ? 8 : vectors == 3 ? 5 : 4; }
  // window(): P x V accumulators, KW x V weights and V inputs.
  static constexpr int kWindowVectors = 2;
  static constexpr int kWindowStrides = 2;
  static constexpr int window_pixels(int kw) { return kw == 7 ? 6 : 8; }
};
#include "csrc/kernels/cpu/channels_last/vector_math.inc"
// (after vector_math.inc, whose activations it applies)
#include "csrc/kernels/cpu/channels_last/depthwise_convolution.inc"
}  // namespace avx512
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx2,fma")
namespace avx2 {
struct Ops : Avx2Ops {
  // 16 registers, at least 12 accumulators: two FMAs a cycle, four cycles each.
  static constexpr int pixels(int vectors) {
    return vectors == 1 ? 12 : vectors == 2 ? 6 : vectors == 3 ? 4 : 3;
  }
  // window(): P accumulators, KW weights and an input, one vector each.
  static constexpr int kWindowVectors = 1;
  // Measured: at stride 2 the windows of one vector lose to blocks.
  static constexpr int kWindowStrides = 1;
  static constexpr int window_pixels(int kw) { return kw == 7 ? 6 : 8; }
};
#include "csrc/kernels/cpu/channels_last/vector_math.inc"
// (after vector_math.inc, whose activations it applies)
#include "csrc/kernels/cpu/channels_last/depthwise_convolution.inc"
}  // namespace avx2
#pragma GCC pop_options

// Plain C++ the compiler vectorizes for the baseline ISA: the activation is left to finish().
void portable_row(const Row& r) {
  const int64_t channels = r.channels;
  for (int64_t ox = 0; ox < r.out_width; ++ox) {
    float* __restrict out = r.out + ox * channels;
    std::copy(r.bias, r.bias + channels, out);
    const TapColumns t = tap_columns(r, ox);
    if (t.count == 0 || r.tap_rows == 0) continue;
    const float* in = r.in + (ox * r.stride_w - r.pad_w + t.first * r.dilation_w) * channels;
    const float* w = r.weight + t.first * r.padded;
    for (int64_t ky = 0; ky < r.tap_rows; ++ky) {
      for (int64_t kx = 0; kx < t.count; ++kx) {
        const float* __restrict src = in + ky * r.row_step + kx * r.col_step;
        const float* __restrict wt = w + (ky * r.kernel_w + kx) * r.padded;
        for (int64_t c = 0; c < channels; ++c) out[c] += src[c] * wt[c];
      }
    }
  }
}

}  // namespace

DepthwiseWeights::DepthwiseWeights(const float* weight, const float* bias,
                                   const ConvolutionGeometry& geometry, Isa isa)
    : channels_(geometry.in_channels),
      padded_channels_((geometry.in_channels + kChannelPad - 1) / kChannelPad * kChannelPad),
      kernel_h_(geometry.kernel_h),
      kernel_w_(geometry.kernel_w),
      isa_(isa) {
  if (geometry.groups != channels_ || geometry.out_channels != channels_ || channels_ <= 0)
    throw std::invalid_argument("depthwise: groups, in_channels and out_channels must agree");
  if (!supports(isa)) throw std::invalid_argument("depthwise: this CPU cannot run that Isa");
  const int64_t taps = kernel_h_ * kernel_w_;
  packed_.assign(taps * padded_channels_, 0.0F);
  for (int64_t c = 0; c < channels_; ++c) {
    for (int64_t t = 0; t < taps; ++t) packed_[t * padded_channels_ + c] = weight[c * taps + t];
  }
  bias_.assign(padded_channels_, 0.0F);
  if (bias) std::copy(bias, bias + channels_, bias_.begin());
}

int64_t DepthwiseWeights::bytes() const {
  return static_cast<int64_t>((packed_.size() + bias_.size()) * sizeof(float));
}

void depthwise_rows(const ConvolutionGeometry& g, const DepthwiseWeights& weights,
                    const float* input, float* output, const float* residual,
                    const Epilogue& epilogue, int64_t row_begin, int64_t row_end,
                    const DepthwiseBlocking& blocking) {
  if (blocking.channel_vectors < 0 || blocking.pixels < 0 || blocking.pieces < 0)
    throw std::invalid_argument("depthwise: negative blocking parameter (0 is the rule's)");
  const int64_t channels = weights.channels_;
  const int64_t out_height = g.out_height(), out_width = g.out_width();
  const int64_t row_floats = out_width * channels;
  const Activation a = epilogue.activation;
  // Whether finish() applies the epilogue (residual included) after each row.
  const bool deferred = weights.isa_ == Isa::kPortable || a == Activation::kLeakyRelu ||
                        a == Activation::kTanh || a == Activation::kGeluErf ||
                        a == Activation::kGeluTanh;
  Row r{};
  r.bias = weights.bias_.data();
  r.row_step = g.dilation_h * g.width * channels;
  r.col_step = g.dilation_w * channels;
  r.pixel_step = g.stride_w * channels;
  r.channels = channels;
  r.padded = weights.padded_channels_;
  r.kernel_w = weights.kernel_w_;
  r.width = g.width;
  r.stride_w = g.stride_w;
  r.pad_w = g.pad_w;
  r.dilation_w = g.dilation_w;
  r.out_width = out_width;
  r.max_vectors = blocking.channel_vectors > 0
                      ? std::min<int64_t>(blocking.channel_vectors, kMostChannelVectors)
                      : kMostChannelVectors;
  r.max_pixels = blocking.pixels > 0 ? blocking.pixels : std::numeric_limits<int64_t>::max();
  r.windows = blocking.windows;
  // Interior: ox * stride - pad >= 0 and ox * stride - pad + (kernel_w - 1) * dilation < width.
  const int64_t last_start = g.width - 1 + g.pad_w - (r.kernel_w - 1) * g.dilation_w;
  r.inner_begin = std::min(out_width, (g.pad_w + g.stride_w - 1) / g.stride_w);
  r.inner_end = std::max(r.inner_begin,
                         last_start < 0 ? 0 : std::min(out_width, last_start / g.stride_w + 1));
  r.lo = deferred || a == Activation::kNone ? -kInfinity
         : a == Activation::kRelu           ? 0.0F
                                            : epilogue.lo;
  r.hi = deferred || a != Activation::kClamp ? kInfinity : epilogue.hi;
  r.curve = deferred                        ? Row::Curve::kNone
            : a == Activation::kSilu        ? Row::Curve::kSilu
            : a == Activation::kSigmoid     ? Row::Curve::kSigmoid
            : a == Activation::kHardswish   ? Row::Curve::kHardswish
            : a == Activation::kHardsigmoid ? Row::Curve::kHardsigmoid
                                            : Row::Curve::kNone;
  for (int64_t row = row_begin; row < row_end; ++row) {
    const int64_t image = row / out_height, oy = row % out_height;
    const int64_t y0 = oy * g.stride_h - g.pad_h;
    const int64_t first = y0 >= 0 ? 0 : (-y0 + g.dilation_h - 1) / g.dilation_h;
    const int64_t last = g.height - 1 - y0 < 0 ? 0 : (g.height - 1 - y0) / g.dilation_h + 1;
    r.tap_rows = std::max<int64_t>(0, std::min(last, weights.kernel_h_) - first);
    r.in = r.tap_rows > 0
               ? input + ((image * g.height + y0 + first * g.dilation_h) * g.width) * channels
               : input;
    r.weight = weights.packed_.data() + (r.tap_rows > 0 ? first * r.kernel_w * r.padded : 0);
    r.out = output + row * row_floats;
    const float* res = residual ? residual + row * row_floats : nullptr;
    r.residual = deferred ? nullptr : res;
    switch (weights.isa_) {
      case Isa::kAvx512:
        avx512::row(r);
        break;
      case Isa::kAvx2:
        avx2::row(r);
        break;
      case Isa::kPortable:
        portable_row(r);
        break;
    }
    if (deferred) finish(weights.isa_, r.out, res, row_floats, epilogue);
  }
}

}  // namespace nimble::kernels::nhwc

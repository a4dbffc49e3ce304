#pragma once
// Depthwise convolution (groups == in_channels == out_channels) over channels-last (NHWC)
// activations, with the weight packed once and the epilogue (epilogue.h) applied as results
// are stored. Vectorized over channels: AVX-512 or AVX2 code, by the Isa the weights were
// packed for (epilogue.h; by default the best this CPU has), a portable path otherwise.
// Torch-free.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "csrc/kernels/cpu/channels_last/convolution_geometry.h"
#include "csrc/kernels/cpu/channels_last/epilogue.h"
#include "csrc/kernels/cpu/channels_last/kernel_parameters.h"
#include "csrc/kernels/cpu/channels_last/packed_allocator.h"

namespace nimble::kernels::nhwc {

class DepthwiseWeights {
 public:
  // `weight`: PyTorch's [C, 1, KH, KW], contiguous; `bias`: [C] or null (zeros).
  DepthwiseWeights(const float* weight, const float* bias, const ConvolutionGeometry& geometry,
                   Isa isa = best_isa());
  Isa isa() const { return isa_; }
  // Bytes held by the packed weight and bias.
  int64_t bytes() const;

 private:
  friend void depthwise_rows(const ConvolutionGeometry&, const DepthwiseWeights&, const float*,
                             float*, const float*, const Epilogue&, int64_t, int64_t,
                             const DepthwiseBlocking&);
  // Storage on cache-line boundaries: with the padding below, no vector load of a tap's
  // weights straddles two lines (which costs AVX-512 a second load).
  using Floats = std::vector<float, PackedAllocator<float>>;

  // [kernel_h * kernel_w taps][padded_channels_]: one contiguous run of channels a tap, so
  // that a vector of channels loads a tap's weights at once; the padding (zeros, up to a
  // multiple of 16 floats) lets the widest vector read it whole.
  Floats packed_;
  Floats bias_;  // [padded_channels_], zeros past the channels (or all: no bias)
  int64_t channels_ = 0, padded_channels_ = 0, kernel_h_ = 1, kernel_w_ = 1;
  Isa isa_;
};

// Output rows [row_begin, row_end) of the convolution, a row being one output image row
// (index image * out_height + oy, so 0 <= row < images * out_height()). `input` is NHWC
// contiguous [images][height][width][in_channels]; `output` and `residual` (null: none)
// NHWC contiguous [images][out_height][out_width][out_channels]. out = epilogue(conv + bias
// (+ residual)). Disjoint row ranges may run on different threads at once. `output` must not
// overlap `input` or `residual` (a row's sums are stored before its epilogue reads them).
// `blocking` (kernel_parameters.h; its pieces are the caller's to use): the rule's where 0.
void depthwise_rows(const ConvolutionGeometry& geometry, const DepthwiseWeights& weights,
                    const float* input, float* output, const float* residual,
                    const Epilogue& epilogue, int64_t row_begin, int64_t row_end,
                    const DepthwiseBlocking& blocking = {});

}  // namespace nimble::kernels::nhwc

#pragma once
// Max and average pooling over NHWC float arrays, as ATen computes them (NaN wins a max
// window; padding never does; an average divides by ATen's divisor), for the lowered
// program's channels-last values (nhwc_tensor_ops.h). ATen's own channels-last max pooling
// also writes the window's argmax: 57 us a call on googlenet's 8x8 maps at 64x64 pixels,
// where this takes a few.
#include <cstdint>

#include "csrc/kernels/cpu/channels_last/isa.h"

namespace nimble::kernels::nhwc {

struct PoolGeometry {
  int64_t batch = 1, height = 1, width = 1, channels = 1;
  int64_t out_height = 1, out_width = 1;  // as the caller computed them (ceil_mode included)
  int64_t kernel_h = 1, kernel_w = 1, stride_h = 1, stride_w = 1;
  int64_t pad_h = 0, pad_w = 0, dilation_h = 1, dilation_w = 1;
  int64_t rows() const { return batch * out_height; }  // the unit of work of a split
};

// Output rows [row_begin, row_end) of batch * out_height: x is [batch, height, width,
// channels], y [batch, out_height, out_width, channels], both dense. Runs `isa`'s code.
void max_pool(Isa isa, const float* x, float* y, const PoolGeometry& g, int64_t row_begin,
              int64_t row_end);
// `divisor` 0: ATen's (the window clipped to the padded input with count_include_pad, else
// to the input); otherwise divisor_override. Dilation must be 1, as avg_pool2d has none.
void avg_pool(const float* x, float* y, const PoolGeometry& g, bool count_include_pad,
              int64_t divisor, int64_t row_begin, int64_t row_end);

}  // namespace nimble::kernels::nhwc

#pragma once
// Per-channel ops on NHWC float arrays that the lowered program runs between convolutions in
// channels_last (nhwc_tensor_ops.h): concatenation along channels (densenet's blocks make 62
// at 64x64 pixels, 7 us a call through ATen) and the mean over pixels (squeeze-excitation
// blocks and global pooling, 8 us a call through ATen). (The inference batch norm is
// epilogue.h's scale_shift.)
#include <cstdint>

namespace nimble::kernels::nhwc {

// y[p, :] = the inputs' rows of pixel p one after the other, for pixels [begin, end): input i
// is [pixels, channels[i]], y [pixels, sum of channels], all dense.
void concatenate_channels(const float* const* inputs, const int64_t* channels, int64_t count,
                          float* y, int64_t begin, int64_t end);

// y[n, c] = the mean of x[n, p, c] over the `pixels` pixels of images [begin, end); x is
// [images, pixels, channels], y [images, channels].
void mean_over_pixels(const float* x, float* y, int64_t pixels, int64_t channels, int64_t begin,
                      int64_t end);

}  // namespace nimble::kernels::nhwc

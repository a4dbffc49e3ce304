#pragma once
// Per-channel ops on NHWC float arrays that the lowered program runs between convolutions in
// channels_last (nhwc_tensor_ops.h): concatenation along channels (densenet's blocks make 62
// at 64x64 pixels, 7 us a call through ATen), ShuffleNet's channel shuffle of a
// concatenation, and the mean over pixels (squeeze-excitation blocks and global pooling,
// 8 us a call through ATen). (The inference batch norm is epilogue.h's scale_shift.)
#include <cstdint>

namespace nimble::kernels::nhwc {

// One input of a concatenation: `channels` floats per pixel, pixel p's at
// data + p * pixel_stride (pixel_stride > channels where the input is a slice of the
// channels of a wider tensor, as ShuffleNet's split halves are).
struct ChannelRows {
  const float* data;
  int64_t channels;
  int64_t pixel_stride;
};

// y[p, :] = the inputs' rows of pixel p one after the other, for pixels [begin, end); y is
// dense [pixels, sum of channels].
void concatenate_channels(const ChannelRows* inputs, int64_t count, float* y, int64_t begin,
                          int64_t end);

// The concatenation of the inputs (x, c channels), shuffled in `groups` (which divides c):
// y[p, j * groups + i] = x[p, i * (c / groups) + j], for pixels [begin, end); y is dense
// [pixels, c]. (torch's view(n, groups, c / groups, h, w).transpose(1, 2) in NHWC.)
void shuffle_channels(const ChannelRows* inputs, int64_t count, int64_t groups, float* y,
                      int64_t begin, int64_t end);

// y[n, p, c] = x[n, c, p] for the pixels [begin, end) of all `images` (flattened images x
// pixels): an NCHW array [images, channels, pixels] to NHWC [images, pixels, channels] (a
// program's input on its way to the first convolution).
void to_channels_last(const float* x, float* y, int64_t channels, int64_t pixels, int64_t begin,
                      int64_t end);

// y[n, c] = the mean of x[n, p, c] over the `pixels` pixels of images [begin, end); x is
// [images, pixels, channels], y [images, channels].
void mean_over_pixels(const float* x, float* y, int64_t pixels, int64_t channels, int64_t begin,
                      int64_t end);

}  // namespace nimble::kernels::nhwc

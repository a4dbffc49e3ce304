#pragma once
// Per-channel ops on NHWC float arrays that the lowered program runs between convolutions in
// channels_last (nhwc_tensor_ops.h): concatenation along channels (densenet's blocks make 62
// at 64x64 pixels, 7 us a call through ATen), ShuffleNet's channel shuffle of a
// concatenation, the mean over pixels (squeeze-excitation blocks and global pooling,
// 8 us a call through ATen) and the channel-wise product of squeeze-excitation. (The inference
// batch norm is epilogue.h's scale_shift.)
#include <cstdint>

#include "csrc/kernels/cpu/channels_last/isa.h"

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
void to_channels_last(Isa isa, const float* x, float* y, int64_t channels, int64_t pixels,
                      int64_t begin, int64_t end);

// Channels a unit of mean_over_pixels: a cache line of each pixel, so that the units of one
// image (efficientnet's first squeeze-excitation: 32 channels) can run on different threads.
constexpr int64_t kMeanChannels = 16;
// Units of mean_over_pixels for `images` images of `channels` channels.
inline int64_t mean_units(int64_t images, int64_t channels) {
  return images * ((channels + kMeanChannels - 1) / kMeanChannels);
}

// y[n, c] = the mean of x[n, p, c] over the `pixels` pixels, for the units [begin, end) of
// mean_units(): unit u is image u / blocks, channels [b * kMeanChannels, ...) of block
// b = u % blocks. x is [images, pixels, channels], y [images, channels].
// `isa`: the code that runs (isa.h).
void mean_over_pixels(Isa isa, const float* x, float* y, int64_t pixels, int64_t channels,
                      int64_t begin, int64_t end);

// y[n, p, c] = x[n, p, c] * scale[n, c] for the pixels [begin, end) of all images (flattened
// images x pixels): a squeeze-excitation block's channel-wise product (x * s, s of sizes
// [n, c, 1, 1]). x and y are [images, pixels, channels], not overlapping, scale [images, channels].
void scale_channels(Isa isa, const float* x, const float* scale, float* y, int64_t pixels,
                    int64_t channels, int64_t begin, int64_t end);

}  // namespace nimble::kernels::nhwc

#include "csrc/kernels/cpu/channels_last/channel_ops.h"

#include <algorithm>
#include <cstring>
#include <vector>

namespace nimble::kernels::nhwc {

namespace {

int64_t total_channels(const ChannelRows* inputs, int64_t count) {
  int64_t total = 0;
  for (int64_t i = 0; i < count; ++i) total += inputs[i].channels;
  return total;
}

}  // namespace

void concatenate_channels(const ChannelRows* inputs, int64_t count, float* y, int64_t begin,
                          int64_t end) {
  const int64_t total = total_channels(inputs, count);
  for (int64_t p = begin; p < end; ++p) {
    float* out = y + p * total;
    for (int64_t i = 0; i < count; ++i) {
      std::memcpy(out, inputs[i].data + p * inputs[i].pixel_stride,
                  static_cast<size_t>(inputs[i].channels) * sizeof(float));
      out += inputs[i].channels;
    }
  }
}

void shuffle_channels(const ChannelRows* inputs, int64_t count, int64_t groups, float* y,
                      int64_t begin, int64_t end) {
  const int64_t total = total_channels(inputs, count);
  const int64_t per_group = total / groups;
  if (count == 2 && groups == 2 && inputs[0].channels == per_group) {
    // ShuffleNet's case, two halves interleaved: y[2j] = a[j], y[2j + 1] = b[j].
    for (int64_t p = begin; p < end; ++p) {
      const float* __restrict a = inputs[0].data + p * inputs[0].pixel_stride;
      const float* __restrict b = inputs[1].data + p * inputs[1].pixel_stride;
      float* __restrict out = y + p * total;
      for (int64_t j = 0; j < per_group; ++j) {
        out[2 * j] = a[j];
        out[2 * j + 1] = b[j];
      }
    }
    return;
  }
  // Where each output channel comes from: input and channel within it.
  std::vector<const float*> source(static_cast<size_t>(total));
  std::vector<int64_t> stride(static_cast<size_t>(total));
  for (int64_t o = 0; o < total; ++o) {
    int64_t s = (o % groups) * per_group + o / groups;
    int64_t i = 0;
    while (s >= inputs[i].channels) s -= inputs[i++].channels;
    source[static_cast<size_t>(o)] = inputs[i].data + s;
    stride[static_cast<size_t>(o)] = inputs[i].pixel_stride;
  }
  for (int64_t p = begin; p < end; ++p) {
    float* out = y + p * total;
    for (int64_t o = 0; o < total; ++o)
      out[o] = source[static_cast<size_t>(o)][p * stride[static_cast<size_t>(o)]];
  }
}

void to_channels_last(const float* x, float* y, int64_t channels, int64_t pixels, int64_t begin,
                      int64_t end) {
  // Blocks of pixels: each channel's run of a block is read in one sweep (a few cache lines),
  // and the block's rows are written whole.
  constexpr int64_t kBlock = 64;
  for (int64_t first = begin; first < end;) {
    const int64_t image = first / pixels, pixel = first % pixels;
    const int64_t count = std::min({kBlock, end - first, pixels - pixel});
    const float* in = x + image * channels * pixels + pixel;
    float* __restrict out = y + first * channels;
    for (int64_t c = 0; c < channels; ++c) {
      const float* __restrict plane = in + c * pixels;
      for (int64_t p = 0; p < count; ++p) out[p * channels + c] = plane[p];
    }
    first += count;
  }
}

void mean_over_pixels(const float* x, float* y, int64_t pixels, int64_t channels, int64_t begin,
                      int64_t end) {
  for (int64_t n = begin; n < end; ++n) {
    float* __restrict out = y + n * channels;
    std::fill(out, out + channels, 0.0F);
    for (int64_t p = 0; p < pixels; ++p) {
      const float* __restrict in = x + (n * pixels + p) * channels;
      for (int64_t c = 0; c < channels; ++c) out[c] += in[c];
    }
    const float scale = static_cast<float>(pixels);
    for (int64_t c = 0; c < channels; ++c) out[c] /= scale;
  }
}

}  // namespace nimble::kernels::nhwc

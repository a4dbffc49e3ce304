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

namespace {

#define NIMBLE_CHANNEL_OPS_INLINE __attribute__((always_inline)) inline

// Plain C++ that run_for_isa() compiles for each ISA (isa.h): ATen's own loops are vectorized
// for AVX2 and AVX-512, and the baseline ISA's 4-float vectors lost to them.
NIMBLE_CHANNEL_OPS_INLINE void mean_body(const float* x, float* y, int64_t pixels, int64_t channels,
                                         int64_t begin, int64_t end) {
  constexpr int64_t kWidth = kMeanChannels;
  // Four pixels' partial sums side by side: one sum a lane would chain every add of the
  // image's pixels through one register.
  constexpr int64_t kChains = 4;
  const int64_t blocks = (channels + kWidth - 1) / kWidth;
  for (int64_t u = begin; u < end; ++u) {
    const int64_t image = u / blocks, first = (u % blocks) * kWidth;
    const int64_t count = std::min(kWidth, channels - first);
    const float* in = x + image * pixels * channels + first;
    float sum[kChains][kWidth] = {};
    int64_t p = 0;
    if (count == kWidth) {
      for (; p + kChains <= pixels; p += kChains) {
        for (int64_t k = 0; k < kChains; ++k) {
          const float* __restrict row = in + (p + k) * channels;
          for (int64_t c = 0; c < kWidth; ++c) sum[k][c] += row[c];
        }
      }
    }
    for (; p < pixels; ++p) {
      const float* __restrict row = in + p * channels;
      for (int64_t c = 0; c < count; ++c) sum[0][c] += row[c];
    }
    const float scale = static_cast<float>(pixels);
    for (int64_t c = 0; c < count; ++c)
      y[image * channels + first + c] = ((sum[0][c] + sum[1][c]) + (sum[2][c] + sum[3][c])) / scale;
  }
}

NIMBLE_CHANNEL_OPS_INLINE void scale_body(const float* x, const float* scale, float* y,
                                          int64_t pixels, int64_t channels, int64_t begin,
                                          int64_t end) {
  // Image by image: a division a pixel took as long as its product (32 channels).
  for (int64_t p = begin; p < end;) {
    const int64_t image = p / pixels, last = std::min(end, (image + 1) * pixels);
    const float* __restrict s = scale + image * channels;
    for (; p < last; ++p) {
      const float* __restrict in = x + p * channels;
      float* __restrict out = y + p * channels;
      for (int64_t c = 0; c < channels; ++c) out[c] = in[c] * s[c];
    }
  }
}

// Blocks of pixels: each channel's run of a block is read in one sweep (a few cache lines),
// and the block's rows are written whole. `kChannels` > 0: that many channels, known to the
// compiler, which then interleaves whole vectors of the planes (3 channels, a program's
// input: the stores of one float each ran at 0.4 ns a float, 5-7 us of the 7x7 stem's 120 at
// 64x64 and 60-70 of its 1350 at 224x224, one thread).
template <int64_t kChannels>
NIMBLE_CHANNEL_OPS_INLINE void to_channels_last_body(const float* x, float* y, int64_t channels,
                                                     int64_t pixels, int64_t begin, int64_t end) {
  constexpr int64_t kBlock = 64;
  const int64_t c_count = kChannels > 0 ? kChannels : channels;
  for (int64_t first = begin; first < end;) {
    const int64_t image = first / pixels, pixel = first % pixels;
    const int64_t count = std::min({kBlock, end - first, pixels - pixel});
    const float* in = x + image * c_count * pixels + pixel;
    float* __restrict out = y + first * c_count;
    if constexpr (kChannels == 3) {
      const float* __restrict p0 = in;
      const float* __restrict p1 = in + pixels;
      const float* __restrict p2 = in + 2 * pixels;
      for (int64_t p = 0; p < count; ++p) {
        out[3 * p] = p0[p];
        out[3 * p + 1] = p1[p];
        out[3 * p + 2] = p2[p];
      }
    } else {
      for (int64_t c = 0; c < c_count; ++c) {
        const float* __restrict plane = in + c * pixels;
        for (int64_t p = 0; p < count; ++p) out[p * c_count + c] = plane[p];
      }
    }
    first += count;
  }
}

#undef NIMBLE_CHANNEL_OPS_INLINE

}  // namespace

void mean_over_pixels(Isa isa, const float* x, float* y, int64_t pixels, int64_t channels,
                      int64_t begin, int64_t end) {
  run_for_isa(
      isa, [&]() __attribute__((always_inline)) { mean_body(x, y, pixels, channels, begin, end); });
}

void scale_channels(Isa isa, const float* x, const float* scale, float* y, int64_t pixels,
                    int64_t channels, int64_t begin, int64_t end) {
  run_for_isa(
      isa, [&]() __attribute__((always_inline)) {
        scale_body(x, scale, y, pixels, channels, begin, end);
      });
}

void to_channels_last(Isa isa, const float* x, float* y, int64_t channels, int64_t pixels,
                      int64_t begin, int64_t end) {
  run_for_isa(
      isa, [&]() __attribute__((always_inline)) {
        if (channels == 3) {
          to_channels_last_body<3>(x, y, channels, pixels, begin, end);
        } else {
          to_channels_last_body<0>(x, y, channels, pixels, begin, end);
        }
      });
}

}  // namespace nimble::kernels::nhwc

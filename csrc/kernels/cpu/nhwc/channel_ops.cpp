#include "csrc/kernels/cpu/nhwc/channel_ops.h"

#include <algorithm>
#include <cstring>

namespace nimble::kernels::nhwc {

void concatenate_channels(const float* const* inputs, const int64_t* channels, int64_t count,
                          float* y, int64_t begin, int64_t end) {
  int64_t total = 0;
  for (int64_t i = 0; i < count; ++i) total += channels[i];
  for (int64_t p = begin; p < end; ++p) {
    float* out = y + p * total;
    for (int64_t i = 0; i < count; ++i) {
      std::memcpy(out, inputs[i] + p * channels[i],
                  static_cast<size_t>(channels[i]) * sizeof(float));
      out += channels[i];
    }
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

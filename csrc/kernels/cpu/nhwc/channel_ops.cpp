#include "csrc/kernels/cpu/nhwc/channel_ops.h"

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

}  // namespace nimble::kernels::nhwc

#include "csrc/kernels/cpu/channels_last/pooling.h"

#include <algorithm>
#include <limits>

#include "csrc/kernels/cpu/channels_last/vector_ops.h"

namespace nimble::kernels::nhwc {

namespace {

// The taps [first, first + count) of a window along one axis that fall inside the input
// (ATen's -inf padding never wins a max, so they are all a max reads).
struct Taps {
  int64_t first, count;
};

Taps taps(int64_t o, int64_t kernel, int64_t stride, int64_t pad, int64_t dilation, int64_t size) {
  const int64_t start = o * stride - pad;
  const int64_t first = start >= 0 ? 0 : (-start + dilation - 1) / dilation;
  const int64_t last = size - 1 - start < 0 ? 0 : (size - 1 - start) / dilation + 1;
  return {first, std::max<int64_t>(0, std::min(last, kernel) - first)};
}

// pooling.inc for each ISA (isa.h). A NaN in a window wins it: the maxima keep to ATen's
// order on ties, and a mask of the lanes that saw a NaN puts it back at the end.
#pragma GCC push_options
#pragma GCC target("avx512f")
namespace avx512 {
struct Ops : Avx512Ops {
  using NanMask = __mmask16;
  static constexpr int kSeparableBlock = 4;  // 3 x 4 column maxima and 4 inputs
  static __attribute__((always_inline)) inline NanMask no_nan() { return 0; }
  static __attribute__((always_inline)) inline NanMask or_nan(NanMask a, NanMask b) {
    return a | b;
  }
  static __attribute__((always_inline)) inline NanMask add_nan(NanMask m, Vec x) {
    return m | _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
  }
  static __attribute__((always_inline)) inline Vec with_nan(Vec y, NanMask m) {
    return _mm512_mask_mov_ps(y, m, _mm512_set1_ps(__builtin_nanf("")));
  }
};
#include "csrc/kernels/cpu/channels_last/pooling.inc"
}  // namespace avx512
#pragma GCC pop_options

// AVX2 has no mask registers: the lanes that saw a NaN are a vector of compare results.
#pragma GCC push_options
#pragma GCC target("avx2,fma")
namespace avx2 {
struct Ops : Avx2Ops {
  using NanMask = __m256;
  // 3 x 2 column maxima, their 3 x 2 NaN lanes and 2 inputs fit the 16 registers.
  static constexpr int kSeparableBlock = 2;
  static __attribute__((always_inline)) inline NanMask no_nan() { return _mm256_setzero_ps(); }
  static __attribute__((always_inline)) inline NanMask or_nan(NanMask a, NanMask b) {
    return _mm256_or_ps(a, b);
  }
  static __attribute__((always_inline)) inline NanMask add_nan(NanMask m, Vec x) {
    return _mm256_or_ps(m, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
  }
  static __attribute__((always_inline)) inline Vec with_nan(Vec y, NanMask m) {
    return _mm256_blendv_ps(y, _mm256_set1_ps(__builtin_nanf("")), m);
  }
};
#include "csrc/kernels/cpu/channels_last/pooling.inc"
}  // namespace avx2
#pragma GCC pop_options

// Calls f(image, out, oh, ow) for each output pixel of rows [row_begin, row_end): `image` is
// that pixel's input image, `out` its `channels` results.
template <typename F>
void for_each_output_pixel(const float* x, float* y, const PoolGeometry& g, int64_t row_begin,
                           int64_t row_end, F f) {
  for (int64_t row = row_begin; row < row_end; ++row) {
    const int64_t oh = row % g.out_height;
    const float* image = x + row / g.out_height * g.height * g.width * g.channels;
    for (int64_t ow = 0; ow < g.out_width; ++ow)
      f(image, y + (row * g.out_width + ow) * g.channels, oh, ow);
  }
}

// The baseline ISA's max pooling: plain C++ the compiler vectorizes.
void portable_max_pool(const float* x, float* y, const PoolGeometry& g, int64_t row_begin,
                       int64_t row_end) {
  const int64_t c_count = g.channels;
  for_each_output_pixel(x, y, g, row_begin, row_end,
                        [&](const float* image, float* __restrict out, int64_t oh, int64_t ow) {
                          std::fill(out, out + c_count, -std::numeric_limits<float>::infinity());
                          for (int64_t kh = 0; kh < g.kernel_h; ++kh) {
                            const int64_t ih = oh * g.stride_h - g.pad_h + kh * g.dilation_h;
                            if (ih < 0 || ih >= g.height) continue;
                            for (int64_t kw = 0; kw < g.kernel_w; ++kw) {
                              const int64_t iw = ow * g.stride_w - g.pad_w + kw * g.dilation_w;
                              if (iw < 0 || iw >= g.width) continue;
                              const float* __restrict in = image + (ih * g.width + iw) * c_count;
                              for (int64_t c = 0; c < c_count; ++c) {
                                const float v = in[c];
                                out[c] = (v > out[c] || v != v) ? v : out[c];
                              }
                            }
                          }
                        });
}

}  // namespace

void max_pool(Isa isa, const float* x, float* y, const PoolGeometry& g, int64_t row_begin,
              int64_t row_end) {
  switch (isa) {
    case Isa::kAvx512:
      return avx512::max_pool_rows(x, y, g, row_begin, row_end);
    case Isa::kAvx2:
      return avx2::max_pool_rows(x, y, g, row_begin, row_end);
    case Isa::kPortable:
      return portable_max_pool(x, y, g, row_begin, row_end);
  }
}

void avg_pool(const float* x, float* y, const PoolGeometry& g, bool count_include_pad,
              int64_t divisor, int64_t row_begin, int64_t row_end) {
  const int64_t c_count = g.channels;
  for_each_output_pixel(x, y, g, row_begin, row_end,
                        [&](const float* image, float* __restrict out, int64_t oh, int64_t ow) {
                          int64_t h0 = oh * g.stride_h - g.pad_h, w0 = ow * g.stride_w - g.pad_w;
                          int64_t h1 = std::min(h0 + g.kernel_h, g.height + g.pad_h);
                          int64_t w1 = std::min(w0 + g.kernel_w, g.width + g.pad_w);
                          const int64_t padded_size = (h1 - h0) * (w1 - w0);
                          h0 = std::max<int64_t>(h0, 0);
                          w0 = std::max<int64_t>(w0, 0);
                          h1 = std::min(h1, g.height);
                          w1 = std::min(w1, g.width);
                          std::fill(out, out + c_count, 0.0F);
                          if (h0 >= h1 || w0 >= w1) return;
                          for (int64_t ih = h0; ih < h1; ++ih) {
                            for (int64_t iw = w0; iw < w1; ++iw) {
                              const float* __restrict in = image + (ih * g.width + iw) * c_count;
                              for (int64_t c = 0; c < c_count; ++c) out[c] += in[c];
                            }
                          }
                          const int64_t count = divisor != 0        ? divisor
                                                : count_include_pad ? padded_size
                                                                    : (h1 - h0) * (w1 - w0);
                          const float scale = static_cast<float>(count);
                          for (int64_t c = 0; c < c_count; ++c) out[c] /= scale;
                        });
}

}  // namespace nimble::kernels::nhwc

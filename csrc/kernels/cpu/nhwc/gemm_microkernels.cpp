// The microkernels of gemm_convolution.h (declared in gemm_microkernels.h): register tiles of
// `rows` output pixels by `vectors` vectors of output channels, accumulated with FMA over
// (tap, channel) and finished in registers where the activation is cheap there. The AVX-512
// and AVX2 bodies are the same loop written twice because a function's target ISA cannot be
// a template parameter.
#include "csrc/kernels/cpu/nhwc/gemm_microkernels.h"

#include <immintrin.h>

#include <array>
#include <cstring>
#include <utility>

namespace nimble::kernels::nhwc::gemm {
namespace {

// Activations applied to the accumulators before the store; the others go through finish()
// on the stored row (still in L1). The selects mirror finish()'s, NaN included.
inline bool in_registers(Activation activation) {
  return activation == Activation::kNone || activation == Activation::kRelu ||
         activation == Activation::kClamp || activation == Activation::kLeakyRelu;
}

// Row i of the tile reads tap `tap` from here.
inline const float* tap_row(const TileArgs& t, int i, int64_t tap) {
  if (!t.offsets) return t.rows[0] + i * t.row_stride;
  const int32_t offset = t.offsets[i][tap];
  return offset < 0 ? t.zero : t.rows[i] + offset;
}

// The activations not applied in registers, on the stored rows (residual already added).
template <int MR>
inline void finish_rows(const TileArgs& t) {
  if (in_registers(t.epilogue->activation)) return;
  for (int i = 0; i < MR; ++i) finish(t.out + i * t.ldc, nullptr, t.columns, *t.epilogue);
}

// Adds the residual, applies `kAct` (one of those in_registers() takes) and stores, masked
// to the valid columns. Inlined so that the accumulators stay in registers.
template <Activation kAct, int MR, int V>
__attribute__((target("avx512f"), always_inline)) inline void avx512_store(
    const __m512 (&acc)[MR][V], const TileArgs& t) {
  __mmask16 mask[V];
#pragma GCC unroll 8
  for (int v = 0; v < V; ++v) {
    const int64_t n = t.columns - 16 * v;
    mask[v] = n >= 16 ? __mmask16(0xFFFF) : n <= 0 ? __mmask16(0) : __mmask16((1U << n) - 1);
  }
  const __m512 zero = _mm512_setzero_ps(), lo = _mm512_set1_ps(t.epilogue->lo);
  const __m512 hi = _mm512_set1_ps(t.epilogue->hi);
  // Copies: vector stores may alias anything, which would reload these after each store.
  float* const out0 = t.out;
  const float* const res0 = t.residual;
  const int64_t ldc = t.ldc;
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) {
    float* out = out0 + i * ldc;
    const float* res = res0 ? res0 + i * ldc : nullptr;
#pragma GCC unroll 8
    for (int v = 0; v < V; ++v) {
      __m512 y = acc[i][v];
      if (res) {
        y = _mm512_add_ps(y, mask[v] == 0xFFFF ? _mm512_loadu_ps(res + 16 * v)
                                               : _mm512_maskz_loadu_ps(mask[v], res + 16 * v));
      }
      // max(a, b) is a > b ? a : b, so a NaN in y (the second operand) comes through. (The
      // zero-masked forms: GCC 12 warns about the unmasked ones' undefined source.)
      if constexpr (kAct == Activation::kRelu) {
        y = _mm512_maskz_max_ps(mask[v], zero, y);
      } else if constexpr (kAct == Activation::kClamp) {
        y = _mm512_maskz_max_ps(mask[v], lo, _mm512_maskz_min_ps(mask[v], hi, y));
      } else if constexpr (kAct == Activation::kLeakyRelu) {
        y = _mm512_mask_mul_ps(y, _mm512_cmp_ps_mask(y, zero, _CMP_LT_OQ), y, lo);
      }
      // Masked stores are slower than plain ones on Zen 4 even with every lane set (~10% of
      // a 1x1 of 16 input channels), so only the tail takes one.
      if (mask[v] == 0xFFFF) {
        _mm512_storeu_ps(out + 16 * v, y);
      } else {
        _mm512_mask_storeu_ps(out + 16 * v, mask[v], y);
      }
    }
  }
}

template <int MR, int V>
__attribute__((target("avx512f"))) void avx512_kernel(const TileArgs& t) {
  constexpr int kPanels = V == 1 ? 1 : V / 2;
  constexpr int kPerPanel = V / kPanels;  // vectors a panel: 2, or 1 for a narrow one
  __m512 acc[MR][V];
#pragma GCC unroll 8
  for (int v = 0; v < V; ++v) {
    const __m512 b = _mm512_loadu_ps(t.bias + 16 * v);
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) acc[i][v] = b;
  }
  const float* w = t.weight;
  const int64_t ps = t.panel_stride;
  for (int64_t tap = 0; tap < t.taps; ++tap) {
    const float* a[MR];
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) a[i] = tap_row(t, i, tap);
#pragma GCC unroll 2
    for (int64_t c = 0; c < t.channels; ++c) {
      __m512 wv[V];
#pragma GCC unroll 8
      for (int p = 0; p < kPanels; ++p) {
#pragma GCC unroll 2
        for (int q = 0; q < kPerPanel; ++q)
          wv[p * kPerPanel + q] = _mm512_load_ps(w + p * ps + 16 * q);
      }
#pragma GCC unroll 16
      for (int i = 0; i < MR; ++i) {
        const __m512 x = _mm512_set1_ps(a[i][c]);
#pragma GCC unroll 8
        for (int v = 0; v < V; ++v) acc[i][v] = _mm512_fmadd_ps(x, wv[v], acc[i][v]);
      }
      w += 16 * kPerPanel;
    }
  }

  switch (t.epilogue->activation) {
    case Activation::kRelu:
      avx512_store<Activation::kRelu>(acc, t);
      break;
    case Activation::kClamp:
      avx512_store<Activation::kClamp>(acc, t);
      break;
    case Activation::kLeakyRelu:
      avx512_store<Activation::kLeakyRelu>(acc, t);
      break;
    default:
      avx512_store<Activation::kNone>(acc, t);
  }
  finish_rows<MR>(t);
}

// avx512_store for AVX2. The column tail goes through maskload / maskstore: slower than
// plain stores on AMD, but it is one vector a row and only in a group's last panel.
template <Activation kAct, int MR, int V>
__attribute__((target("avx2,fma"), always_inline)) inline void avx2_store(
    const __m256 (&acc)[MR][V], const TileArgs& t) {
  bool whole[V];
  __m256i mask[V];
#pragma GCC unroll 8
  for (int v = 0; v < V; ++v) {
    const int64_t n = t.columns - 8 * v;
    whole[v] = n >= 8;
    mask[v] = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n < 0 ? 0 : n)),
                                 _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  const __m256 zero = _mm256_setzero_ps(), lo = _mm256_set1_ps(t.epilogue->lo);
  const __m256 hi = _mm256_set1_ps(t.epilogue->hi);
  // Copies: vector stores may alias anything, which would reload these after each store.
  float* const out0 = t.out;
  const float* const res0 = t.residual;
  const int64_t ldc = t.ldc;
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) {
    float* out = out0 + i * ldc;
    const float* res = res0 ? res0 + i * ldc : nullptr;
#pragma GCC unroll 8
    for (int v = 0; v < V; ++v) {
      __m256 y = acc[i][v];
      if (res) {
        y = _mm256_add_ps(
            y, whole[v] ? _mm256_loadu_ps(res + 8 * v) : _mm256_maskload_ps(res + 8 * v, mask[v]));
      }
      if constexpr (kAct == Activation::kRelu) {
        y = _mm256_max_ps(zero, y);  // NaN in y comes through, as in avx512_store
      } else if constexpr (kAct == Activation::kClamp) {
        y = _mm256_max_ps(lo, _mm256_min_ps(hi, y));
      } else if constexpr (kAct == Activation::kLeakyRelu) {
        y = _mm256_blendv_ps(y, _mm256_mul_ps(y, lo), _mm256_cmp_ps(y, zero, _CMP_LT_OQ));
      }
      if (whole[v]) {
        _mm256_storeu_ps(out + 8 * v, y);
      } else {
        _mm256_maskstore_ps(out + 8 * v, mask[v], y);
      }
    }
  }
}

template <int MR, int V>
__attribute__((target("avx2,fma"))) void avx2_kernel(const TileArgs& t) {
  constexpr int kPanels = V == 1 ? 1 : V / 2;
  constexpr int kPerPanel = V / kPanels;
  __m256 acc[MR][V];
#pragma GCC unroll 8
  for (int v = 0; v < V; ++v) {
    const __m256 b = _mm256_loadu_ps(t.bias + 8 * v);
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) acc[i][v] = b;
  }
  const float* w = t.weight;
  const int64_t ps = t.panel_stride;
  for (int64_t tap = 0; tap < t.taps; ++tap) {
    const float* a[MR];
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) a[i] = tap_row(t, i, tap);
#pragma GCC unroll 2
    for (int64_t c = 0; c < t.channels; ++c) {
      __m256 wv[V];
#pragma GCC unroll 8
      for (int p = 0; p < kPanels; ++p) {
#pragma GCC unroll 2
        for (int q = 0; q < kPerPanel; ++q)
          wv[p * kPerPanel + q] = _mm256_load_ps(w + p * ps + 8 * q);
      }
#pragma GCC unroll 16
      for (int i = 0; i < MR; ++i) {
        const __m256 x = _mm256_broadcast_ss(a[i] + c);
#pragma GCC unroll 8
        for (int v = 0; v < V; ++v) acc[i][v] = _mm256_fmadd_ps(x, wv[v], acc[i][v]);
      }
      w += 8 * kPerPanel;
    }
  }

  switch (t.epilogue->activation) {
    case Activation::kRelu:
      avx2_store<Activation::kRelu>(acc, t);
      break;
    case Activation::kClamp:
      avx2_store<Activation::kClamp>(acc, t);
      break;
    case Activation::kLeakyRelu:
      avx2_store<Activation::kLeakyRelu>(acc, t);
      break;
    default:
      avx2_store<Activation::kNone>(acc, t);
  }
  finish_rows<MR>(t);
}

using Kernel = void (*)(const TileArgs&);

// Kernels for 1..sizeof(M) rows of V vectors.
template <int V, int... M>
constexpr std::array<Kernel, sizeof...(M)> avx512_kernels(std::integer_sequence<int, M...>) {
  return {&avx512_kernel<M + 1, V>...};
}
template <int V, int... M>
constexpr std::array<Kernel, sizeof...(M)> avx2_kernels(std::integer_sequence<int, M...>) {
  return {&avx2_kernel<M + 1, V>...};
}

// Most rows a tile of so many vectors takes, by Isa: the accumulators, the weight vectors of
// one (tap, channel) and a broadcast fit the register file (32 zmm, 16 ymm).
constexpr int kAvx512Rows1 = 8, kAvx512Rows2 = 8, kAvx512Rows4 = 6, kAvx512Rows8 = 3;
constexpr int kAvx2Rows1 = 12, kAvx2Rows2 = 6, kAvx2Rows4 = 3, kAvx2Rows8 = 1;
constexpr int kPortableRows = 8, kPortableColumns = 64;

void avx512_tile(int rows, int vectors, const TileArgs& args) {
  static constexpr auto k1 = avx512_kernels<1>(std::make_integer_sequence<int, kAvx512Rows1>());
  static constexpr auto k2 = avx512_kernels<2>(std::make_integer_sequence<int, kAvx512Rows2>());
  static constexpr auto k4 = avx512_kernels<4>(std::make_integer_sequence<int, kAvx512Rows4>());
  static constexpr auto k8 = avx512_kernels<8>(std::make_integer_sequence<int, kAvx512Rows8>());
  switch (vectors) {
    case 1:
      return k1[rows - 1](args);
    case 2:
      return k2[rows - 1](args);
    case 4:
      return k4[rows - 1](args);
    default:
      return k8[rows - 1](args);
  }
}

void avx2_tile(int rows, int vectors, const TileArgs& args) {
  static constexpr auto k1 = avx2_kernels<1>(std::make_integer_sequence<int, kAvx2Rows1>());
  static constexpr auto k2 = avx2_kernels<2>(std::make_integer_sequence<int, kAvx2Rows2>());
  static constexpr auto k4 = avx2_kernels<4>(std::make_integer_sequence<int, kAvx2Rows4>());
  static constexpr auto k8 = avx2_kernels<8>(std::make_integer_sequence<int, kAvx2Rows8>());
  switch (vectors) {
    case 1:
      return k1[rows - 1](args);
    case 2:
      return k2[rows - 1](args);
    case 4:
      return k4[rows - 1](args);
    default:
      return k8[rows - 1](args);
  }
}

// Plain C++ over 8-float "vectors" (the AVX2 packing), for CPUs with neither; the inner loop
// over a panel's width is left to the compiler's vectorizer.
void portable_tile(int rows, int vectors, const TileArgs& t) {
  const int panels = vectors == 1 ? 1 : vectors / 2;
  const int width = 8 * vectors / panels;
  float acc[kPortableRows][kPortableColumns];
  for (int i = 0; i < rows; ++i) std::memcpy(acc[i], t.bias, sizeof(float) * 8 * vectors);
  const float* w = t.weight;
  const float* a[kPortableRows];
  for (int64_t tap = 0; tap < t.taps; ++tap) {
    for (int i = 0; i < rows; ++i) a[i] = tap_row(t, i, tap);
    for (int64_t c = 0; c < t.channels; ++c) {
      for (int p = 0; p < panels; ++p) {
        const float* wp = w + p * t.panel_stride;
        for (int i = 0; i < rows; ++i) {
          const float x = a[i][c];
          float* row = acc[i] + p * width;
          for (int j = 0; j < width; ++j) row[j] += x * wp[j];
        }
      }
      w += width;
    }
  }
  for (int i = 0; i < rows; ++i) {
    float* out = t.out + i * t.ldc;
    std::memcpy(out, acc[i], sizeof(float) * t.columns);
    finish(out, t.residual ? t.residual + i * t.ldc : nullptr, t.columns, *t.epilogue);
  }
}

}  // namespace

TileShape tile_shape(Isa isa, int64_t block_rows, bool narrow_only) {
  switch (isa) {
    case Isa::kAvx512:
      if (narrow_only) return {1, kAvx512Rows1};
      if (block_rows >= 7) return {2, kAvx512Rows2};
      if (block_rows >= 4) return {4, kAvx512Rows4};
      return {8, kAvx512Rows8};
    case Isa::kAvx2:
      if (narrow_only) return {1, kAvx2Rows1};
      if (block_rows >= 4) return {2, kAvx2Rows2};
      if (block_rows >= 2) return {4, kAvx2Rows4};
      return {8, kAvx2Rows8};
    case Isa::kPortable:
      break;
  }
  return {2, kPortableRows};
}

void run_tile(Isa isa, int rows, int vectors, const TileArgs& args) {
  switch (isa) {
    case Isa::kAvx512:
      return avx512_tile(rows, vectors, args);
    case Isa::kAvx2:
      return avx2_tile(rows, vectors, args);
    case Isa::kPortable:
      break;
  }
  portable_tile(rows, vectors, args);
}

}  // namespace nimble::kernels::nhwc::gemm

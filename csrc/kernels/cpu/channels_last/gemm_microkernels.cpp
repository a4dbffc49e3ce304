// The microkernels of gemm_convolution.h (declared in gemm_microkernels.h): register tiles of
// `rows` output pixels by `vectors` vectors of output channels, accumulated with FMA over
// (tap, channel) and finished in registers where the activation is cheap there. The AVX-512
// and AVX2 code is one body, gemm_microkernels.inc, compiled once per ISA (isa.h).
#include "csrc/kernels/cpu/channels_last/gemm_microkernels.h"

#include <array>
#include <cstring>
#include <utility>

#include "csrc/kernels/cpu/channels_last/vector_ops.h"

namespace nimble::kernels::nhwc::gemm {
namespace {

// Activations applied to the accumulators before the store; the others go through finish()
// on the stored row (still in L1). The selects mirror finish()'s, NaN included.
inline bool in_registers(Activation activation) {
  return activation == Activation::kNone || activation == Activation::kRelu ||
         activation == Activation::kClamp || activation == Activation::kLeakyRelu;
}

// Row i of the tile reads tap `tap` (of the whole reduction) from here.
inline const float* tap_row(const TileArgs& t, int i, int64_t tap) {
  if (!t.offsets) return t.rows[0] + i * t.row_stride + t.first_channel;
  const int32_t offset = t.offsets[i][tap];
  return (offset < 0 ? t.zero : t.rows[i] + offset) + t.first_channel;
}

// The weight of tap `tap` (of the block) at the block's first channel, in a panel of `width`.
inline const float* tap_weight(const TileArgs& t, int64_t tap, int64_t width) {
  return t.weight + ((t.first_tap + tap) * t.tap_channels + t.first_channel) * width;
}

// The activations not applied in registers, on the stored rows (residual already added).
template <int MR>
inline void finish_rows(const TileArgs& t) {
  if (!t.finish || in_registers(t.epilogue->activation)) return;
  for (int i = 0; i < MR; ++i) finish(t.isa, t.out + i * t.ldc, nullptr, t.columns, *t.epilogue);
}

using Kernel = void (*)(const TileArgs&);

#pragma GCC push_options
#pragma GCC target("avx512f,prfchw")
namespace avx512 {
// Most rows a tile of so many vectors takes: the accumulators, the weight vectors of one
// (tap, channel) and a broadcast fit the register file (32 zmm).
struct Ops : Avx512Ops {
  static constexpr int kRows1 = 8, kRows2 = 8, kRows4 = 6, kRows8 = 3;
};
#include "csrc/kernels/cpu/channels_last/gemm_microkernels.inc"
}  // namespace avx512
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx2,fma,prfchw")
namespace avx2 {
struct Ops : Avx2Ops {  // 16 ymm
  static constexpr int kRows1 = 12, kRows2 = 6, kRows4 = 3, kRows8 = 1;
};
#include "csrc/kernels/cpu/channels_last/gemm_microkernels.inc"
}  // namespace avx2
#pragma GCC pop_options

constexpr int kPortableRows = 8, kPortableColumns = 64;

// Plain C++ over 8-float "vectors" (the AVX2 packing), for CPUs with neither; the inner loop
// over a panel's width is left to the compiler's vectorizer.
void portable_tile(int rows, int vectors, const TileArgs& t) {
  const int panels = vectors == 1 ? 1 : vectors / 2;
  const int width = 8 * vectors / panels;
  float acc[kPortableRows][kPortableColumns] = {};
  for (int i = 0; i < rows; ++i) {
    if (t.accumulate) {
      std::memcpy(acc[i], t.out + i * t.ldc, sizeof(float) * t.columns);
    } else {
      std::memcpy(acc[i], t.bias, sizeof(float) * 8 * vectors);
    }
  }
  const float* a[kPortableRows];
  for (int64_t tap = 0; tap < t.taps; ++tap) {
    for (int i = 0; i < rows; ++i) a[i] = tap_row(t, i, t.first_tap + tap);
    const float* w = tap_weight(t, tap, width);
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
    if (t.finish)
      finish(t.isa, out, t.residual ? t.residual + i * t.ldc : nullptr, t.columns, *t.epilogue);
  }
}

}  // namespace

TileShape tile_shape(Isa isa, int64_t block_rows, bool narrow_only, int64_t reduction) {
  switch (isa) {
    case Isa::kAvx512:
      if (narrow_only) return {1, avx512::Ops::kRows1};
      if (block_rows >= 7 && reduction < kWideTileReduction) return {4, avx512::Ops::kRows4};
      if (block_rows >= 7) return {2, avx512::Ops::kRows2};
      if (block_rows >= 4) return {4, avx512::Ops::kRows4};
      return {8, avx512::Ops::kRows8};
    case Isa::kAvx2:
      if (narrow_only) return {1, avx2::Ops::kRows1};
      if (block_rows >= 4) return {2, avx2::Ops::kRows2};
      if (block_rows >= 2) return {4, avx2::Ops::kRows4};
      return {8, avx2::Ops::kRows8};
    case Isa::kPortable:
      break;
  }
  return {2, kPortableRows};
}

TileShape tile_shape_of_width(Isa isa, int vectors) {
  switch (isa) {
    case Isa::kAvx512:
      return {vectors, vectors <= 2   ? avx512::Ops::kRows2
                       : vectors == 4 ? avx512::Ops::kRows4
                                      : avx512::Ops::kRows8};
    case Isa::kAvx2:
      return {vectors, vectors <= 2   ? avx2::Ops::kRows2
                       : vectors == 4 ? avx2::Ops::kRows4
                                      : avx2::Ops::kRows8};
    case Isa::kPortable:
      break;
  }
  return {2, kPortableRows};  // the portable code has one shape
}

void run_tile(Isa isa, int rows, int vectors, const TileArgs& args) {
  switch (isa) {
    case Isa::kAvx512:
      return avx512::tile(rows, vectors, args);
    case Isa::kAvx2:
      return avx2::tile(rows, vectors, args);
    case Isa::kPortable:
      break;
  }
  portable_tile(rows, vectors, args);
}

}  // namespace nimble::kernels::nhwc::gemm

#pragma once
// The register-tile microkernels behind gemm_convolution.h (private to it): each computes a
// few output rows times one chunk of packed weight panels, reading its input rows through
// per-tap offsets (an indirect matrix product), adds the bias, the residual and the
// activation, and stores. One family per Isa; the driver picks the tile shape.
#include <cstdint>

#include "csrc/kernels/cpu/channels_last/epilogue.h"

namespace nimble::kernels::nhwc::gemm {

// Everything one microkernel call reads and writes. Rows are output pixels; row i reads, for
// tap t, the `channels` floats at rows[i] + offsets[i][t] + first_channel, or zeros where that
// offset is negative (padding). Without offsets (a product in place) there is one tap and row
// i reads rows[0] + i * row_stride + first_channel.
//
// A call reduces over one block of the reduction: taps [first_tap, first_tap + taps) times
// channels [first_channel, first_channel + channels) of the `tap_channels` a tap holds. The
// first block starts from the bias, the others from the partial sums the block before stored
// (`accumulate`); only the last (`finish`) adds the residual and applies the activation. The
// sums are added in the order one unblocked call adds them and stored as the floats the
// registers hold, so a blocked reduction gives the unblocked result bit for bit.
struct TileArgs {
  const float* const* rows = nullptr;       // [rows]: input base of each row (its image, its group)
  const int32_t* const* offsets = nullptr;  // [rows]: each row's [taps] offsets from its base
  int64_t row_stride = 0;
  const float* zero = nullptr;  // `tap_channels` zeros
  int64_t first_tap = 0, taps = 0, first_channel = 0, channels = 0, tap_channels = 0;
  bool accumulate = false, finish = true;
  // The chunk's first panel, [tap][tap_channels][width] from its first tap; the chunk's other
  // panels follow it at `panel_stride` floats each. Width: 2 vectors, or 1 for a narrow (last)
  // panel.
  const float* weight = nullptr;
  int64_t panel_stride = 0;
  const float* bias = nullptr;  // the chunk's padded bias, contiguous over its panels
  float* out = nullptr;         // row i's results at out + i * ldc (likewise residual, null: none)
  const float* residual = nullptr;
  int64_t ldc = 0;
  int64_t columns = 0;  // valid columns of the chunk; the rest is padding, not stored
  const Epilogue* epilogue = nullptr;
  // The ISA the kernel object was made for: the epilogue's finish() runs its code (the tile's
  // own may be narrower, gemm_convolution.h's kernel_isa_).
  Isa isa = Isa::kPortable;
  // Ask for the tile's output lines (for writing) and its residual's before the reduction, so
  // that they arrive while it runs: where a layer's output is beyond L2 (gemm_convolution.cpp,
  // kPrefetchOutputBytes), the stores and residual loads at a tile's end would otherwise wait
  // for them with nothing left to overlap.
  bool prefetch_rows = false;
  // Where a layer's weight is beyond L2 and read once a column block (columns outside), the
  // weight the thread reads next (the next column block's) is asked into L2 while this one
  // runs: two 64-byte lines from `prefetch` after each (tap, channel) step, which then moves
  // on by `prefetch_step` floats (at most 32), so that the next column block's first register
  // tiles do not wait for memory line by line. Null: none.
  const float* prefetch = nullptr;
  int64_t prefetch_step = 0;
};

// A tile shape: `vectors` accumulator vectors a row (2 per full panel; 1 is a narrow panel of
// one vector), up to `rows` rows.
struct TileShape {
  int vectors, rows;
};

// Floats in one vector register of `isa` (the portable code uses 8 too). A full panel is two
// vectors wide.
inline int lanes(Isa isa) { return isa == Isa::kAvx512 ? 16 : 8; }

// Which shape to tile a block of `block_rows` rows with, for a reduction of `reduction` floats
// ((tap, channel) pairs). On Zen 4: 8 rows by 2 zmm for tall blocks (12 rows measured no
// faster); wider, shorter tiles for a few rows so that each weight vector loaded feeds more
// independent accumulators and a row's chains stay long enough to cover FMA latency. Tall
// blocks of a short reduction (below kWideTileReduction) take 6 rows by 4 zmm on AVX-512: 10
// loads for 24 multiply-adds where 8 x 2 needs 10 for 16, while the chunk's weight (256 bytes
// a (tap, channel)) still streams from L2 fast enough; on the Xeon (Cascade Lake), one thread,
// interleaved: 1.03x-1.13x on 1x1 layers of 64-832 input channels and 3x3 layers of 64, 0.91x-
// 0.97x from 1024 floats on (3x3 of 128-512, 1x1 of 1024-2048 channels). Shapes only shrink
// from there: every narrower chunk kernel takes at least as many rows. `narrow_only`: the
// block is one narrow panel, which gets more rows instead.
constexpr int64_t kWideTileReduction = 1024;
TileShape tile_shape(Isa isa, int64_t block_rows, bool narrow_only, int64_t reduction);
// The shape of `vectors` (2, 4 or 8) accumulator vectors a row with the most rows `isa`'s kernel
// of that width takes (GemmTiling::tile_vectors: a tuned width in place of tile_shape's).
TileShape tile_shape_of_width(Isa isa, int vectors);

// Tiles of at most this many rows (the few rows of late layers' small maps, and linear
// layers) read each weight vector for few multiply-adds: the weight streams from memory at
// the rate the memory gives, and asking for it 2 KiB ahead of the loads (one prefetch a
// cache line of each panel) keeps more lines in flight than the hardware prefetcher does.
// 512 > 512 channels, 3x3 on a 2x2 map, caches flushed, one thread on the 2.5 GHz Xeon:
// 1.05x-1.15x; taller tiles reuse each weight vector over their rows and gain nothing from it
// (they ask for the next column block's weight instead, TileArgs::prefetch).
constexpr int kPrefetchRows = 4;

// Computes `rows` (1..tile_shape's rows) rows of `vectors` (1, 2, 4 or 8; at most the
// tile_shape's vectors, or 1) accumulator vectors with `isa`'s code.
void run_tile(Isa isa, int rows, int vectors, const TileArgs& args);

}  // namespace nimble::kernels::nhwc::gemm

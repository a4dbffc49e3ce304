// GemmConvolution (gemm_convolution.h): packing the weight into column panels, the per-tap
// input offsets and the tiling. Running the tiles is gemm_convolution_run.cpp; the register
// tiles themselves are gemm_microkernels.cpp.
#include "csrc/kernels/cpu/channels_last/gemm_convolution.h"

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <string>

#include "csrc/kernels/cpu/channels_last/gemm_microkernels.h"

namespace nimble::kernels::nhwc {
namespace {

// Tiling (the header says why these sizes).
constexpr int64_t kTileMacs = int64_t{1} << 18;
constexpr int64_t kSplitMacs = int64_t{1} << 17;
constexpr int64_t kMinBlockRows = 8;
constexpr int64_t kBlockInputFloats = int64_t{1} << 16;  // 256 KiB
constexpr int64_t kSmallWeightBytes = int64_t{256} << 10;
// Output channels a row from which a few-row layer of a small weight splits its columns, not
// its rows (the constructor).
constexpr int64_t kColumnsPerRow = 2;
// Below this many pieces the rule makes their count even (two threads split them evenly).
constexpr int64_t kEvenPiecesBelow = 16;
// Groups of at most half this many output channels are merged up to it (the constructor).
// Measured on a 3x3 of 32 groups of 4 channels: 2.2x faster as 16 groups of 8 (block-
// diagonal, half the multiply-adds on zeros) than as 32 groups whose 4 channels would fill
// half a vector and whose few channels a tap leave the row addressing dominating.
constexpr int64_t kMergedGroupWidth = 8;
// A layer of fewer input channels than this (a network's first layer: 3) reduces over each
// kernel row's taps as one run of kernel_w x channels floats, where the taps of a row lie side
// by side in NHWC: the microkernel's per-tap work (a row pointer and a padding test per output
// pixel) is then paid once per kernel row, not once per 3 multiply-adds. Measured one thread,
// on the 2.5 GHz Xeon (AVX-512): 3 > 64 channels, 7x7, stride 2 (resnet's first layer) 1.2x
// faster at 64x64 pixels, 1.5x-2x at 224x224; 3 > 32, 3x3, stride 2, 1.1x; 3x3 of stride 1
// alike; 4 and 8 channels 1.1x-1.2x slower (the per-tap work is already shared by more).
constexpr int64_t kMergeTapsBelowChannels = 4;
// Pixels whose window reaches into the padding read a copy of the window (kernel_h x kernel_w x
// channels floats, zeros in the padding), at most this many floats.
constexpr int64_t kMaxWindowFloats = 1024;
// A layer whose output is larger than this asks for each register tile's output and residual
// lines before the tile's reduction (gemm::TileArgs::prefetch_rows): they are then beyond L2
// (half of the 2 MiB a core has on the Sapphire Rapids VM), and the tile's stores and residual
// loads would otherwise wait for L3 or memory at its end. AVX-512 code only: one thread, 20th
// percentile of 40 calls, caches flushed before each (loaded machine), 1x1 64 > 256 at 56x56
// with a residual 1.06x-1.10x, 128 > 512 at 28x28 1.07x, 512 > 2048 at 7x7 1.07x; with the
// caches hot 0.99x-1.0x; the AVX2 tiles (6 rows of 2 ymm, one cache line a row) 0.91x-0.93x.
constexpr int64_t kPrefetchOutputBytes = int64_t{1} << 20;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

void check(bool ok, const char* what) {
  if (!ok) throw std::invalid_argument(std::string("GemmConvolution: ") + what);
}

}  // namespace

GemmConvolution::GemmConvolution(const float* weight, const float* bias,
                                 const ConvolutionGeometry& geometry, Isa isa,
                                 const GemmTiling& tiling)
    : geometry_(geometry), isa_(isa) {
  const ConvolutionGeometry& g = geometry;
  check(supports(isa), "this CPU cannot run the Isa asked for");
  check(g.images >= 1 && g.height >= 1 && g.width >= 1, "empty input");
  check(g.groups >= 1 && g.in_channels >= 1 && g.out_channels >= 1, "no channels");
  check(g.in_channels % g.groups == 0 && g.out_channels % g.groups == 0,
        "channels not divisible by groups");
  check(g.kernel_h >= 1 && g.kernel_w >= 1 && g.stride_h >= 1 && g.stride_w >= 1 &&
            g.dilation_h >= 1 && g.dilation_w >= 1 && g.pad_h >= 0 && g.pad_w >= 0,
        "bad kernel, stride, dilation or padding");
  check(g.out_height() >= 1 && g.out_width() >= 1, "empty output");
  check(g.height * g.width * g.in_channels <= std::numeric_limits<int32_t>::max(),
        "image too large for 32-bit offsets");

  taps_ = g.kernel_h * g.kernel_w;
  // Merging groups: `merge` consecutive groups of at most 4 output channels each run as one
  // of at most 8, with a block-diagonal weight (zeros between the merged groups).
  const int64_t in_per_group = g.in_channels / g.groups, out_per_group = g.out_channels / g.groups;
  int64_t merge = 1;
  for (int64_t m = 2; m * out_per_group <= kMergedGroupWidth; ++m) {
    if (g.groups % m == 0) merge = m;
  }
  merge_ = merge;
  groups_ = g.groups / merge;
  group_in_ = in_per_group * merge;
  group_out_ = out_per_group * merge;
  kernel_isa_ = isa == Isa::kAvx512 && group_out_ <= 8 && supports(Isa::kAvx2) ? Isa::kAvx2 : isa;
  const int64_t lanes = gemm::lanes(kernel_isa_);
  panel_width_ = 2 * lanes;
  const int64_t remainder = group_out_ % panel_width_;
  panels_ = ceil_div(group_out_, panel_width_);
  narrow_last_ = remainder > 0 && remainder <= lanes;
  panel_floats_ = taps_ * group_in_ * panel_width_;
  group_columns_ = panels_ * panel_width_ - (narrow_last_ ? lanes : 0);
  group_floats_ = group_columns_ * taps_ * group_in_;

  packed_.assign(groups_ * group_floats_, 0.0F);
  bias_.assign(groups_ * group_columns_, 0.0F);
  for (int64_t group = 0; group < groups_; ++group) {
    for (int64_t p = 0; p < panels_; ++p) {
      const int64_t width = narrow_last_ && p == panels_ - 1 ? lanes : panel_width_;
      float* dst = packed_.data() + group * group_floats_ + p * panel_floats_;
      const int64_t columns = std::min(width, group_out_ - p * panel_width_);
      if (merge == 1) {
        // Groups as they are: each column reads its output channel's weights in order, one
        // pass over the weight (the per-element group test below took vit_b_16 0.1 s more).
        for (int64_t j = 0; j < columns; ++j) {
          const float* src =
              weight + (group * group_out_ + p * panel_width_ + j) * in_per_group * taps_;
          for (int64_t c = 0; c < group_in_; ++c) {
            for (int64_t tap = 0; tap < taps_; ++tap)
              dst[(tap * group_in_ + c) * width + j] = src[c * taps_ + tap];
          }
        }
        continue;
      }
      for (int64_t tap = 0; tap < taps_; ++tap) {
        for (int64_t c = 0; c < group_in_; ++c) {
          for (int64_t j = 0; j < columns; ++j) {
            // Output channel k of the original groups; zero unless c is in its group.
            const int64_t k = group * group_out_ + p * panel_width_ + j;
            const int64_t first = (p * panel_width_ + j) / out_per_group * in_per_group;
            if (c < first || c >= first + in_per_group) continue;
            dst[(tap * group_in_ + c) * width + j] =
                weight[(k * in_per_group + c - first) * taps_ + tap];
          }
        }
      }
    }
    if (bias) {
      std::copy(bias + group * group_out_, bias + (group + 1) * group_out_,
                bias_.begin() + group * group_columns_);
    }
  }

  direct_ = g.kernel_h == 1 && g.kernel_w == 1 && g.stride_h == 1 && g.stride_w == 1 &&
            g.pad_h == 0 && g.pad_w == 0;
  merged_taps_ = !direct_ && g.groups == 1 && g.kernel_w > 1 && g.dilation_w == 1 &&
                 g.in_channels < kMergeTapsBelowChannels &&
                 taps_ * g.in_channels <= kMaxWindowFloats;
  const int64_t oh = g.out_height(), ow = g.out_width();
  if (merged_taps_) {
    // [out pixel][kernel row]: the row's first tap; -1 in [pixel][0] where any tap of the
    // pixel lies in the padding (it reads a copy of its window, run_block).
    offsets_.resize(oh * ow * g.kernel_h);
    for (int64_t oy = 0; oy < oh; ++oy) {
      for (int64_t ox = 0; ox < ow; ++ox) {
        const int64_t x0 = ox * g.stride_w - g.pad_w;
        int32_t* o = offsets_.data() + (oy * ow + ox) * g.kernel_h;
        bool inside = x0 >= 0 && x0 + g.kernel_w <= g.width;
        for (int64_t ky = 0; ky < g.kernel_h; ++ky) {
          const int64_t iy = oy * g.stride_h - g.pad_h + ky * g.dilation_h;
          inside = inside && iy >= 0 && iy < g.height;
          o[ky] = static_cast<int32_t>((iy * g.width + x0) * g.in_channels);
        }
        if (!inside) o[0] = -1;
      }
    }
    for (int64_t ky = 0; ky < g.kernel_h; ++ky)
      window_offsets_.push_back(static_cast<int32_t>(ky * g.kernel_w * g.in_channels));
    zeros_.assign(g.kernel_w * g.in_channels, 0.0F);
  } else if (!direct_) {
    offsets_.resize(oh * ow * taps_);
    int32_t* o = offsets_.data();
    for (int64_t oy = 0; oy < oh; ++oy) {
      for (int64_t ox = 0; ox < ow; ++ox) {
        for (int64_t ky = 0; ky < g.kernel_h; ++ky) {
          for (int64_t kx = 0; kx < g.kernel_w; ++kx) {
            const int64_t iy = oy * g.stride_h - g.pad_h + ky * g.dilation_h;
            const int64_t ix = ox * g.stride_w - g.pad_w + kx * g.dilation_w;
            const bool inside = iy >= 0 && iy < g.height && ix >= 0 && ix < g.width;
            *o++ = inside ? static_cast<int32_t>((iy * g.width + ix) * g.in_channels) : -1;
          }
        }
      }
    }
    zeros_.assign(group_in_, 0.0F);
  }

  check(tiling.pieces >= 0 && tiling.rows_per_block >= 0 && tiling.column_splits >= 0 &&
            tiling.tile_rows >= 0 && tiling.reduction_block >= 0 && tiling.tile_vectors >= 0,
        "negative tiling parameter (0 is the rule's choice)");
  max_tile_rows_ = tiling.tile_rows;
  // The kernels come 2, 4 and 8 vectors wide: the widest of those at most what was asked.
  if (tiling.tile_vectors > 0)
    tile_vectors_ = tiling.tile_vectors >= 8 ? 8 : tiling.tile_vectors >= 4 ? 4 : 2;
  reduction_taps_ = merged_taps_ ? g.kernel_h : direct_ ? 1 : taps_;
  reduction_channels_ = merged_taps_ ? g.kernel_w * group_in_ : group_in_;
  {
    // The rule does not block the reduction: blocks of 128-1024 floats (a chunk's weight for
    // one block in L1 while the rows go by, where the whole reduction's, 295 KB for a 3x3 of
    // 256 channels, comes from L2 for each register tile) measured no faster on the Xeon, on
    // AVX-512 and AVX2 alike, for resnet50's layers at 224x224 (1x1 and 3x3, 64-2048
    // channels, with the rule's row blocks and with blocks of 64-192 rows): within 3% either
    // way, the L2 keeps up with the 8-row tiles. A tuned replay may block it per layer.
    // Blocks of whole taps where a tap's channels fit one, else channels of one tap; either
    // split evenly (9 taps in blocks of at most 4 are 3 + 3 + 3).
    const int64_t floats =
        tiling.reduction_block > 0 ? tiling.reduction_block : reduction_taps_ * reduction_channels_;
    if (floats >= reduction_channels_) {
      const int64_t taps = std::min(reduction_taps_, floats / reduction_channels_);
      tap_block_ = ceil_div(reduction_taps_, ceil_div(reduction_taps_, taps));
      channel_block_ = reduction_channels_;
    } else {
      tap_block_ = 1;
      channel_block_ = ceil_div(reduction_channels_, ceil_div(reduction_channels_, floats));
    }
  }
  const int64_t rows = g.out_pixels();
  const int64_t reduction = taps_ * group_in_;
  const bool small_weight =
      static_cast<int64_t>(sizeof(float)) * group_floats_ * groups_ <= kSmallWeightBytes;
  // Few rows against a small weight of many columns (rows outside, below): the rule's blocks
  // are one row block by column blocks (weight_bound, below).
  bool weight_bound = false;
  const int64_t macs = rows * groups_ * group_columns_ * reduction;
  int64_t tiles = std::max<int64_t>(1, macs / kTileMacs);
  if (macs >= kSplitMacs) tiles = std::max<int64_t>(tiles, 2);
  if (tiling.pieces > 0) tiles = tiling.pieces;
  if (tiling.rows_per_block > 0) {
    rows_per_block_ = std::min({tiling.rows_per_block, rows, kMaxBlockRows});
  } else {
    const int64_t max_rows =
        std::clamp(kBlockInputFloats / reduction, kMinBlockRows, kMaxBlockRows);
    // Groups are column blocks of their own: rows make up the rest of `tiles`.
    const int64_t row_blocks = std::max({int64_t{1}, ceil_div(rows, max_rows),
                                         std::min(ceil_div(tiles, groups_), rows / kMinBlockRows)});
    // Blocks of whole register tiles of one height for all rows: 196 rows in 24 blocks of 9
    // would run each block as tiles of 5 and 4 rows (256 > 256 channels, 14x14, 3x3: 1.3x
    // slower on the Xeon than blocks of 16 as two 8-row tiles); as tiles of 8, two a block.
    const auto block_rows = [&](int64_t blocks) {
      const int64_t tile_rows = register_tile_rows(ceil_div(rows, blocks), false);
      const int64_t height = ceil_div(rows, ceil_div(rows, tile_rows));
      const int64_t subtiles_per_block = ceil_div(ceil_div(rows, height), blocks);
      return std::min(kMaxBlockRows, subtiles_per_block * height);
    };
    rows_per_block_ = block_rows(row_blocks);
    // Few rows, a small weight and at least kColumnsPerRow output channels a row: the rows in
    // one block, the columns split. Each thread of two then reads half the weight, where two
    // row blocks had each read all of it (from L3: these layers' time is their weight's):
    // googlenet's 1x1 512 > 112 on 4x4 at 64x64, one thread, L2 swept, the slower half 13.9 ->
    // 9.1 us (docs/history/cpu-measurements.md,
    // "Few rows on two threads").
    weight_bound = small_weight && groups_ == 1 && panels_ >= 2 && tiles >= 2 &&
                   tiling.pieces <= 0 && tiling.column_splits <= 0 &&
                   tiling.loop_order == LoopOrder::kRule && rows <= max_rows &&
                   group_columns_ >= kColumnsPerRow * rows;
    if (weight_bound) rows_per_block_ = block_rows(1);
    // Few pieces, an odd count of them (the constructor's end says why): one row block more
    // where the rows allow it (googlenet's 1x1 192 > 64 on 8x8 at 64x64: 3 blocks of 24 rows,
    // now 4 of 16).
    const int64_t pieces = ceil_div(rows, rows_per_block_) * groups_;
    if (tiling.pieces <= 0 && pieces > 1 && pieces < kEvenPiecesBelow && pieces % 2 != 0 &&
        row_blocks + 1 <= rows / kMinBlockRows) {
      const int64_t more = block_rows(row_blocks + 1);
      if (ceil_div(rows, more) * groups_ % 2 == 0) rows_per_block_ = more;
    }
  }
  prefetch_rows_ =
      kernel_isa_ == Isa::kAvx512 &&
      static_cast<int64_t>(sizeof(float)) * rows * g.out_channels > kPrefetchOutputBytes;
  rows_outside_ = tiling.loop_order == LoopOrder::kRule
                      ? small_weight
                      : tiling.loop_order == LoopOrder::kRowsOutside;
  prefetch_weight_ = !rows_outside_ && !small_weight;
  // Whatever tiles the row blocks did not make; rounded down, as rounding the rows to whole
  // register tiles leaves a few blocks short of `tiles`.
  const int64_t column_splits =
      tiling.column_splits > 0
          ? tiling.column_splits
          : std::max<int64_t>(1, tiles / (ceil_div(rows, rows_per_block_) * groups_));
  panels_per_block_ = ceil_div(panels_, std::min(column_splits, panels_));
  if (tiling.column_splits <= 0) {
    // A column block at least as wide as the block's register tile: a block of one panel runs
    // a tile of 4 vectors as one of 2 (chunk_at), with half the multiply-adds a broadcast and,
    // on a map of a few rows whose weight streams from memory, one stream of weight where the
    // tile would read two. Small maps made these blocks (the rule's tiles split the columns
    // where the rows are few): resnet50 at 64x64, one thread, in the replay, 1x1 2048 > 512 and
    // 3x3 512 > 512 on 2x2 maps, 1x1 256 > 1024 on 4x4 (docs/history/cpu-measurements.md,
    // "The stem's windows and the column blocks of small maps").
    // Where weight_bound, blocks down to half the panels, so that there are two (a thread's run
    // of several blocks runs them as one, gemm_convolution_run.cpp, at the tile's width).
    const int64_t tile_panels = std::max(1, register_tile(rows_per_block_, false).vectors / 2);
    panels_per_block_ =
        std::max(panels_per_block_, std::min(tile_panels, weight_bound ? panels_ / 2 : panels_));
    // Few pieces, an odd count of them: two threads split 3 as 2 + 1 and 5 as 3 + 2, so the
    // product takes 2/3 or 3/5 of its one-thread time, where an even count would take half.
    // The nearest even count of column blocks of near-equal widths, narrower ones first (down
    // to the register tile's), else wider ones. At 64x64: googlenet's 1x1 1024 > 1000 (3
    // blocks, now 4), 3x3 160 > 320 on 2x2 (5, now 4), 1x1 192 > 64 on 8x8 (3 row blocks,
    // now 4: above); resnet50's 1x1 64 > 256 on 16x16 (15 row blocks, now 15 x 2). No result
    // changes: the widths of the column blocks change no sum
    // (FewRowLayersRunWholeTilesBitForBitAsOnePanelBlocks).
    const int64_t row_pieces = ceil_div(rows, rows_per_block_) * groups_;
    const int64_t blocks = ceil_div(panels_, panels_per_block_);
    const int64_t pieces = row_pieces * blocks;
    if (tiling.pieces <= 0 && pieces > 1 && pieces < kEvenPiecesBelow && pieces % 2 != 0) {
      const auto even_width = [&](int64_t count) {
        const int64_t width = ceil_div(panels_, count);
        return row_pieces * ceil_div(panels_, width) % 2 == 0 ? width : 0;
      };
      int64_t width = 0;
      for (int64_t count = blocks + 1; width == 0 && count <= panels_ &&
                                       ceil_div(panels_, count) >= std::min(tile_panels, panels_);
           ++count)
        width = even_width(count);
      for (int64_t count = blocks - 1; width == 0 && count >= 1; --count) width = even_width(count);
      if (width > 0) panels_per_block_ = width;
    }
  }
  blocks_per_group_ = ceil_div(panels_, panels_per_block_);
}

gemm::TileShape GemmConvolution::register_tile(int64_t block_rows, bool narrow_only) const {
  gemm::TileShape shape = tile_vectors_ > 0 && !narrow_only
                              ? gemm::tile_shape_of_width(kernel_isa_, tile_vectors_)
                              : gemm::tile_shape(kernel_isa_, block_rows, narrow_only,
                                                 reduction_taps_ * reduction_channels_);
  if (max_tile_rows_ > 0)
    shape.rows = static_cast<int>(std::min<int64_t>(shape.rows, max_tile_rows_));
  return shape;
}

int64_t GemmConvolution::register_tile_rows(int64_t block_rows, bool narrow_only) const {
  return register_tile(block_rows, narrow_only).rows;
}

GemmTiling GemmConvolution::tiling() const {
  GemmTiling t;
  t.pieces = row_blocks() * column_blocks();
  t.rows_per_block = rows_per_block_;
  t.column_splits = blocks_per_group_;
  t.loop_order = rows_outside_ ? LoopOrder::kRowsOutside : LoopOrder::kColumnsOutside;
  t.tile_rows = register_tile_rows(rows_per_block_, false);
  t.reduction_block = tap_block_ * channel_block_;
  t.tile_vectors = register_tile(rows_per_block_, false).vectors;
  return t;
}

int64_t GemmConvolution::row_blocks() const {
  return ceil_div(geometry_.out_pixels(), rows_per_block_);
}

int64_t GemmConvolution::column_blocks() const { return groups_ * blocks_per_group_; }

std::pair<int64_t, int64_t> GemmConvolution::column_block_channels(int64_t column_block) const {
  const int64_t group = column_block / blocks_per_group_;
  const int64_t first = column_block % blocks_per_group_ * panels_per_block_ * panel_width_;
  const int64_t last = std::min(group_out_, first + panels_per_block_ * panel_width_);
  return {group * group_out_ + first, group * group_out_ + last};
}

int64_t GemmConvolution::bytes() const {
  return static_cast<int64_t>(sizeof(float) * (packed_.size() + bias_.size() + zeros_.size()) +
                              sizeof(int32_t) * offsets_.size());
}

}  // namespace nimble::kernels::nhwc

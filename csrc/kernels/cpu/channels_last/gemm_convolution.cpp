// GemmConvolution (gemm_convolution.h): packing the weight into column panels, the per-tap
// input offsets, the tiling, and the loop over a tile's register tiles. The register tiles
// themselves are in gemm_microkernels.cpp.
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
// Groups of at most half this many output channels are merged up to it (the constructor).
// Measured on a 3x3 of 32 groups of 4 channels: 2.2x faster as 16 groups of 8 (block-
// diagonal, half the multiply-adds on zeros) than as 32 groups whose 4 channels would fill
// half a vector and whose few channels a tap leave the row addressing dominating.
constexpr int64_t kMergedGroupWidth = 8;
// Bounds the row pointers a block keeps on the stack (8 KiB of them).
constexpr int64_t kMaxBlockRows = 512;
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
            tiling.tile_rows >= 0,
        "negative tiling parameter (0 is the rule's choice)");
  max_tile_rows_ = tiling.tile_rows;
  const int64_t rows = g.out_pixels();
  const int64_t reduction = taps_ * group_in_;
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
    const int64_t tile_rows = register_tile_rows(ceil_div(rows, row_blocks), false);
    const int64_t height = ceil_div(rows, ceil_div(rows, tile_rows));
    const int64_t subtiles_per_block = ceil_div(ceil_div(rows, height), row_blocks);
    rows_per_block_ = std::min(kMaxBlockRows, subtiles_per_block * height);
  }
  const bool small_weight =
      static_cast<int64_t>(sizeof(float)) * group_floats_ * groups_ <= kSmallWeightBytes;
  rows_outside_ = tiling.loop_order == LoopOrder::kRule
                      ? small_weight
                      : tiling.loop_order == LoopOrder::kRowsOutside;
  // Whatever tiles the row blocks did not make; rounded down, as rounding the rows to whole
  // register tiles leaves a few blocks short of `tiles`.
  const int64_t column_splits =
      tiling.column_splits > 0
          ? tiling.column_splits
          : std::max<int64_t>(1, tiles / (ceil_div(rows, rows_per_block_) * groups_));
  panels_per_block_ = ceil_div(panels_, std::min(column_splits, panels_));
  blocks_per_group_ = ceil_div(panels_, panels_per_block_);
}

int64_t GemmConvolution::register_tile_rows(int64_t block_rows, bool narrow_only) const {
  const int64_t most = gemm::tile_shape(kernel_isa_, block_rows, narrow_only).rows;
  return max_tile_rows_ > 0 ? std::min(most, max_tile_rows_) : most;
}

GemmTiling GemmConvolution::tiling() const {
  GemmTiling t;
  t.pieces = row_blocks() * column_blocks();
  t.rows_per_block = rows_per_block_;
  t.column_splits = blocks_per_group_;
  t.loop_order = rows_outside_ ? LoopOrder::kRowsOutside : LoopOrder::kColumnsOutside;
  t.tile_rows = register_tile_rows(rows_per_block_, false);
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

void GemmConvolution::run(const float* input, float* output, const float* residual,
                          const Epilogue& epilogue, int64_t row_block_begin, int64_t row_block_end,
                          int64_t column_block_begin, int64_t column_block_end,
                          int64_t input_pixel_stride) const {
  if (input_pixel_stride <= 0) input_pixel_stride = geometry_.in_channels;
  if (!direct_ && input_pixel_stride != geometry_.in_channels)
    throw std::invalid_argument("GemmConvolution: only a 1x1 product reads strided pixels");
  const int64_t rows = geometry_.out_pixels();
  const auto block = [&](int64_t rb, int64_t cb) {
    const int64_t group = cb / blocks_per_group_;
    const int64_t panel_begin = cb % blocks_per_group_ * panels_per_block_;
    const int64_t row_begin = rb * rows_per_block_;
    run_block(input, output, residual, epilogue, row_begin,
              std::min(rows, row_begin + rows_per_block_), group, panel_begin,
              std::min(panels_, panel_begin + panels_per_block_), input_pixel_stride);
  };
  if (rows_outside_) {
    for (int64_t rb = row_block_begin; rb < row_block_end; ++rb) {
      for (int64_t cb = column_block_begin; cb < column_block_end; ++cb) block(rb, cb);
    }
  } else {
    for (int64_t cb = column_block_begin; cb < column_block_end; ++cb) {
      for (int64_t rb = row_block_begin; rb < row_block_end; ++rb) block(rb, cb);
    }
  }
}

void GemmConvolution::run_block(const float* input, float* output, const float* residual,
                                const Epilogue& epilogue, int64_t row_begin, int64_t row_end,
                                int64_t group, int64_t panel_begin, int64_t panel_end,
                                int64_t input_pixel_stride) const {
  const ConvolutionGeometry& g = geometry_;
  const int64_t n = row_end - row_begin;
  const float* bases[kMaxBlockRows];
  const int32_t* offsets[kMaxBlockRows];
  const float* group_input = input + group * group_in_;
  // Windows copied for the block's pixels that reach into the padding (merged_taps_ only).
  std::vector<float> windows;
  if (!direct_) {
    const int64_t pixels = g.out_height() * g.out_width();
    const int64_t image_floats = g.height * g.width * g.in_channels;
    const int64_t row_taps = merged_taps_ ? g.kernel_h : taps_;
    int64_t image = row_begin / pixels, pixel = row_begin % pixels, padded = 0;
    for (int64_t i = 0; i < n; ++i) {
      bases[i] = group_input + image * image_floats;
      offsets[i] = offsets_.data() + pixel * row_taps;
      padded += merged_taps_ && offsets[i][0] < 0;
      if (++pixel == pixels) {
        pixel = 0;
        ++image;
      }
    }
    if (padded > 0) {
      const int64_t window_floats = taps_ * g.in_channels;
      windows.resize(padded * window_floats);
      float* window = windows.data();
      for (int64_t i = 0; i < n; ++i) {
        if (offsets[i][0] >= 0) continue;
        copy_window(bases[i], (row_begin + i) % pixels, window);
        bases[i] = window;
        offsets[i] = window_offsets_.data();
        window += window_floats;
      }
    }
  }

  gemm::TileArgs t;
  const float* first_row = nullptr;  // what t.rows points to for a product in place
  if (direct_) t.rows = &first_row;
  t.row_stride = input_pixel_stride;
  t.zero = zeros_.data();
  t.taps = direct_ ? 1 : merged_taps_ ? g.kernel_h : taps_;
  t.channels = merged_taps_ ? g.kernel_w * group_in_ : group_in_;
  t.panel_stride = panel_floats_;
  t.ldc = g.out_channels;
  t.epilogue = &epilogue;
  t.isa = isa_;
  const bool narrow_only = narrow_last_ && panel_begin == panels_ - 1;
  gemm::TileShape shape = gemm::tile_shape(kernel_isa_, n, narrow_only);
  shape.rows = static_cast<int>(register_tile_rows(n, narrow_only));
  const int64_t lanes = gemm::lanes(kernel_isa_);
  // Register tiles of near-equal height: 17 rows of 8-row tiles run as 6 + 6 + 5, not
  // 8 + 8 + 1 (a one-row tile runs at a fraction of the FMA rate).
  const int64_t subtiles = ceil_div(n, shape.rows);
  const int64_t height = n / subtiles, taller = n % subtiles;
  const int64_t full_panels_end = narrow_last_ && panel_end == panels_ ? panels_ - 1 : panel_end;
  // Panels [p, p + chunk) in one call of `vectors` vectors.
  const auto chunk_at = [&](int64_t p, int* vectors) -> int64_t {
    if (p >= full_panels_end) {
      *vectors = 1;
      return 1;
    }
    int64_t chunk = std::min<int64_t>(shape.vectors / 2, full_panels_end - p);
    while (chunk & (chunk - 1)) --chunk;  // kernels come in 1, 2 and 4 panels
    *vectors = static_cast<int>(2 * chunk);
    return chunk;
  };
  const auto tile = [&](int64_t p, int vectors, int64_t i, int64_t m) {
    t.weight = packed_.data() + group * group_floats_ + p * panel_floats_;
    t.bias = bias_.data() + group * group_columns_ + p * panel_width_;
    t.columns = std::min(group_out_ - p * panel_width_, vectors * lanes);
    const int64_t at = (row_begin + i) * g.out_channels + group * group_out_ + p * panel_width_;
    if (direct_) {
      first_row = group_input + (row_begin + i) * input_pixel_stride;
    } else {
      t.rows = bases + i;
      t.offsets = offsets + i;
    }
    t.out = output + at;
    t.residual = residual ? residual + at : nullptr;
    gemm::run_tile(kernel_isa_, static_cast<int>(m), vectors, t);
  };
  // A chunk of panels stays in cache (L1, or L2 for long reductions) while the block's rows
  // go by; the rows' inputs (at most kBlockInputFloats) stay in L2.
  for (int64_t p = panel_begin, chunk = 0; p < panel_end; p += chunk) {
    int vectors = 0;
    chunk = chunk_at(p, &vectors);
    for (int64_t s = 0, i = 0; s < subtiles; ++s) {
      const int64_t m = height + (s < taller ? 1 : 0);
      tile(p, vectors, i, m);
      i += m;
    }
  }
}

void GemmConvolution::copy_window(const float* image, int64_t pixel, float* window) const {
  const ConvolutionGeometry& g = geometry_;
  const int64_t oy = pixel / g.out_width(), ox = pixel % g.out_width();
  for (int64_t ky = 0; ky < g.kernel_h; ++ky) {
    const int64_t iy = oy * g.stride_h - g.pad_h + ky * g.dilation_h;
    for (int64_t kx = 0; kx < g.kernel_w; ++kx, window += g.in_channels) {
      const int64_t ix = ox * g.stride_w - g.pad_w + kx;
      if (iy >= 0 && iy < g.height && ix >= 0 && ix < g.width) {
        std::copy_n(image + (iy * g.width + ix) * g.in_channels, g.in_channels, window);
      } else {
        std::fill_n(window, g.in_channels, 0.0F);
      }
    }
  }
}

}  // namespace nimble::kernels::nhwc

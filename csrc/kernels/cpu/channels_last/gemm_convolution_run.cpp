// GemmConvolution (gemm_convolution.h): running its tiles, in the tiling's order, and the loop
// over a tile's register tiles (gemm_microkernels.cpp) and the parts of its reduction.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "csrc/kernels/cpu/channels_last/gemm_convolution.h"
#include "csrc/kernels/cpu/channels_last/gemm_microkernels.h"

namespace nimble::kernels::nhwc {

void GemmConvolution::run(const float* input, float* output, const float* residual,
                          const Epilogue& epilogue, int64_t row_block_begin, int64_t row_block_end,
                          int64_t column_block_begin, int64_t column_block_end,
                          int64_t input_pixel_stride) const {
  run_range(input, output, residual, epilogue, row_block_begin, row_block_end, column_block_begin,
            column_block_end, input_pixel_stride, -1);
}

void GemmConvolution::run_range(const float* input, float* output, const float* residual,
                                const Epilogue& epilogue, int64_t row_block_begin,
                                int64_t row_block_end, int64_t column_block_begin,
                                int64_t column_block_end, int64_t input_pixel_stride,
                                int64_t next_column) const {
  if (input_pixel_stride <= 0) input_pixel_stride = geometry_.in_channels;
  if (!direct_ && input_pixel_stride != geometry_.in_channels)
    throw std::invalid_argument("GemmConvolution: only a 1x1 product reads strided pixels");
  const int64_t rows = geometry_.out_pixels();
  const auto block = [&](int64_t rb, int64_t cb, const float* ahead) {
    const int64_t part = rb - row_block_begin, parts = row_block_end - row_block_begin;
    const int64_t group = cb / blocks_per_group_;
    const int64_t panel_begin = cb % blocks_per_group_ * panels_per_block_;
    const int64_t row_begin = rb * rows_per_block_;
    run_block(input, output, residual, epilogue, row_begin,
              std::min(rows, row_begin + rows_per_block_), group, panel_begin,
              std::min(panels_, panel_begin + panels_per_block_), input_pixel_stride, ahead, part,
              parts);
  };
  if (rows_outside_) {
    // A row block's column blocks of one group in one run_block: its register tiles as wide as
    // the tile shape, across the blocks (a few-row layer's columns split in blocks narrower
    // than the tile: gemm_convolution.cpp, weight_bound). The same sums as block by block.
    for (int64_t rb = row_block_begin; rb < row_block_end; ++rb) {
      const int64_t row_begin = rb * rows_per_block_;
      for (int64_t cb = column_block_begin; cb < column_block_end;) {
        const int64_t group = cb / blocks_per_group_;
        const int64_t last = std::min(column_block_end, (group + 1) * blocks_per_group_);
        const int64_t panel_begin = cb % blocks_per_group_ * panels_per_block_;
        const int64_t panel_end =
            std::min(panels_, ((last - 1) % blocks_per_group_ + 1) * panels_per_block_);
        run_block(input, output, residual, epilogue, row_begin,
                  std::min(rows, row_begin + rows_per_block_), group, panel_begin, panel_end,
                  input_pixel_stride);
        cb = last;
      }
    }
  } else {
    for (int64_t cb = column_block_begin; cb < column_block_end; ++cb) {
      // The column block's row blocks ask for the next column block's weight, each for a share
      // of it, where this thread runs it next (prefetch_weight_).
      const int64_t next = cb + 1 < column_block_end ? cb + 1 : next_column;
      const float* ahead =
          prefetch_weight_ && next >= 0 && next < column_blocks()
              ? panel_weight(next / blocks_per_group_, next % blocks_per_group_ * panels_per_block_)
              : nullptr;
      for (int64_t rb = row_block_begin; rb < row_block_end; ++rb) block(rb, cb, ahead);
    }
  }
}

void GemmConvolution::run_tiles(const float* input, float* output, const float* residual,
                                const Epilogue& epilogue, int64_t begin, int64_t end,
                                int64_t input_pixel_stride, Claims claims) const {
  const int64_t rows = row_blocks(), columns = column_blocks();
  if (rows_outside_) {
    // Whole or partial runs of one row block's column blocks.
    for (int64_t tile = begin; tile < end;) {
      const int64_t row = tile / columns, column = tile % columns;
      const int64_t last = std::min(end - row * columns, columns);
      run(input, output, residual, epilogue, row, row + 1, column, last, input_pixel_stride);
      tile = row * columns + last;
    }
    return;
  }
  // Whole or partial runs of one column block's rows. A column block whose first row block the
  // thread runs next asks for that block's weight ahead (prefetch_weight_). A helper's next
  // claim is the tiles before its run (share_work), so its run goes from its last column block
  // to its first, each asking for the one before, the first for the one before the run: a run
  // of one column block (a helper's claim on a map of few rows) otherwise starts each claim
  // on a weight not asked for. Measured one thread, caches swept, a helper's claims against the
  // same tiles as one run (docs/history/cpu-measurements.md,
  // "Two threads, session 13"): 3x3 256 > 256 on 4x4
  // (resnet50 at 64x64) 1.40x -> 1.21x, 1x1 1024 > 512 on 4x4 1.31x -> 1.11x. Only where the
  // register tile is 2 vectors wide: with the 4-vector tile (reductions below
  // kWideTileReduction) the claims were slower with it (1x1 832 > 256 on 7x7 1.11x -> 1.26x).
  if (claims == Claims::kThenBefore) {
    const bool ask_before = register_tile(rows_per_block_, false).vectors <= 2;
    for (int64_t tile = end; tile > begin;) {
      const int64_t column = (tile - 1) / rows, first = std::max(begin - column * rows, int64_t{0});
      const int64_t last = tile - column * rows;
      const bool before = first == 0 && column > 0 && (ask_before || column * rows > begin);
      run_range(input, output, residual, epilogue, first, last, column, column + 1,
                input_pixel_stride, before ? column - 1 : -1);
      tile = column * rows + first;
    }
    return;
  }
  for (int64_t tile = begin; tile < end;) {
    const int64_t column = tile / rows, row = tile % rows;
    const int64_t last = std::min(end - column * rows, rows);
    const bool next = last == rows && end > (column + 1) * rows;
    run_range(input, output, residual, epilogue, row, last, column, column + 1, input_pixel_stride,
              next ? column + 1 : -1);
    tile = column * rows + last;
  }
}

void GemmConvolution::run_block(const float* input, float* output, const float* residual,
                                const Epilogue& epilogue, int64_t row_begin, int64_t row_end,
                                int64_t group, int64_t panel_begin, int64_t panel_end,
                                int64_t input_pixel_stride, const float* ahead, int64_t ahead_part,
                                int64_t ahead_parts) const {
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
  t.tap_channels = reduction_channels_;
  t.panel_stride = panel_floats_;
  t.ldc = g.out_channels;
  t.epilogue = &epilogue;
  t.isa = isa_;
  t.prefetch_rows = prefetch_rows_;
  const bool narrow_only = narrow_last_ && panel_begin == panels_ - 1;
  const gemm::TileShape shape = register_tile(n, narrow_only);
  const int64_t lanes = gemm::lanes(kernel_isa_);
  // Register tiles of near-equal height: 17 rows of 8-row tiles run as 6 + 6 + 5, not
  // 8 + 8 + 1 (a one-row tile runs at a fraction of the FMA rate).
  const int64_t subtiles = (n + shape.rows - 1) / shape.rows;
  const int64_t height = n / subtiles, taller = n % subtiles;
  // Tiles of few rows stream the weight themselves (gemm::kPrefetchRows); asking for the next
  // column block's on top of that was slower (0.7x-0.9x on 1-4 rows: 3x3 of 192-512 channels
  // on a 2x2 map, a linear layer of 2048 > 1000, caches flushed, the Sapphire Rapids VM).
  if (height <= gemm::kPrefetchRows) ahead = nullptr;
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
  // `ahead`: the next column block's weight, asked into L2 chunk by chunk while this block's
  // chunks run, this block's share of it (unblocked reductions only: a chunk's weight is then
  // one run of floats).
  const float* const packed_end = packed_.data() + packed_.size();
  const int64_t steps = reduction_taps_ * reduction_channels_;
  if (tap_block_ != reduction_taps_ || channel_block_ != reduction_channels_) ahead = nullptr;
  const auto tile = [&](int64_t p, int vectors, int64_t i, int64_t m) {
    t.weight = panel_weight(group, p);
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
  // One part of the reduction at a time: its weight for a chunk of panels stays in L1 while
  // the block's rows go by, and the rows' inputs for it stay in L1/L2 while the chunks go by.
  for (int64_t tap = 0; tap < reduction_taps_; tap += tap_block_) {
    t.first_tap = tap;
    t.taps = std::min(tap_block_, reduction_taps_ - tap);
    for (int64_t c = 0; c < reduction_channels_; c += channel_block_) {
      t.first_channel = c;
      t.channels = std::min(channel_block_, reduction_channels_ - c);
      t.accumulate = tap > 0 || c > 0;
      t.finish = tap + t.taps == reduction_taps_ && c + t.channels == reduction_channels_;
      for (int64_t p = panel_begin, chunk = 0; p < panel_end; p += chunk) {
        int vectors = 0;
        chunk = chunk_at(p, &vectors);
        // The next column block's chunk at the same place is as wide as this one (vectors x
        // lanes floats a step of the reduction); each register tile of the pass over this
        // column block's rows asks for its share, whole floats a step.
        const int64_t shares = ahead_parts * subtiles;
        t.prefetch_step = std::min<int64_t>(32, (vectors * lanes + shares - 1) / shares);
        const float* next = ahead ? ahead + (p - panel_begin) * panel_floats_ +
                                        ahead_part * subtiles * steps * t.prefetch_step
                                  : nullptr;
        t.prefetch = next && next < packed_end ? next : nullptr;
        for (int64_t s = 0, i = 0; s < subtiles; ++s) {
          const int64_t m = height + (s < taller ? 1 : 0);
          tile(p, vectors, i, m);
          i += m;
          if (t.prefetch) t.prefetch += steps * t.prefetch_step;
        }
      }
    }
  }
  if (merge_ > 1) {
    repair_merged_rows(bases, offsets, group_input, output, residual, epilogue, row_begin, n, group,
                       panel_begin, panel_end, input_pixel_stride);
  }
}

namespace {

// Whether any of x[0, n) is a NaN or an infinity (all exponent bits set), without an early
// exit, so that the loop vectorises.
bool any_non_finite(const float* x, int64_t n) {
  uint32_t found = 0;
  for (int64_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, x + i, sizeof bits);
    found |= static_cast<uint32_t>((bits & 0x7f800000U) == 0x7f800000U);
  }
  return found != 0;
}

}  // namespace

void GemmConvolution::repair_merged_rows(const float* const* bases, const int32_t* const* offsets,
                                         const float* group_input, float* output,
                                         const float* residual, const Epilogue& epilogue,
                                         int64_t row_begin, int64_t rows, int64_t group,
                                         int64_t panel_begin, int64_t panel_end,
                                         int64_t input_pixel_stride) const {
  const ConvolutionGeometry& g = geometry_;
  const int64_t in_per_group = group_in_ / merge_, out_per_group = group_out_ / merge_;
  const int64_t first = panel_begin * panel_width_;
  const int64_t columns = std::min(group_out_, panel_end * panel_width_) - first;
  const int64_t lanes = gemm::lanes(kernel_isa_);
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t at = (row_begin + i) * g.out_channels + group * group_out_ + first;
    float* out = output + at;
    if (!any_non_finite(out, columns)) continue;
    for (int64_t column = first; column < first + columns; ++column) {
      const int64_t panel = column / panel_width_, j = column % panel_width_;
      const int64_t width = narrow_last_ && panel == panels_ - 1 ? lanes : panel_width_;
      const float* weight = panel_weight(group, panel) + j;
      const int64_t c0 = column / out_per_group * in_per_group;  // its own group's channels
      float sum = bias_[group * group_columns_ + column];
      for (int64_t tap = 0; tap < taps_; ++tap) {
        const float* in = nullptr;  // the row's input for this tap; null: padding
        if (direct_) {
          in = group_input + (row_begin + i) * input_pixel_stride;
        } else if (offsets[i][tap] >= 0) {
          in = bases[i] + offsets[i][tap];
        }
        if (in == nullptr) continue;
        for (int64_t c = c0; c < c0 + in_per_group; ++c)
          sum += in[c] * weight[(tap * group_in_ + c) * width];
      }
      out[column - first] = sum;
    }
    finish(isa_, out, residual ? residual + at : nullptr, columns, epilogue);
  }
}

void GemmConvolution::copy_window(const float* image, int64_t pixel, float* window) const {
  // A kernel row's taps lie side by side in NHWC (merged_taps_: no column dilation), so each
  // kernel row is one run of zeros, one copy of its taps inside the image and one run of zeros:
  // a copy of a tap's few channels at a time (49 calls of 3 floats for a 7x7 stem) made a pixel
  // in the padding cost 3.5x one inside (resnet's stem at 64x64, one thread: 153 against 94 us
  // without padding, ONNX Runtime's 112).
  const ConvolutionGeometry& g = geometry_;
  const int64_t oy = pixel / g.out_width(), ox = pixel % g.out_width();
  const int64_t c = g.in_channels, row_floats = g.kernel_w * c;
  const int64_t x0 = ox * g.stride_w - g.pad_w;
  const int64_t first = std::clamp<int64_t>(-x0, 0, g.kernel_w);
  const int64_t last = std::clamp<int64_t>(g.width - x0, first, g.kernel_w);
  for (int64_t ky = 0; ky < g.kernel_h; ++ky, window += row_floats) {
    const int64_t iy = oy * g.stride_h - g.pad_h + ky * g.dilation_h;
    if (iy < 0 || iy >= g.height) {
      std::fill_n(window, row_floats, 0.0F);
      continue;
    }
    std::fill_n(window, first * c, 0.0F);
    if (last > first)
      std::copy_n(image + (iy * g.width + x0 + first) * c, (last - first) * c, window + first * c);
    std::fill_n(window + last * c, row_floats - last * c, 0.0F);
  }
}

}  // namespace nimble::kernels::nhwc

#pragma once
// A dense or grouped 2-d convolution over channels-last (NHWC) activations as an indirect
// matrix product: output pixels are rows, output channels are columns, and the reduction runs
// over (tap, input channel). Each output pixel reads, per tap, the input pixel that tap lands
// on, or zeros in the padding (offsets computed once per geometry, not per call, so the input
// may move between calls). A 1x1 convolution of stride 1 and no padding is the plain product
// [pixels, C] x [C, K] (the same kernel reading rows in place); so is a linear layer, called
// with a 1x1 geometry of height 1 and width = rows. The weight is packed once into column
// panels as wide as the CPU's vector registers allow; the epilogue (epilogue.h) is applied
// to each tile as it is stored. AVX-512 or AVX2+FMA microkernels by the Isa the object was
// made for (epilogue.h; by default the best this CPU has), a portable path otherwise.
// Torch-free.
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "csrc/kernels/cpu/channels_last/convolution_geometry.h"
#include "csrc/kernels/cpu/channels_last/epilogue.h"
#include "csrc/kernels/cpu/channels_last/kernel_parameters.h"
#include "csrc/kernels/cpu/channels_last/packed_allocator.h"

namespace nimble::kernels::nhwc {

namespace gemm {
struct TileShape;  // gemm_microkernels.h
}  // namespace gemm

class GemmConvolution {
 public:
  // `weight`: PyTorch's [K, C / groups, KH, KW], contiguous; `bias`: [K] or null (zeros).
  // The geometry is fixed for the object's life (the offsets and packing depend on it).
  // `tiling`: the rule's below for each field left 0 (kernel_parameters.h).
  GemmConvolution(const float* weight, const float* bias, const ConvolutionGeometry& geometry,
                  Isa isa = best_isa(), const GemmTiling& tiling = {});
  Isa isa() const { return isa_; }

  const ConvolutionGeometry& geometry() const { return geometry_; }
  // Work is split into tiles: row blocks (of output pixels, over all images) times column
  // blocks (panels of output channels, over all groups). Any set of distinct tiles may run
  // on different threads at once.
  int64_t row_blocks() const;
  int64_t column_blocks() const;
  // The output channels [first, second) column block `column_block` computes.
  std::pair<int64_t, int64_t> column_block_channels(int64_t column_block) const;
  // The tiling in effect, every field resolved (pieces: row_blocks() x column_blocks();
  // column_splits: blocks a group's panels make; tile_rows: a full block's register tile).
  GemmTiling tiling() const;
  // Computes tiles [row_block_begin, row_block_end) x [column_block_begin, column_block_end).
  // `input`: NHWC contiguous [images][height][width][in_channels]; `output` and `residual`
  // (null: none): NHWC contiguous [images][out_height][out_width][out_channels].
  // out = epilogue(conv + bias (+ residual)). Where reads_rows_in_place(), the input's pixels
  // may be `input_pixel_stride` floats apart (0: in_channels), as in a slice of the channels
  // of a wider tensor.
  void run(const float* input, float* output, const float* residual, const Epilogue& epilogue,
           int64_t row_block_begin, int64_t row_block_end, int64_t column_block_begin,
           int64_t column_block_end, int64_t input_pixel_stride = 0) const;
  // Tiles [begin, end) of the row_blocks() x column_blocks() tiles, numbered in the order the
  // tiling visits them (rows outside: row block by row block; columns outside: column block by
  // column block), so that a thread's run of consecutive tiles reuses what the order keeps in
  // cache: a row block's input, or a column block's weight. Arguments as run()'s. `claims`:
  // what the thread runs after this run; with columns outside, a column block asks for the
  // weight of the one the thread runs next while it runs (the .cpp says where). No result
  // depends on it.
  enum class Claims {
    kAlone,       // nothing next to the run, or the tiles after it (the run goes forwards)
    kThenBefore,  // the tiles before `begin` (a helper claiming from the back: share_work); the
                  // run goes column block by column block backwards
  };
  void run_tiles(const float* input, float* output, const float* residual, const Epilogue& epilogue,
                 int64_t begin, int64_t end, int64_t input_pixel_stride = 0,
                 Claims claims = Claims::kAlone) const;
  // 1x1, stride 1, no padding: each output pixel's row is its input pixel's channels.
  bool reads_rows_in_place() const { return direct_; }
  // Bytes held by the packed weight, bias and offsets.
  int64_t bytes() const;

 private:
  // run(); `next_column`: the column block the thread runs after this range (from its first
  // row block; -1: none or unknown), whose weight the last column block may then ask for ahead.
  void run_range(const float* input, float* output, const float* residual, const Epilogue& epilogue,
                 int64_t row_block_begin, int64_t row_block_end, int64_t column_block_begin,
                 int64_t column_block_end, int64_t input_pixel_stride, int64_t next_column) const;
  // One block of rows by panels [panel_begin, panel_end) of one group. `ahead` (null: none):
  // the weight of the column block the thread runs next, asked into L2 while this one runs,
  // by the row blocks of this column block, share `ahead_part` of `ahead_parts` here.
  void run_block(const float* input, float* output, const float* residual, const Epilogue& epilogue,
                 int64_t row_begin, int64_t row_end, int64_t group, int64_t panel_begin,
                 int64_t panel_end, int64_t input_pixel_stride, const float* ahead = nullptr,
                 int64_t ahead_part = 0, int64_t ahead_parts = 1) const;
  // Merged groups only (merge_ > 1): the rows of a block just run whose results hold a NaN or
  // an infinity are computed again group by group, skipping the block-diagonal weight's zeros
  // (0 x inf is NaN: an infinity in one group's input would turn its merged neighbours' results
  // to NaN where eager's are finite). Arguments as run_block's; `bases` and `offsets` its rows'.
  void repair_merged_rows(const float* const* bases, const int32_t* const* offsets,
                          const float* group_input, float* output, const float* residual,
                          const Epilogue& epilogue, int64_t row_begin, int64_t rows, int64_t group,
                          int64_t panel_begin, int64_t panel_end, int64_t input_pixel_stride) const;
  // The packed weight of panel `panel` of group `group`.
  const float* panel_weight(int64_t group, int64_t panel) const {
    return packed_.data() + group * group_floats_ + panel * panel_floats_;
  }
  // Rows of the register tiles of a block of `block_rows`: the tile shape's, capped by the
  // tiling's tile_rows (every height below the shape's has its kernel).
  int64_t register_tile_rows(int64_t block_rows, bool narrow_only) const;
  // The register tile shape of a block of `block_rows`: the tile shape's, or the tiling's
  // tile_vectors wide, its rows capped by tile_rows.
  gemm::TileShape register_tile(int64_t block_rows, bool narrow_only) const;
  // The input window of output pixel `pixel` of the image at `image`, zeros in the padding,
  // as [kernel_h][kernel_w][in_channels] (merged_taps_).
  void copy_window(const float* image, int64_t pixel, float* window) const;

  // Bounds the row pointers a block keeps on the stack (8 KiB of them).
  static constexpr int64_t kMaxBlockRows = 512;

  ConvolutionGeometry geometry_;
  Isa isa_;
  // The code that runs: isa_, except that AVX-512 runs groups of at most 8 output channels
  // (grouped convolutions of width 8, depthwise) with the AVX2 kernels, as a 16-lane vector
  // would be half padding and two groups cannot share one (they read different inputs).
  Isa kernel_isa_;
  // The groups as the kernel runs them: the geometry's, or fewer and wider where tiny groups
  // are merged (.cpp, kMergedGroupWidth). The reduction is taps_ x group_in_.
  int64_t groups_ = 1, taps_ = 1, group_in_ = 0, group_out_ = 0;
  int64_t merge_ = 1;  // the geometry's groups a kernel group holds
  // Output channels of a group are packed into panels_ column panels of panel_width_ floats
  // (two vectors of kernel_isa_), [tap][channel][width] each, panel_floats_ apart; the last panel
  // is one vector wide when that covers the group's remaining channels (narrow_last_), else it is
  // zero-padded. group_columns_: a group's padded width (bias_ holds that many a group).
  int64_t panel_width_ = 0, panels_ = 0, panel_floats_ = 0, group_columns_ = 0;
  int64_t group_floats_ = 0;  // packed floats a group
  bool narrow_last_ = false;
  // 1x1, stride 1, no padding: row r reads input + r * in_channels in place, no offsets_.
  bool direct_ = false;
  // Few input channels, one group (.cpp, kMergeTapsBelowChannels): the kernel reduces over
  // kernel_h taps of kernel_w x in_channels floats each (the packing is the same: a kernel
  // row's taps and channels are consecutive in it); offsets_ then holds one offset a kernel
  // row, and pixels whose window reaches into the padding read a copy of it (copy_window)
  // through window_offsets_.
  bool merged_taps_ = false;
  std::vector<int32_t> window_offsets_;
  // Tiling, fixed at construction from the geometry. A tile should be worth a thread: about
  // kTileMacs (.cpp: 256 Ki multiply-adds, ~5 us on one Zen 4 core) each, and at least two
  // tiles once the whole product is worth splitting (128 Ki multiply-adds, ~2.5 us, a few
  // times what waking a second thread costs). Groups are column blocks of their own; rows
  // are split next, into blocks of at least 8 rows (one full register tile) and at most what
  // keeps a block's input (rows x taps x group channels) within 256 KiB of L2, as a block's
  // panels are swept over the same rows; a block is a whole number of register tiles, all of
  // one height (the rows split evenly into tiles of at most the tile shape's rows). A group's
  // panels are split only when rows cannot be: few-row products (linear layers, late small feature
  // maps) split their panels, and so do few rows of a small weight with at least two output
  // channels a row (two threads then read half the weight each, not all of it: the .cpp's
  // weight_bound). E.g. (rows, C, K): (4, 576, 160) is 1 x 2 tiles, (1, 1280, 1000) 1 x 4,
  // (3136, 24, 144) 40 x 1, (16, 512, 112) 1 x 2. A GemmTiling replaces any of these choices
  // (kernel_parameters.h).
  int64_t rows_per_block_ = 1, panels_per_block_ = 1, blocks_per_group_ = 1;
  int64_t max_tile_rows_ = 0;  // 0: the tile shape's
  int tile_vectors_ = 0;       // 0: the tile shape's; else 2, 4 or 8 (GemmTiling::tile_vectors)
  // The reduction as the microkernels see it, reduction_taps_ x reduction_channels_ (taps_ x
  // group_in_, or kernel rows x kernel_w x group_in_ where merged_taps_), swept in blocks of
  // tap_block_ x channel_block_: a block's rows go through one part of the reduction before
  // the next part (GemmTiling::reduction_block; the rule's is one block, the .cpp says why).
  int64_t reduction_taps_ = 1, reduction_channels_ = 0, tap_block_ = 1, channel_block_ = 0;
  // run()'s and run_tiles()' order over the tiles: row blocks outside when the whole packed
  // weight is small (at most 256 KiB, it stays in L2 while each row block's input is reused by
  // every column block; ~5% on a 3x3 convolution of 16 groups of 8), column blocks outside
  // otherwise (a block's panels stay in cache while the rows go by, where rows outside would
  // stream the whole weight from memory once per row block: 1.8x on resnet50's 3x3 of 512
  // channels on a 7x7 map, one thread on the Xeon).
  bool rows_outside_ = false;
  // Register tiles ask for their output and residual lines first (.cpp, kPrefetchOutputBytes).
  bool prefetch_rows_ = false;
  // Register tiles ask for the next chunk's weight into L2 while they run (columns outside:
  // the weight is beyond L2; gemm::TileArgs::prefetch).
  bool prefetch_weight_ = false;
  std::vector<float, PackedAllocator<float>> packed_;  // [group][panel][tap][channel][width]
  std::vector<float, PackedAllocator<float>> bias_;    // [group][group_columns_], zero-padded
  // [out pixel of one image][tap]: floats from the image's start to the input pixel's first
  // channel, -1 in the padding. Empty when direct_.
  std::vector<int32_t> offsets_;
  std::vector<float> zeros_;  // a group's worth of zero channels, read for padding taps
};

}  // namespace nimble::kernels::nhwc

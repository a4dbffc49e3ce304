#pragma once
// A dense 3x3 convolution of stride 1 and dilation 1 over channels-last (NHWC) activations by
// Winograd's F(2x2, 3x3) (Lavin and Gray, 2015): each 2x2 block of outputs (a tile) is computed
// from the 4x4 input window under it as Y = A^T [(G g G^T) . (B^T d B)] A, 16 products per
// (input, output) channel pair where the direct form takes 36 (2.25x fewer multiply-adds).
// - The weight is transformed once, when the object is made (U = G g G^T in double, rounded
//   once), into 16 [C, K] matrices, each packed as GemmConvolution's product weight.
// - A block of tiles is transformed (V = B^T d B, zero padding read as zeros) into 16 [tiles, C]
//   matrices in a scratch buffer, vectorized over channels; the 16 products M = V U run on
//   GemmConvolution's register-tile microkernels (a 1x1 product reading its rows in place); the
//   output transform (Y = A^T M A) adds the bias, writes the tile's 2x2 pixels (those inside
//   the output at odd edges) and applies the epilogue (residual add, activation) to each
//   stored pixel, still in L1.
// Why F(2x2, 3x3) and not F(4x4, 3x3) (4x fewer multiply-adds): its transforms have only 0,
// +-1 and 1/2 as coefficients, so V and Y are sums of 4 and 9 terms with no scaling and U is
// exact but for one rounding; its float error stays within a few times the direct form's
// (the suite measures it), where F(4x4, 3x3)'s coefficients (up to 8, and 1/6, 1/24) grow it
// by one to two orders of magnitude (Barabasz et al., "Error analysis and improving the
// accuracy of Winograd convolution", 2020), too close to the 1e-3 of scale at which the
// lowering's own check (docs/cpu.md) gives a layer back to ATen. Its 4x4 tiles also waste
// less on the small maps of late layers (a 7x7 map is 16 tiles, 13% of the products padding).
// The vector code is winograd_transforms.inc, compiled once per ISA (isa.h). Torch-free.
#include <cstdint>
#include <memory>
#include <vector>

#include "csrc/kernels/cpu/channels_last/convolution_geometry.h"
#include "csrc/kernels/cpu/channels_last/epilogue.h"
#include "csrc/kernels/cpu/channels_last/gemm_convolution.h"
#include "csrc/kernels/cpu/channels_last/packed_allocator.h"

namespace nimble::kernels::nhwc {

// How a WinogradConvolution's work is split into pieces (0: the rule's, winograd_convolution.cpp).
struct WinogradSplit {
  int64_t block_tiles = 0;    // tiles a block (clamped to [1, tiles])
  int64_t column_splits = 0;  // blocks the output channels are split into (at most the panels)
};

class WinogradConvolution {
 public:
  static constexpr int kPositions = 16;  // elements of a transformed 4x4 tile

  // Whether the geometry is one this kernel computes: 3x3, stride 1, dilation 1, one group
  // (any channel counts, padding, map size and batch).
  static bool applies(const ConvolutionGeometry& geometry);
  // `weight`: PyTorch's [K, C, 3, 3], contiguous; `bias`: [K] or null (zeros). Throws
  // std::invalid_argument where applies() is false.
  WinogradConvolution(const float* weight, const float* bias, const ConvolutionGeometry& geometry,
                      Isa isa = best_isa(), WinogradSplit split = {});
  Isa isa() const { return isa_; }
  const ConvolutionGeometry& geometry() const { return geometry_; }

  // Work is split into pieces: blocks of tiles (over all images) times blocks of output
  // channels, numbered column block by column block within a block of tiles. Any set of
  // distinct pieces may run on different threads at once; a call running several column
  // blocks of one block of tiles transforms its input once.
  int64_t pieces() const { return tile_blocks_ * column_blocks_; }
  int64_t tiles() const { return tiles_h_ * tiles_w_ * geometry_.images; }
  int64_t tiles_per_block() const { return block_tiles_; }
  int64_t column_blocks() const { return column_blocks_; }
  // Computes pieces [begin, end). `input`: NHWC contiguous [images][height][width][C];
  // `output` and `residual` (null: none): NHWC contiguous [images][out_h][out_w][K].
  // out = epilogue(conv + bias (+ residual)).
  void run(const float* input, float* output, const float* residual, const Epilogue& epilogue,
           int64_t begin, int64_t end) const;
  // Bytes held by the transformed weight, the bias and the zeros read for padding.
  int64_t bytes() const;

 private:
  ConvolutionGeometry geometry_;
  Isa isa_;
  int64_t tiles_h_ = 0, tiles_w_ = 0;
  // Tiles a block: its 16 [tiles, C] and [tiles, K] matrices stay in L2 while the 16
  // products sweep them (.cpp says how many). The last block may be short: the rows past the
  // last tile are zeros, computed and not stored.
  int64_t block_tiles_ = 0, tile_blocks_ = 0;
  // Output channels are split into column_blocks_ blocks (the products' column blocks) when
  // the tiles alone make too few pieces for the threads (small maps: an 8x8 map is 16 tiles).
  int64_t column_blocks_ = 1;
  // One product a position: [block_tiles_, C] x U[position] ([C, K]), packed by the GEMM.
  std::vector<std::unique_ptr<const GemmConvolution>> products_;
  std::vector<float> bias_;   // [K], zeros without a bias
  std::vector<float> zeros_;  // C zeros, read for input pixels in the padding
};

}  // namespace nimble::kernels::nhwc

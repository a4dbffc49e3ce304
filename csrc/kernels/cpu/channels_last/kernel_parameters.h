#pragma once
// The tunable parameters of nimble's channels-last convolution kernels (gemm_convolution.h,
// depthwise_convolution.h). Every field's zero (or default) value is the kernels' own rule, so
// a default-constructed value is the rule's choice and a tuner (tuning_families/
// prepacked_family.cpp) can move any one parameter away from it. The values are run-time loop
// bounds over code instantiated once: no parameter adds a template instance. Out-of-range
// values are clamped to what the kernel and its shape allow (a block of more rows than there
// are is all rows), negative ones refused. Torch-free.
#include <cstdint>
#include <string>

namespace nimble::kernels::nhwc {

// Which tiles GemmConvolution::run visits outside: the rule's (rows outside when the packed
// weight fits L2), row blocks, or column blocks.
enum class LoopOrder { kRule, kRowsOutside, kColumnsOutside };

// GemmConvolution's tiling. The rule (gemm_convolution.h says why) first picks how many tiles
// the work is worth, then rows per block from that and the L2 budget, then splits a group's
// panels with what the row blocks did not make. A field set here replaces that step's choice;
// the later steps still follow from it.
struct GemmTiling {
  int64_t pieces = 0;          // tiles the work is split into (0: by its multiply-adds)
  int64_t rows_per_block = 0;  // output pixels a block (0: from pieces and the L2 budget)
  int64_t column_splits = 0;   // blocks a group's panels are split into (0: what is left)
  LoopOrder loop_order = LoopOrder::kRule;
  int64_t tile_rows = 0;  // most rows of one register tile (0: the tile shape's most)
  // Floats of the reduction ((tap, input channel) pairs) a block's rows sweep before the next
  // part of the reduction (0: the rule's; at least the whole reduction: not blocked).
  int64_t reduction_block = 0;
  // Accumulator vectors a register tile is wide (2, 4 or 8: one, two or four weight panels; 0:
  // the tile shape's, by the block's rows and the reduction, gemm_microkernels.h), its rows
  // then the most that width's kernel takes (tile_rows still caps them). Other values are
  // clamped to the nearest of those at most 8; a narrow last panel keeps its one vector.
  int64_t tile_vectors = 0;

  bool operator==(const GemmTiling& o) const {
    return pieces == o.pieces && rows_per_block == o.rows_per_block &&
           column_splits == o.column_splits && loop_order == o.loop_order &&
           tile_rows == o.tile_rows && reduction_block == o.reduction_block &&
           tile_vectors == o.tile_vectors;
  }
};

// The depthwise kernel's blocking.
struct DepthwiseBlocking {
  int64_t channel_vectors = 0;  // most channel vectors a block (0: 4, what fills the registers)
  int64_t pixels = 0;           // most output pixels a block (0: what the ISA's registers hold)
  bool windows = true;          // register windows where the kernel shape allows (the rule)
  int64_t pieces = 0;           // row ranges the work is split into (0: one a row)

  bool operator==(const DepthwiseBlocking& o) const {
    return channel_vectors == o.channel_vectors && pixels == o.pixels && windows == o.windows &&
           pieces == o.pieces;
  }
};

// Both kernels' parameters, as a tuned lowering carries them. Written "gemm.tile_rows=4
// depthwise.windows=off", naming only the fields not at the rule's ("" for the rule).
struct KernelParameters {
  GemmTiling gemm;
  DepthwiseBlocking depthwise;

  bool operator==(const KernelParameters& o) const {
    return gemm == o.gemm && depthwise == o.depthwise;
  }
  bool is_rule() const { return *this == KernelParameters{}; }
  std::string to_string() const;
  // The inverse of to_string(); throws std::invalid_argument naming what it cannot read.
  static KernelParameters parse(const std::string& text);
};

}  // namespace nimble::kernels::nhwc

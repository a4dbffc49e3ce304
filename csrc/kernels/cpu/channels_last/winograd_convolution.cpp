// WinogradConvolution (winograd_convolution.h): the weight transform, the blocking, and the
// loop over a block's tiles. The transforms' vector code is winograd_transforms.inc; the 16
// products per block are GemmConvolution's.
#include "csrc/kernels/cpu/channels_last/winograd_convolution.h"

#include <algorithm>
#include <new>
#include <stdexcept>
#include <string>

#include "csrc/kernels/cpu/channels_last/vector_ops.h"

namespace nimble::kernels::nhwc {
namespace {

// A block's transformed inputs and products, 16 x tiles x (C + K) floats, within 512 KiB of
// L2 (1 MiB on the project's Zen 4), with at least 16 tiles (two register tiles of rows a
// product) and at most 128 (past that a product's packed weight panel is reused enough).
constexpr int64_t kBlockFloats = int64_t{1} << 17;
constexpr int64_t kMinBlockTiles = 16, kMaxBlockTiles = 128;
// Where the blocks of tiles are fewer than kFewPieces (small maps: 16x16 is 64 tiles), the
// tiles are split into up to kFewPieces blocks of at least kMinBlockTiles where the products
// have kPieceMacs multiply-adds a piece; a single block's output channels are split in two
// from 2 x kPieceMacs (gemm_convolution.h's threshold for two tiles), each piece then
// transforming the block's input (a call running both, once). Blocks of tiles transform no
// input twice: resnet18's and resnet50's 3x3 64 > 64 on 16x16, one block of 64 tiles with
// its 64 channels split in two before, took 1.77x less time on two threads than on one, in
// 4 blocks of 16 tiles 2.0x, and 0.9x the time on one (docs/history/cpu-measurements.md,
// "Small maps on two threads, session 13"). More column blocks, or blocks of 8 tiles on 8x8 maps,
// measured no better: narrower column blocks run narrower register tiles, each transforming the
// input.
constexpr int64_t kFewPieces = 4;
constexpr int64_t kPieceMacs = int64_t{1} << 16;
// Each block of tiles reads all of U (16 C K floats) once: where U is more than 1.5x every
// tile's V and M together (16 tiles (C + K) floats), one block of all tiles, its channels in
// two column blocks (each piece transforming the whole input, as above), reads U once where
// blocks within kBlockFloats read it 3-4 times from L3 or memory. Sapphire Rapids VM (2 MiB
// L2), one thread, caches swept, us: 256 > 256 on 14x14 (4 blocks of 13 tiles) 1374 -> 1119
// (hot 915 -> 620), each thread's half 817 -> 619; 160 > 320 969 -> 835; 128 > 256 649 -> 590
// (3 pieces, 500 + 300, -> 2 of 334 and 337); 96 > 208 (1.34x) 398 against 395: left as it
// was; 28x28 maps and larger (U below the tiles' V and M) lose with one block
// (docs/history/cpu-measurements.md, "Winograd's blocks at 224, session 14").
constexpr int64_t kWeightOverTiles = 3;  // in halves: U > 1.5 x (V + M)

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

void check(bool ok, const char* what) {
  if (!ok) throw std::invalid_argument(std::string("WinogradConvolution: ") + what);
}

// Scratch of a run: allocated on each call, left uninitialized (every float read is written
// first), so that a call costs no memset of its half MiB.
template <class T>
struct ScratchAllocator : PackedAllocator<T> {
  template <class U>
  struct rebind {
    using other = ScratchAllocator<U>;
  };
  template <class U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;
  }
};

// The portable code's "vector": one float.
struct ScalarOps {
  using Vec = float;
  using Mask = int;
  static constexpr int kWidth = 1;
  static float load(const float* p) { return *p; }
  static float load(const float* p, Mask) { return *p; }
  static void store(float* p, float y) { *p = y; }
  static void store(float* p, float y, Mask) { *p = y; }
  static float add(float a, float b) { return a + b; }
  static float sub(float a, float b) { return a - b; }
  static Mask first_lanes(int n) { return n; }
};

#pragma GCC push_options
#pragma GCC target("avx512f")
namespace avx512 {
using Ops = Avx512Ops;
#include "csrc/kernels/cpu/channels_last/winograd_transforms.inc"
}  // namespace avx512
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx2,fma")
namespace avx2 {
using Ops = Avx2Ops;
#include "csrc/kernels/cpu/channels_last/winograd_transforms.inc"
}  // namespace avx2
#pragma GCC pop_options

namespace portable {
using Ops = ScalarOps;
#include "csrc/kernels/cpu/channels_last/winograd_transforms.inc"
}  // namespace portable

void input_tile(Isa isa, const float* const* rows, float* v, int64_t position_stride,
                int64_t channels) {
  switch (isa) {
    case Isa::kAvx512:
      return avx512::input_tile(rows, v, position_stride, channels);
    case Isa::kAvx2:
      return avx2::input_tile(rows, v, position_stride, channels);
    case Isa::kPortable:
      return portable::input_tile(rows, v, position_stride, channels);
  }
}

void output_tile(Isa isa, const float* m, int64_t position_stride, const float* bias,
                 float* const* out, int64_t begin, int64_t end) {
  switch (isa) {
    case Isa::kAvx512:
      return avx512::output_tile(m, position_stride, bias, out, begin, end);
    case Isa::kAvx2:
      return avx2::output_tile(m, position_stride, bias, out, begin, end);
    case Isa::kPortable:
      return portable::output_tile(m, position_stride, bias, out, begin, end);
  }
}

// U = G g G^T of one 3x3 kernel, in double, G = [1 0 0; 1/2 1/2 1/2; 1/2 -1/2 1/2; 0 0 1].
void weight_transform(const float* g, double* u) {
  static constexpr double kG[4][3] = {{1, 0, 0}, {0.5, 0.5, 0.5}, {0.5, -0.5, 0.5}, {0, 0, 1}};
  double gg[4][3];  // G g
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 3; ++j)
      gg[i][j] = kG[i][0] * g[j] + kG[i][1] * g[3 + j] + kG[i][2] * g[6 + j];
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j)
      u[4 * i + j] = gg[i][0] * kG[j][0] + gg[i][1] * kG[j][1] + gg[i][2] * kG[j][2];
}

}  // namespace

bool WinogradConvolution::applies(const ConvolutionGeometry& g) {
  return g.kernel_h == 3 && g.kernel_w == 3 && g.stride_h == 1 && g.stride_w == 1 &&
         g.dilation_h == 1 && g.dilation_w == 1 && g.groups == 1;
}

WinogradConvolution::WinogradConvolution(const float* weight, const float* bias,
                                         const ConvolutionGeometry& geometry, Isa isa,
                                         WinogradSplit split)
    : geometry_(geometry), isa_(isa) {
  const ConvolutionGeometry& g = geometry;
  check(supports(isa), "this CPU cannot run the Isa asked for");
  check(applies(g), "only 3x3 convolutions of stride 1, dilation 1 and one group");
  check(g.images >= 1 && g.height >= 1 && g.width >= 1, "empty input");
  check(g.in_channels >= 1 && g.out_channels >= 1, "no channels");
  check(g.pad_h >= 0 && g.pad_w >= 0, "negative padding");
  check(g.out_height() >= 1 && g.out_width() >= 1, "empty output");
  const int64_t c = g.in_channels, k = g.out_channels;
  tiles_h_ = ceil_div(g.out_height(), 2);
  tiles_w_ = ceil_div(g.out_width(), 2);
  const int64_t tiles = this->tiles();
  const int64_t most =
      std::clamp(kBlockFloats / (kPositions * (c + k)), kMinBlockTiles, kMaxBlockTiles);
  tile_blocks_ = ceil_div(tiles, most);
  const int64_t macs = kPositions * tiles * c * k;
  const int64_t wanted = macs >= kFewPieces * kPieceMacs ? kFewPieces
                         : macs >= 2 * kPieceMacs        ? 2
                                                         : 1;
  // A transformed weight well above all the tiles' V and M (14x14 maps of 128 channels and
  // more): one block of every tile, the channels split for the threads, reads U once.
  if (kWeightOverTiles * tiles * (c + k) < 2 * c * k) {
    tile_blocks_ = 1;
  } else if (tile_blocks_ < wanted) {
    int64_t blocks = std::min(wanted, tiles / kMinBlockTiles);
    if (blocks == 3) blocks = 2;  // an odd count runs 2 : 1 on two threads
    tile_blocks_ = std::max(tile_blocks_, blocks);
  }
  if (split.block_tiles > 0) tile_blocks_ = ceil_div(tiles, std::min(split.block_tiles, tiles));
  block_tiles_ = ceil_div(tiles, tile_blocks_);  // blocks of near-equal size
  tile_blocks_ = ceil_div(tiles, block_tiles_);
  const int64_t column_splits = split.column_splits > 0           ? split.column_splits
                                : tile_blocks_ == 1 && wanted > 1 ? 2
                                                                  : 1;

  // U[position] as a [K, C, 1, 1] weight, the layout GemmConvolution packs.
  std::vector<std::vector<float>> u(kPositions, std::vector<float>(k * c));
  double transformed[kPositions];
  for (int64_t out = 0; out < k; ++out) {
    for (int64_t in = 0; in < c; ++in) {
      weight_transform(weight + (out * c + in) * 9, transformed);
      for (int p = 0; p < kPositions; ++p) u[p][out * c + in] = static_cast<float>(transformed[p]);
    }
  }
  ConvolutionGeometry product;  // [block_tiles_, C] x [C, K], rows read in place
  product.height = 1;
  product.width = block_tiles_;
  product.in_channels = c;
  product.out_channels = k;
  GemmTiling tiling;
  tiling.pieces = 1;
  tiling.rows_per_block = block_tiles_;
  tiling.column_splits = column_splits;
  for (int p = 0; p < kPositions; ++p)
    products_.push_back(
        std::make_unique<const GemmConvolution>(u[p].data(), nullptr, product, isa, tiling));
  column_blocks_ = products_[0]->column_blocks();
  bias_.assign(k, 0.0F);
  if (bias) std::copy(bias, bias + k, bias_.begin());
  zeros_.assign(c, 0.0F);
}

int64_t WinogradConvolution::bytes() const {
  int64_t total = static_cast<int64_t>(sizeof(float) * (bias_.size() + zeros_.size()));
  for (const auto& product : products_) total += product->bytes();
  return total;
}

void WinogradConvolution::run(const float* input, float* output, const float* residual,
                              const Epilogue& epilogue, int64_t begin, int64_t end) const {
  const ConvolutionGeometry& g = geometry_;
  const int64_t c = g.in_channels, k = g.out_channels;
  const int64_t oh = g.out_height(), ow = g.out_width();
  const int64_t tiles = this->tiles(), image_tiles = tiles_h_ * tiles_w_;
  const int64_t v_stride = block_tiles_ * c, m_stride = block_tiles_ * k;
  // The block's V (16 x [tiles, C]) and M (16 x [tiles, K]): this call's own, so that calls
  // on other threads never share one.
  std::vector<float, ScratchAllocator<float>> scratch(kPositions * (v_stride + m_stride));
  float* const v = scratch.data();
  float* const m = v + kPositions * v_stride;
  const float* rows[kPositions];
  float* out[4];
  int64_t transformed = -1;  // the block of tiles whose input v holds
  for (int64_t piece = begin; piece < end; ++piece) {
    const int64_t block = piece / column_blocks_, column_block = piece % column_blocks_;
    const int64_t first = block * block_tiles_;
    const int64_t count = std::min(block_tiles_, tiles - first);
    for (int64_t i = 0; i < count && block != transformed; ++i) {
      const int64_t tile = first + i, image = tile / image_tiles;
      const int64_t y0 = (tile % image_tiles) / tiles_w_ * 2 - g.pad_h;
      const int64_t x0 = tile % tiles_w_ * 2 - g.pad_w;
      const float* image_input = input + image * g.height * g.width * c;
      for (int dy = 0; dy < 4; ++dy) {
        for (int dx = 0; dx < 4; ++dx) {
          const int64_t y = y0 + dy, x = x0 + dx;
          const bool inside = y >= 0 && y < g.height && x >= 0 && x < g.width;
          rows[4 * dy + dx] = inside ? image_input + (y * g.width + x) * c : zeros_.data();
        }
      }
      input_tile(isa_, rows, v + i * c, v_stride, c);
    }
    // A short last block: rows past its tiles read zeros (their results are not stored).
    if (count < block_tiles_ && block != transformed) {
      for (int p = 0; p < kPositions; ++p)
        std::fill(v + p * v_stride + count * c, v + (p + 1) * v_stride, 0.0F);
    }
    transformed = block;
    for (int p = 0; p < kPositions; ++p) {
      products_[p]->run(v + p * v_stride, m + p * m_stride, nullptr, Epilogue{}, 0, 1, column_block,
                        column_block + 1);
    }
    const auto [channel_begin, channel_end] = products_[0]->column_block_channels(column_block);
    for (int64_t i = 0; i < count; ++i) {
      const int64_t tile = first + i, image = tile / image_tiles;
      const int64_t y0 = (tile % image_tiles) / tiles_w_ * 2, x0 = tile % tiles_w_ * 2;
      for (int r = 0; r < 2; ++r) {
        for (int s = 0; s < 2; ++s) {
          const bool inside = y0 + r < oh && x0 + s < ow;
          out[2 * r + s] = inside ? output + ((image * oh + y0 + r) * ow + x0 + s) * k : nullptr;
        }
      }
      output_tile(isa_, m + i * k, m_stride, bias_.data(), out, channel_begin, channel_end);
      if (epilogue.activation == Activation::kNone && !residual) continue;
      for (float* pixel : out) {
        if (!pixel) continue;
        const float* pixel_residual = residual ? residual + (pixel - output) : nullptr;
        finish(isa_, pixel + channel_begin,
               pixel_residual ? pixel_residual + channel_begin : nullptr,
               channel_end - channel_begin, epilogue);
      }
    }
  }
}

}  // namespace nimble::kernels::nhwc

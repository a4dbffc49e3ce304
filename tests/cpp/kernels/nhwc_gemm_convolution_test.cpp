// GemmConvolution (csrc/kernels/cpu/channels_last/gemm_convolution.h) against a naive convolution
// in double: random geometries (groups, kernel sizes, strides, padding, dilation, residual, every
// activation) on every Isa this CPU runs, every value of every tiling parameter, linear-layer
// shapes, the tiling contract (tiles in any order or on two threads give the one-call result),
// NaN propagation and bytes().
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "csrc/kernels/cpu/channels_last/gemm_convolution.h"
#include "tests/cpp/kernels/nhwc_reference.h"

namespace nimble::kernels::nhwc {
namespace {

struct Problem {
  ConvolutionGeometry g;
  std::vector<float> input, weight, bias, residual;
  bool has_bias = true, has_residual = false;
  Epilogue epilogue;

  std::vector<float> reference() const {
    const int64_t oh = g.out_height(), ow = g.out_width();
    const int64_t cg = g.in_channels / g.groups, kg = g.out_channels / g.groups;
    std::vector<float> out(g.out_pixels() * g.out_channels);
    for (int64_t n = 0; n < g.images; ++n)
      for (int64_t oy = 0; oy < oh; ++oy)
        for (int64_t ox = 0; ox < ow; ++ox)
          for (int64_t k = 0; k < g.out_channels; ++k) {
            const int64_t group = k / kg;
            double sum = has_bias ? bias[k] : 0.0;
            for (int64_t ky = 0; ky < g.kernel_h; ++ky)
              for (int64_t kx = 0; kx < g.kernel_w; ++kx) {
                const int64_t iy = oy * g.stride_h - g.pad_h + ky * g.dilation_h;
                const int64_t ix = ox * g.stride_w - g.pad_w + kx * g.dilation_w;
                if (iy < 0 || iy >= g.height || ix < 0 || ix >= g.width) continue;
                for (int64_t c = 0; c < cg; ++c) {
                  const double x =
                      input[((n * g.height + iy) * g.width + ix) * g.in_channels + group * cg + c];
                  sum += x * weight[((k * cg + c) * g.kernel_h + ky) * g.kernel_w + kx];
                }
              }
            const int64_t at = ((n * oh + oy) * ow + ox) * g.out_channels + k;
            if (has_residual) sum += residual[at];
            out[at] = static_cast<float>(reference_activation(sum, epilogue));
          }
    return out;
  }

  std::vector<float> run(Isa isa, const GemmTiling& tiling = {}) const {
    const GemmConvolution conv(weight.data(), has_bias ? bias.data() : nullptr, g, isa, tiling);
    std::vector<float> out(g.out_pixels() * g.out_channels, -7.0F);
    conv.run(input.data(), out.data(), has_residual ? residual.data() : nullptr, epilogue, 0,
             conv.row_blocks(), 0, conv.column_blocks());
    return out;
  }
};

Problem make_problem(const ConvolutionGeometry& g, std::mt19937& rng, bool bias = true,
                     bool residual = false, Epilogue epilogue = {}) {
  Problem p;
  p.g = g;
  p.input = random_floats(g.images * g.height * g.width * g.in_channels, rng);
  p.weight =
      random_floats(g.out_channels * (g.in_channels / g.groups) * g.kernel_h * g.kernel_w, rng);
  p.bias = random_floats(g.out_channels, rng);
  p.residual = random_floats(g.out_pixels() * g.out_channels, rng);
  p.has_bias = bias;
  p.has_residual = residual;
  p.epilogue = epilogue;
  return p;
}

constexpr auto linear = &ConvolutionGeometry::linear;  // short for the many calls below

// Relative and absolute 1e-4: the kernel sums in another order, in float.
void expect_close(const std::vector<float>& got, const std::vector<float>& want,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i])) {
      ASSERT_TRUE(std::isnan(got[i])) << what << " at " << i;
      continue;
    }
    ASSERT_NEAR(got[i], want[i], 1e-4 + 1e-4 * std::fabs(want[i]))
        << what << " at " << i << " of " << got.size();
  }
}

// run_tiles over consecutive ranges of `next_length()` tiles each, as threads claim them
// (ranges that start and end inside row and column blocks), into a fresh output.
template <typename NextLength>
std::vector<float> run_in_ranges(const GemmConvolution& conv, const Problem& p,
                                 const float* residual, NextLength next_length) {
  std::vector<float> out(p.g.out_pixels() * p.g.out_channels, -7.0F);
  const int64_t tiles = conv.row_blocks() * conv.column_blocks();
  for (int64_t begin = 0; begin < tiles;) {
    const int64_t end = std::min(tiles, begin + next_length());
    conv.run_tiles(p.input.data(), out.data(), residual, p.epilogue, begin, end);
    begin = end;
  }
  return out;
}

// run_tiles over ranges of `next_length()` tiles each from the back, each run backwards, as a
// helper claims them (GemmConvolution::Claims::kThenBefore), into a fresh output.
template <typename NextLength>
std::vector<float> run_from_back(const GemmConvolution& conv, const Problem& p,
                                 const float* residual, NextLength next_length) {
  std::vector<float> out(p.g.out_pixels() * p.g.out_channels, -7.0F);
  for (int64_t end = conv.row_blocks() * conv.column_blocks(); end > 0;) {
    const int64_t begin = std::max<int64_t>(0, end - next_length());
    conv.run_tiles(p.input.data(), out.data(), residual, p.epilogue, begin, end, 0,
                   GemmConvolution::Claims::kThenBefore);
    end = begin;
  }
  return out;
}

// A square map of one image, a square kernel with "same" padding.
ConvolutionGeometry square_map(int64_t size, int64_t in, int64_t out, int64_t kernel,
                               int64_t stride = 1) {
  ConvolutionGeometry g;
  g.height = g.width = size;
  g.in_channels = in;
  g.out_channels = out;
  g.kernel_h = g.kernel_w = kernel;
  g.pad_h = g.pad_w = kernel / 2;
  g.stride_h = g.stride_w = stride;
  return g;
}

std::string describe(const Problem& p);

// Every tile in one call (with p's residual), checked against the reference.
std::vector<float> run_all_tiles_checked(const GemmConvolution& conv, const Problem& p) {
  std::vector<float> whole(p.g.out_pixels() * p.g.out_channels, -7.0F);
  conv.run_tiles(p.input.data(), whole.data(), p.residual.data(), p.epilogue, 0,
                 conv.row_blocks() * conv.column_blocks());
  expect_close(whole, p.reference(), describe(p));
  return whole;
}

std::string describe(const Problem& p) {
  const ConvolutionGeometry& g = p.g;
  return "n" + std::to_string(g.images) + " " + std::to_string(g.height) + "x" +
         std::to_string(g.width) + " c" + std::to_string(g.in_channels) + " k" +
         std::to_string(g.out_channels) + " g" + std::to_string(g.groups) + " kernel " +
         std::to_string(g.kernel_h) + "x" + std::to_string(g.kernel_w) + " stride " +
         std::to_string(g.stride_h) + "," + std::to_string(g.stride_w) + " pad " +
         std::to_string(g.pad_h) + "," + std::to_string(g.pad_w) + " dil " +
         std::to_string(g.dilation_h) + "," + std::to_string(g.dilation_w) +
         (p.has_bias ? " bias" : "") + (p.has_residual ? " residual" : "") + " act " +
         std::to_string(static_cast<int>(p.epilogue.activation));
}

Problem random_problem(std::mt19937& rng) {
  const auto pick = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  for (;;) {
    ConvolutionGeometry g;
    g.images = pick(1, 2);
    g.height = pick(1, 12);
    g.width = pick(1, 12);
    const int64_t kind = pick(0, 4);  // dense, grouped, depthwise, pointwise in place
    g.groups = kind == 1 ? pick(2, 4) : 1;
    int64_t cg = pick(1, 70), kg = pick(1, 70);
    if (kind == 2) {
      g.groups = pick(1, 24);
      cg = 1;
      kg = pick(1, 2);
    }
    g.in_channels = cg * g.groups;
    g.out_channels = kg * g.groups;
    if (kind != 3) {
      g.kernel_h = pick(1, 5);
      g.kernel_w = pick(1, 5);
      g.stride_h = pick(1, 3);
      g.stride_w = pick(1, 3);
      g.pad_h = pick(0, 3);
      g.pad_w = pick(0, 3);
      g.dilation_h = pick(1, 2);
      g.dilation_w = pick(1, 2);
    }
    if (g.out_height() < 1 || g.out_width() < 1) continue;
    const int64_t macs = g.out_pixels() * g.out_channels * cg * g.kernel_h * g.kernel_w;
    if (macs > 3'000'000) continue;
    const Epilogue e = random_epilogue(rng);
    return make_problem(g, rng, pick(0, 1) == 1, pick(0, 1) == 1, e);
  }
}

class GemmConvolutionIsaTest : public IsaTest {};

TEST_P(GemmConvolutionIsaTest, MatchesNaiveReferenceOnRandomGeometries) {
  std::mt19937 rng(20240611);
  for (int trial = 0; trial < 400; ++trial) {
    const Problem p = random_problem(rng);
    expect_close(p.run(GetParam()), p.reference(),
                 "trial " + std::to_string(trial) + ": " + describe(p));
    if (HasFatalFailure()) return;
  }
}

// Layers of 1-3 input channels reduce over a kernel row's taps at once, and their pixels whose
// window reaches into the padding read a copy of it: every window position (all paddings,
// strides, row dilations, several images, blocks that start mid-row or mid-image) against the
// reference; then windows whose kernel rows reach past both sides of the image (images narrower
// than the kernel, paddings up to 6) or lie wholly in the padding: a window's kernel row is
// copied as one run of zeros, the taps inside and zeros again.
TEST_P(GemmConvolutionIsaTest, FewChannelLayersMatchReferenceOnEveryPaddedWindow) {
  std::mt19937 rng(7);
  const auto pick = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  for (int trial = 0; trial < 270; ++trial) {
    const bool wide = trial >= 150;  // windows wider than the image
    using G = ConvolutionGeometry;
    const std::vector<std::tuple<int64_t G::*, int64_t, int64_t>> ranges = {
        {&G::images, 1, 3},    {&G::in_channels, 1, 3},      {&G::out_channels, 1, 70},
        {&G::kernel_h, 1, 7},  {&G::kernel_w, 2, 7},         {&G::stride_h, 1, 3},
        {&G::stride_w, 1, 3},  {&G::pad_h, 0, wide ? 6 : 3}, {&G::pad_w, 0, wide ? 6 : 3},
        {&G::dilation_h, 1, 2}};
    G g;
    for (const auto& [field, lo, hi] : ranges) g.*field = pick(lo, hi);
    const int64_t kernel_h = g.dilation_h * (g.kernel_h - 1) + 1;
    g.height =
        wide ? std::max<int64_t>(1, kernel_h - 2 * g.pad_h) + pick(0, 6) : kernel_h + pick(0, 20);
    g.width = wide ? std::max<int64_t>(1, g.kernel_w - 2 * g.pad_w) + pick(0, 6)
                   : g.kernel_w + pick(0, 20);
    const Problem p = make_problem(g, rng, pick(0, 1) == 1, pick(0, 1) == 1, random_epilogue(rng));
    const std::vector<float> want = p.reference();
    GemmTiling odd_blocks;
    odd_blocks.rows_per_block = pick(1, 40);
    for (const GemmTiling& t : {GemmTiling{}, odd_blocks}) {
      expect_close(p.run(GetParam(), t), want,
                   "trial " + std::to_string(trial) + ": " + describe(p) + " rows " +
                       std::to_string(t.rows_per_block));
      if (HasFatalFailure()) return;
    }
  }
}

// Each value of each tiling parameter (kernel_parameters.h), alone and mixed at random, on
// random geometries and epilogues: the tuner may pick any of them.
TEST_P(GemmConvolutionIsaTest, EveryTilingMatchesNaiveReference) {
  std::mt19937 rng(44);
  std::vector<GemmTiling> tilings;
  const auto with = [&](int64_t GemmTiling::*field, std::initializer_list<int64_t> values) {
    for (const int64_t v : values) {
      GemmTiling t;
      t.*field = v;
      tilings.push_back(t);
    }
  };
  with(&GemmTiling::pieces, {1, 2, 3, 5, 8, 40});
  with(&GemmTiling::rows_per_block, {1, 7, 8, 24, 100, 512, 4096});
  with(&GemmTiling::column_splits, {1, 2, 3, 4, 9});
  with(&GemmTiling::tile_rows, {1, 2, 3, 4, 5, 6, 7, 8, 12});
  with(&GemmTiling::reduction_block, {1, 3, 16, 40, 100, 100000});
  with(&GemmTiling::tile_vectors, {1, 2, 3, 4, 8, 20});
  for (const LoopOrder order : {LoopOrder::kRowsOutside, LoopOrder::kColumnsOutside}) {
    tilings.emplace_back();
    tilings.back().loop_order = order;
  }
  const auto pick = [&](int64_t hi) { return std::uniform_int_distribution<int64_t>(0, hi)(rng); };
  for (int trial = 0; trial < 60; ++trial) {
    const Problem p = random_problem(rng);
    const std::vector<float> want = p.reference();
    GemmTiling mixed{pick(8), 8 * pick(20), pick(4),    static_cast<LoopOrder>(pick(2)),
                     pick(8), pick(80),     2 * pick(4)};
    tilings.push_back(mixed);
    for (const GemmTiling& t : tilings) {
      expect_close(p.run(GetParam(), t), want,
                   "trial " + std::to_string(trial) + ": " + describe(p) + " pieces " +
                       std::to_string(t.pieces) + " rows " + std::to_string(t.rows_per_block) +
                       " splits " + std::to_string(t.column_splits) + " order " +
                       std::to_string(static_cast<int>(t.loop_order)) + " tile rows " +
                       std::to_string(t.tile_rows) + " reduction block " +
                       std::to_string(t.reduction_block) + " tile vectors " +
                       std::to_string(t.tile_vectors));
      if (HasFatalFailure()) return;
    }
    tilings.pop_back();
  }
}

// A blocked reduction adds the same products in the same order as one pass and keeps its
// partial sums as the floats the registers held: bit for bit the unblocked result, for blocks
// of parts of a tap's channels, of whole taps, and of a few taps with a short last block, on
// every kind of row (offsets with padding, merged taps of a first layer, rows in place with
// a pixel stride), every epilogue.
TEST_P(GemmConvolutionIsaTest, BlockedReductionIsBitForBitTheUnblockedOne) {
  std::mt19937 rng(46);
  std::vector<Problem> problems;
  for (int trial = 0; trial < 40; ++trial) problems.push_back(random_problem(rng));
  ConvolutionGeometry first;  // merged taps: 3 channels, 7x7, stride 2
  first.height = first.width = 19;
  first.in_channels = 3;
  first.out_channels = 40;
  first.kernel_h = first.kernel_w = 7;
  first.stride_h = first.stride_w = 2;
  first.pad_h = first.pad_w = 3;
  problems.push_back(make_problem(first, rng, true, true, {Activation::kRelu}));
  ConvolutionGeometry wide;  // 3x3 of 300 channels on a 9x9 map, residual and a finish()
  wide.height = wide.width = 9;
  wide.in_channels = 300;
  wide.out_channels = 72;
  wide.kernel_h = wide.kernel_w = 3;
  wide.pad_h = wide.pad_w = 1;
  problems.push_back(make_problem(wide, rng, true, true, {Activation::kSilu}));
  problems.push_back(
      make_problem(linear(37, 517, 90), rng, true, true, {Activation::kClamp, 0, 6}));
  for (const Problem& p : problems) {
    const std::vector<float> whole = p.run(GetParam());
    for (const int64_t floats : {1, 7, 64, 300, 301, 900, 1000}) {
      GemmTiling blocked;
      blocked.reduction_block = floats;
      const std::vector<float> got = p.run(GetParam(), blocked);
      ASSERT_EQ(0, std::memcmp(whole.data(), got.data(), whole.size() * sizeof(float)))
          << describe(p) << " reduction block " << floats;
    }
  }
  // Rows in place, read `stride` floats apart (a slice of a wider tensor's channels).
  const ConvolutionGeometry g = linear(29, 200, 48);
  const Problem p = make_problem(g, rng);
  const int64_t stride = 230;
  std::vector<float> strided(29 * stride, 99.0F);
  for (int64_t r = 0; r < 29; ++r)
    std::copy_n(p.input.data() + r * 200, 200, strided.data() + r * stride);
  std::vector<float> whole(29 * 48), got(29 * 48);
  GemmTiling blocked;
  blocked.reduction_block = 48;
  const GemmConvolution one(p.weight.data(), p.bias.data(), g, GetParam());
  const GemmConvolution parts(p.weight.data(), p.bias.data(), g, GetParam(), blocked);
  one.run(strided.data(), whole.data(), nullptr, {}, 0, one.row_blocks(), 0, one.column_blocks(),
          stride);
  parts.run(strided.data(), got.data(), nullptr, {}, 0, parts.row_blocks(), 0,
            parts.column_blocks(), stride);
  EXPECT_EQ(0, std::memcmp(whole.data(), got.data(), whole.size() * sizeof(float)));
  expect_close(whole, p.reference(), describe(p) + " strided rows");
}

TEST_P(GemmConvolutionIsaTest, LinearLayerShapesIncludingOneRow) {
  std::mt19937 rng(7);
  const std::vector<std::pair<int64_t, std::pair<int64_t, int64_t>>> shapes = {
      {1, {1280, 1000}}, {1, {3, 5}},     {1, {768, 17}}, {2, {512, 48}}, {3, {33, 40}},
      {4, {576, 160}},   {5, {64, 100}},  {7, {100, 31}}, {9, {20, 64}},  {16, {384, 96}},
      {17, {768, 768}},  {33, {70, 129}}, {1, {1, 1}},    {6, {7, 1}}};
  for (const auto& [rows, ck] : shapes) {
    const Problem p = make_problem(linear(rows, ck.first, ck.second), rng, true, rows % 2 == 0,
                                   {Activation::kRelu});
    expect_close(p.run(GetParam()), p.reference(), describe(p));
    if (HasFatalFailure()) return;
  }
}

// The layers the kernel is tuned for (mobilenet_v2, resnet18, googlenet, first layers),
// inception's 1x7 and 7x1, resnext's and regnet's grouped 3x3 (groups of 4, 8 and 16).
TEST_P(GemmConvolutionIsaTest, MatchesReferenceOnNetworkLayers) {
  std::mt19937 rng(11);
  struct Layer {
    int64_t c, k, hw, kh, kw, stride, pad_h, pad_w, groups;
  };
  for (const Layer& l :
       {Layer{64, 64, 16, 3, 3, 1, 1, 1, 1}, Layer{64, 128, 16, 3, 3, 2, 1, 1, 1},
        Layer{3, 64, 32, 7, 7, 2, 3, 3, 1}, Layer{3, 32, 32, 3, 3, 2, 1, 1, 1},
        Layer{16, 32, 8, 5, 5, 1, 2, 2, 1}, Layer{96, 128, 8, 3, 3, 1, 1, 1, 1},
        Layer{24, 144, 28, 1, 1, 1, 0, 0, 1}, Layer{256, 256, 4, 3, 3, 1, 1, 1, 1},
        Layer{64, 80, 9, 1, 7, 1, 0, 3, 1}, Layer{64, 80, 9, 7, 1, 1, 3, 0, 1},
        Layer{128, 128, 14, 3, 3, 1, 1, 1, 32}, Layer{128, 128, 14, 3, 3, 2, 1, 1, 16},
        Layer{96, 96, 10, 3, 3, 1, 1, 1, 6}}) {
    ConvolutionGeometry g;
    g.height = g.width = l.hw;
    g.in_channels = l.c;
    g.out_channels = l.k;
    g.kernel_h = l.kh;
    g.kernel_w = l.kw;
    g.stride_h = g.stride_w = l.stride;
    g.pad_h = l.pad_h;
    g.pad_w = l.pad_w;
    g.groups = l.groups;
    const Problem p = make_problem(g, rng, true, false, {Activation::kClamp, 0.0F, 6.0F});
    expect_close(p.run(GetParam()), p.reference(), describe(p));
  }
}

TEST_P(GemmConvolutionIsaTest, NanInInputStaysNanThroughRelu) {
  std::mt19937 rng(3);
  ConvolutionGeometry pointwise = linear(5, 40, 70);
  ConvolutionGeometry padded;
  padded.height = padded.width = 5;
  padded.in_channels = 20;
  padded.out_channels = 33;
  padded.kernel_h = padded.kernel_w = 3;
  padded.pad_h = padded.pad_w = 1;
  for (const ConvolutionGeometry& g : {pointwise, padded}) {
    for (const Activation a : {Activation::kRelu, Activation::kClamp, Activation::kSilu}) {
      Problem p = make_problem(g, rng, true, false, {a, 0.0F, 6.0F});
      p.input[2 * g.in_channels + 1] = std::numeric_limits<float>::quiet_NaN();  // pixel 2
      const std::vector<float> want = p.reference();
      ASSERT_TRUE(std::isnan(want[2 * g.out_channels]));
      expect_close(p.run(GetParam()), want, describe(p));
    }
  }
}

// Merged groups (groups of at most 4 output channels run 2 to 8 at a time, their weight block-
// diagonal): an infinity or NaN in one group's input leaves the merged neighbours' results as
// eager's (0 x inf would make them NaN); its own group's results are eager's NaN or infinity.
// The 1x1 stride-3 layer on a 1x1 map is the layout fuzz's program 102052 (a max pooling whose
// window lies in the padding gives -inf).
TEST_P(GemmConvolutionIsaTest, AnInfinityInOneGroupLeavesItsMergedNeighboursFinite) {
  std::mt19937 rng(11);
  const auto geometry = [](int64_t images, int64_t size, int64_t in, int64_t out, int64_t kernel,
                           int64_t stride, int64_t groups) {
    ConvolutionGeometry g = square_map(size, in, out, kernel, stride);
    g.images = images;
    g.groups = groups;
    return g;
  };
  const float inf = std::numeric_limits<float>::infinity();
  for (const ConvolutionGeometry& g :
       {geometry(2, 1, 24, 48, 1, 3, 24), geometry(1, 3, 24, 48, 1, 1, 24),
        geometry(2, 6, 128, 128, 3, 1, 32), geometry(1, 9, 48, 24, 3, 2, 12)}) {
    for (const bool residual : {false, true}) {
      for (const Activation a : {Activation::kNone, Activation::kTanh, Activation::kRelu}) {
        Problem p = make_problem(g, rng, true, residual, {a, 0.0F, 6.0F});
        const int64_t last = g.images * g.height * g.width - 1;
        p.input[0] = -inf;                                               // group 0, first pixel
        p.input[last * g.in_channels + g.in_channels / g.groups] = inf;  // group 1, last pixel
        p.input[g.in_channels + g.in_channels - 1] = std::numeric_limits<float>::quiet_NaN();
        const std::vector<float> want = p.reference();
        const std::vector<float> got = p.run(GetParam());
        int64_t finite = 0;
        for (size_t i = 0; i < want.size(); ++i) {
          if (std::isnan(want[i])) {
            ASSERT_TRUE(std::isnan(got[i])) << describe(p) << " at " << i;
          } else if (std::isinf(want[i])) {
            ASSERT_EQ(got[i], want[i]) << describe(p) << " at " << i;
          } else {
            ++finite;
            ASSERT_NEAR(got[i], want[i], 1e-4 + 1e-4 * std::fabs(want[i]))
                << describe(p) << " at " << i;
          }
        }
        ASSERT_GT(finite, static_cast<int64_t>(want.size()) / 2) << describe(p);
      }
    }
  }
}

TEST_P(GemmConvolutionIsaTest, TilesInAnyOrderOrOnTwoThreadsMatchOneCall) {
  std::mt19937 rng(5);
  ConvolutionGeometry grouped;
  grouped.images = 2;
  grouped.height = grouped.width = 20;
  grouped.in_channels = 48;
  grouped.out_channels = 100;
  grouped.groups = 2;
  grouped.kernel_h = grouped.kernel_w = 3;
  grouped.pad_h = grouped.pad_w = 1;
  for (const ConvolutionGeometry& g : {grouped, linear(1, 1280, 1000), linear(4, 576, 160)}) {
    const Problem p = make_problem(g, rng, true, true, {Activation::kGeluTanh});
    const GemmConvolution conv(p.weight.data(), p.bias.data(), g, GetParam());
    const int64_t rb = conv.row_blocks(), cb = conv.column_blocks();
    ASSERT_GE(rb * cb, 2) << describe(p);
    const size_t size = g.out_pixels() * g.out_channels;
    std::vector<float> whole(size), tiled(size, -7.0F), threaded(size, -7.0F);
    conv.run(p.input.data(), whole.data(), p.residual.data(), p.epilogue, 0, rb, 0, cb);
    std::vector<std::pair<int64_t, int64_t>> tiles;
    for (int64_t r = 0; r < rb; ++r)
      for (int64_t c = 0; c < cb; ++c) tiles.emplace_back(r, c);
    std::shuffle(tiles.begin(), tiles.end(), rng);
    for (const auto& [r, c] : tiles) {
      conv.run(p.input.data(), tiled.data(), p.residual.data(), p.epilogue, r, r + 1, c, c + 1);
    }
    const auto half = [&](size_t parity) {
      for (size_t i = parity; i < tiles.size(); i += 2) {
        const auto [r, c] = tiles[i];
        conv.run(p.input.data(), threaded.data(), p.residual.data(), p.epilogue, r, r + 1, c,
                 c + 1);
      }
    };
    std::thread other(half, 1);
    half(0);
    other.join();
    EXPECT_EQ(0, std::memcmp(whole.data(), tiled.data(), size * sizeof(float))) << describe(p);
    EXPECT_EQ(0, std::memcmp(whole.data(), threaded.data(), size * sizeof(float))) << describe(p);
    expect_close(whole, p.reference(), describe(p));
    // run_tiles in either order, over ranges that start and end inside a row or column block.
    for (const LoopOrder order : {LoopOrder::kRowsOutside, LoopOrder::kColumnsOutside}) {
      GemmTiling tiling;
      tiling.loop_order = order;
      const GemmConvolution ordered(p.weight.data(), p.bias.data(), g, GetParam(), tiling);
      int64_t step = 0;  // 1, 3, 5, 2, 4, 6, 3, ...
      const std::vector<float> ranges = run_in_ranges(ordered, p, p.residual.data(), [&] {
        step = step == 0 ? 1 : step % 5 + 2;
        return step;
      });
      EXPECT_EQ(0, std::memcmp(whole.data(), ranges.data(), size * sizeof(float)))
          << describe(p) << " order " << static_cast<int>(order);
    }
  }
}

// Layers whose weight is beyond L2 (columns outside: each column block asks for the next
// one's weight while it runs) and layers whose output is (tiles ask for their output and
// residual lines first): prefetches change no result. Random shapes of both kinds, against the
// reference, and run_tiles over ranges that start and end inside column blocks (where the
// next column block is, or is not, the same thread's) bit for bit as one call.
TEST_P(GemmConvolutionIsaTest, LayersThatPrefetchMatchReferenceAndOneCall) {
  std::mt19937 rng(17);
  for (int trial = 0; trial < 8; ++trial) {
    ConvolutionGeometry g;
    const bool large_weight = trial % 2 == 0;
    const auto pick = [&](int64_t lo, int64_t hi) {
      return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
    };
    g.images = pick(1, 2);
    if (large_weight) {  // 0.3-2.4 MB of weight on 3x3-12x12 maps
      g.height = pick(3, 12);
      g.width = pick(3, 12);
      g.in_channels = pick(200, 600);
      g.out_channels = pick(150, 400);
      g.kernel_h = g.kernel_w = trial % 4 == 0 ? 3 : 1;
      g.pad_h = g.pad_w = g.kernel_h / 2;
      g.stride_h = g.stride_w = pick(1, 2);
    } else {  // 1.1-3 MB of output
      g.height = pick(36, 48);
      g.width = pick(36, 48);
      g.in_channels = pick(8, 80);
      g.out_channels = pick(200, 300);
    }
    const Problem p = make_problem(g, rng, true, true, {Activation::kRelu});
    const GemmConvolution conv(p.weight.data(), p.bias.data(), g, GetParam());
    const size_t size = g.out_pixels() * g.out_channels;
    const std::vector<float> whole = run_all_tiles_checked(conv, p);
    const std::vector<float> ranges =
        run_in_ranges(conv, p, p.residual.data(), [&] { return pick(1, 7); });
    EXPECT_EQ(0, std::memcmp(whole.data(), ranges.data(), size * sizeof(float))) << describe(p);
    const std::vector<float> back =
        run_from_back(conv, p, p.residual.data(), [&] { return pick(1, 7); });
    EXPECT_EQ(0, std::memcmp(whole.data(), back.data(), size * sizeof(float))) << describe(p);
  }
}

// A helper's claims from the back, each run backwards asking for the weight of the column
// block before it (resnet50's layers at 64x64 whose weights exceed L2: columns outside, tiles
// of 2 and 4 vectors), give the floats of one call and of the same tiles run forwards.
TEST_P(GemmConvolutionIsaTest, HelperClaimsFromTheBackMatchOneCall) {
  std::mt19937 rng(13);
  for (const ConvolutionGeometry& g :
       {square_map(4, 256, 256, 3, 1), square_map(4, 1024, 512, 1, 1),
        square_map(8, 256, 256, 3, 2), square_map(4, 256, 1024, 1, 1)}) {
    const Problem p = make_problem(g, rng, true, true, {Activation::kRelu});
    const GemmConvolution conv(p.weight.data(), p.bias.data(), g, GetParam());
    const size_t size = g.out_pixels() * g.out_channels;
    const int64_t tiles = conv.row_blocks() * conv.column_blocks();
    const std::vector<float> whole = run_all_tiles_checked(conv, p);
    for (const int64_t length : {int64_t{1}, int64_t{2}, int64_t{3}, tiles}) {
      const std::vector<float> back =
          run_from_back(conv, p, p.residual.data(), [&] { return length; });
      EXPECT_EQ(0, std::memcmp(whole.data(), back.data(), size * sizeof(float)))
          << describe(p) << " claims of " << length;
    }
  }
}

// On maps of a few rows the rule's column blocks are at least as wide as the register tile
// (the tile then runs at its full width): each output is the same sum in the same order as
// with blocks of one panel and a tile of one panel's width, bit for bit, and the reference's;
// split over ranges of tiles as the threads split it, the same floats again.
TEST_P(GemmConvolutionIsaTest, FewRowLayersRunWholeTilesBitForBitAsOnePanelBlocks) {
  std::mt19937 rng(23);
  const auto pick = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  for (int trial = 0; trial < 24; ++trial) {
    ConvolutionGeometry g;
    g.images = pick(1, 2);
    g.height = pick(1, 4);
    g.width = pick(1, 4);
    g.in_channels = pick(16, 1100);
    g.out_channels = pick(17, 600);
    g.kernel_h = g.kernel_w = trial % 3 == 0 ? 3 : 1;
    g.pad_h = g.pad_w = g.kernel_h / 2;
    const Problem p = make_problem(g, rng, pick(0, 1) == 1, pick(0, 1) == 1, random_epilogue(rng));
    const size_t size = g.out_pixels() * g.out_channels;
    const float* bias = p.has_bias ? p.bias.data() : nullptr;
    const GemmConvolution rule(p.weight.data(), bias, g, GetParam());
    GemmTiling narrow = rule.tiling();
    narrow.column_splits = 1 << 20;  // one panel a block
    narrow.tile_vectors = 2;
    const GemmConvolution one_panel(p.weight.data(), bias, g, GetParam(), narrow);
    std::vector<float> want(size, -7.0F), got(size, -7.0F);
    const float* residual = p.has_residual ? p.residual.data() : nullptr;
    one_panel.run_tiles(p.input.data(), want.data(), residual, p.epilogue, 0,
                        one_panel.row_blocks() * one_panel.column_blocks());
    // Blocks of at least the register tile's panels: at most panels / tile panels of them; or,
    // a small weight's rows in one block (the rule's weight_bound), two of half the panels.
    const int64_t panels = one_panel.column_blocks();
    const int64_t tile_panels =
        std::min<int64_t>(std::max<int64_t>(1, rule.tiling().tile_vectors / 2), panels);
    const bool halves =
        rule.tiling().loop_order == LoopOrder::kRowsOutside && rule.row_blocks() == 1;
    EXPECT_LE(rule.column_blocks(),
              std::max<int64_t>((panels + tile_panels - 1) / tile_panels, halves ? 2 : 1))
        << describe(p);
    const int64_t tiles = rule.row_blocks() * rule.column_blocks();
    rule.run_tiles(p.input.data(), got.data(), residual, p.epilogue, 0, tiles);
    const std::vector<float> ranges = run_in_ranges(rule, p, residual, [&] { return pick(1, 3); });
    expect_close(got, p.reference(), describe(p));
    EXPECT_EQ(0, std::memcmp(want.data(), got.data(), size * sizeof(float))) << describe(p);
    EXPECT_EQ(0, std::memcmp(got.data(), ranges.data(), size * sizeof(float))) << describe(p);
    if (HasFailure()) return;
  }
}

// Few rows against many output channels and a small weight (googlenet's 4x4 layers at 64x64,
// resnet50's 8x8 128 > 512): the rule's rows in one block, the columns in two or more, run
// together where one thread runs several (rows outside). Bit for bit the floats of the rows in
// blocks of 8 and one column block (the rule before), in one call, in the threads' halves and
// in claims from the back; and the reference's. Layers of fewer channels keep their row blocks.
TEST_P(GemmConvolutionIsaTest, WeightBoundFewRowLayersSplitColumnsBitForBit) {
  std::mt19937 rng(15);
  for (const ConvolutionGeometry& g :
       {square_map(4, 512, 112, 1), square_map(4, 512, 64, 1), square_map(4, 24, 64, 3),
        square_map(4, 512, 128, 1), square_map(4, 32, 128, 3), square_map(8, 128, 512, 1),
        square_map(8, 256, 128, 1), square_map(8, 192, 64, 1), square_map(4, 512, 24, 1)}) {
    const Problem p = make_problem(g, rng, true, true, {Activation::kRelu});
    const GemmConvolution rule(p.weight.data(), p.bias.data(), g, GetParam());
    const bool few_rows = g.out_channels >= 2 * g.out_pixels() && g.out_channels > 32;
    EXPECT_EQ(rule.row_blocks() == 1 && rule.column_blocks() >= 2, few_rows) << describe(p);
    GemmTiling rows_split;
    rows_split.rows_per_block = 8;
    rows_split.column_splits = 1;
    rows_split.loop_order = LoopOrder::kRowsOutside;
    const GemmConvolution before(p.weight.data(), p.bias.data(), g, GetParam(), rows_split);
    const size_t size = g.out_pixels() * g.out_channels;
    const std::vector<float> want = run_all_tiles_checked(before, p);
    const std::vector<float> whole = run_all_tiles_checked(rule, p);
    EXPECT_EQ(0, std::memcmp(want.data(), whole.data(), size * sizeof(float))) << describe(p);
    const int64_t tiles = rule.row_blocks() * rule.column_blocks(), half = (tiles + 1) / 2;
    const std::vector<float> halves =
        run_in_ranges(rule, p, p.residual.data(), [&, first = true]() mutable {
          const int64_t length = first ? half : tiles;
          first = false;
          return length;
        });
    EXPECT_EQ(0, std::memcmp(want.data(), halves.data(), size * sizeof(float))) << describe(p);
    const std::vector<float> back = run_from_back(rule, p, p.residual.data(), [] { return 1; });
    EXPECT_EQ(0, std::memcmp(want.data(), back.data(), size * sizeof(float))) << describe(p);
  }
}

TEST_P(GemmConvolutionIsaTest, InputMayMoveBetweenCalls) {
  std::mt19937 rng(9);
  ConvolutionGeometry g;
  g.images = 2;
  g.height = g.width = 7;
  g.in_channels = g.out_channels = 24;
  g.kernel_h = g.kernel_w = 3;
  g.pad_h = g.pad_w = 1;
  const Problem a = make_problem(g, rng);
  Problem b = make_problem(g, rng);
  b.weight = a.weight;
  b.bias = a.bias;
  const GemmConvolution conv(a.weight.data(), a.bias.data(), g, GetParam());
  std::vector<float> out(g.out_pixels() * g.out_channels);
  for (const Problem* p : {&a, static_cast<const Problem*>(&b)}) {
    conv.run(p->input.data(), out.data(), nullptr, {}, 0, conv.row_blocks(), 0,
             conv.column_blocks());
    expect_close(out, p->reference(), describe(*p));
  }
}

INSTANTIATE_TEST_SUITE_P(Isas, GemmConvolutionIsaTest, every_isa(), isa_test_name);

TEST(GemmConvolutionTest, SmallProductsAreOneTileLargerOnesSplit) {
  const std::vector<float> weight(1280 * 1000, 0.5F);
  const GemmConvolution tiny(weight.data(), nullptr, linear(1, 16, 16));
  EXPECT_EQ(tiny.row_blocks() * tiny.column_blocks(), 1);
  for (const ConvolutionGeometry& g :
       {linear(1, 1280, 1000), linear(4, 576, 160), linear(1024, 32, 16), linear(3136, 24, 144)}) {
    const GemmConvolution conv(weight.data(), nullptr, g);
    EXPECT_GE(conv.row_blocks() * conv.column_blocks(), 2) << g.width << "x" << g.in_channels;
  }
}

// Few pieces come in an even count (two threads split 3 as 2 + 1): the odd counts the rule
// made before for googlenet's and resnet50's layers at 64x64 are even, and the results are
// bit for bit those of blocks of one panel (the widths of the column blocks change no sum).
TEST(GemmConvolutionTest, FewPiecesComeInAnEvenCount) {
  std::mt19937 rng(46);
  // (before: 3 column blocks, 5 column blocks, 3, 3 row blocks, 7 column blocks, 15 row blocks)
  for (const ConvolutionGeometry& g :
       {linear(1, 1024, 1000), square_map(2, 160, 320, 3), square_map(2, 832, 256, 1),
        square_map(8, 192, 64, 1), linear(1, 2048, 1000), square_map(16, 64, 256, 1)}) {
    const Problem p = make_problem(g, rng, true, false, {Activation::kRelu});
    const GemmConvolution rule(p.weight.data(), p.bias.data(), g);
    const int64_t pieces = rule.row_blocks() * rule.column_blocks();
    EXPECT_EQ(pieces % 2, 0) << describe(p) << ": " << pieces << " pieces";
    GemmTiling narrow = rule.tiling();
    narrow.column_splits = 1 << 20;  // one panel a block
    narrow.tile_vectors = 2;
    const GemmConvolution one_panel(p.weight.data(), p.bias.data(), g, rule.isa(), narrow);
    const size_t size = g.out_pixels() * g.out_channels;
    std::vector<float> want(size, -7.0F), got(size, -7.0F);
    one_panel.run_tiles(p.input.data(), want.data(), nullptr, p.epilogue, 0,
                        one_panel.row_blocks() * one_panel.column_blocks());
    rule.run_tiles(p.input.data(), got.data(), nullptr, p.epilogue, 0, pieces / 2);
    rule.run_tiles(p.input.data(), got.data(), nullptr, p.epilogue, pieces / 2, pieces);
    expect_close(got, p.reference(), describe(p));
    EXPECT_EQ(0, std::memcmp(want.data(), got.data(), size * sizeof(float))) << describe(p);
  }
}

// The rule's tiling is the all-zero GemmTiling, and a resolved tiling given back is the same
// tiling; each parameter set is the one in effect.
TEST(GemmConvolutionTest, TilingParametersAreTheOnesInEffect) {
  ConvolutionGeometry g;
  g.height = g.width = 28;
  g.in_channels = 32;
  g.out_channels = 96;
  g.kernel_h = g.kernel_w = 3;
  g.pad_h = g.pad_w = 1;
  const std::vector<float> weight(96 * 32 * 9, 0.25F);
  for (const Isa isa : runnable_isas()) {
    const GemmConvolution rule(weight.data(), nullptr, g, isa);
    const GemmTiling resolved = rule.tiling();
    EXPECT_EQ(resolved.pieces, rule.row_blocks() * rule.column_blocks());
    EXPECT_NE(resolved.loop_order, LoopOrder::kRule);
    EXPECT_EQ(GemmConvolution(weight.data(), nullptr, g, isa, resolved).tiling(), resolved);

    GemmTiling asked;
    asked.rows_per_block = 24;
    asked.column_splits = 2;
    asked.loop_order = LoopOrder::kColumnsOutside;
    asked.tile_rows = 3;
    asked.reduction_block = 100;  // 9 taps of 32 channels: blocks of 3 taps
    const GemmConvolution tuned(weight.data(), nullptr, g, isa, asked);
    const GemmTiling got = tuned.tiling();
    EXPECT_EQ(got.rows_per_block, 24);
    EXPECT_EQ(tuned.row_blocks(), (28 * 28 + 23) / 24);
    EXPECT_EQ(got.column_splits, 2);  // 96 channels make at least 3 panels
    EXPECT_EQ(tuned.column_blocks(), 2);
    EXPECT_EQ(got.loop_order, LoopOrder::kColumnsOutside);
    EXPECT_EQ(got.tile_rows, 3);
    EXPECT_EQ(got.reduction_block, 96);
    EXPECT_EQ(resolved.reduction_block, 9 * 32);  // the rule's: not blocked
    asked.reduction_block = 20;                   // parts of a tap's 32 channels: two of 16
    EXPECT_EQ(GemmConvolution(weight.data(), nullptr, g, isa, asked).tiling().reduction_block, 16);
    GemmTiling pieces;
    pieces.pieces = 1;
    const GemmConvolution one(weight.data(), nullptr, g, isa, pieces);
    EXPECT_EQ(one.column_blocks(), 1);  // the L2 budget still splits the rows
    if (isa != Isa::kPortable) {        // the portable code has one tile shape
      GemmTiling wide;
      wide.tile_vectors = 5;  // the widest kernel at most that: 4 vectors
      EXPECT_EQ(GemmConvolution(weight.data(), nullptr, g, isa, wide).tiling().tile_vectors, 4);
      wide.tile_vectors = 8;
      wide.tile_rows = 2;
      const GemmTiling eight = GemmConvolution(weight.data(), nullptr, g, isa, wide).tiling();
      EXPECT_EQ(eight.tile_vectors, 8);
      EXPECT_LE(eight.tile_rows, 2);
    }
    GemmTiling negative;
    negative.tile_rows = -1;
    EXPECT_THROW(GemmConvolution(weight.data(), nullptr, g, isa, negative), std::invalid_argument);
  }
}

// AVX-512 tiles tall blocks of a short reduction 6 rows by 4 vectors, of a long one 8 by 2
// (gemm_microkernels.h, kWideTileReduction); AVX2 keeps 6 by 2.
TEST(GemmConvolutionTest, TallBlocksOfShortReductionsTakeWideTiles) {
  ConvolutionGeometry pointwise = linear(784, 256, 128), dense;
  dense.height = dense.width = 28;
  dense.in_channels = dense.out_channels = 128;
  dense.kernel_h = dense.kernel_w = 3;
  dense.pad_h = dense.pad_w = 1;
  const std::vector<float> weight(128 * 256 * 9, 0.5F);
  for (const Isa isa : runnable_isas()) {
    if (isa == Isa::kPortable) continue;
    const int64_t long_reduction = isa == Isa::kAvx512 ? 8 : 6;
    EXPECT_EQ(GemmConvolution(weight.data(), nullptr, pointwise, isa).tiling().tile_rows, 6);
    EXPECT_EQ(GemmConvolution(weight.data(), nullptr, dense, isa).tiling().tile_rows,
              long_reduction);
  }
}

TEST(GemmConvolutionTest, BytesCoverThePackedWeightAndLittleMore) {
  ConvolutionGeometry g;
  g.height = g.width = 16;
  g.in_channels = g.out_channels = 64;
  g.kernel_h = g.kernel_w = 3;
  g.pad_h = g.pad_w = 1;
  const std::vector<float> weight(64 * 64 * 9, 1.0F);
  const int64_t weight_bytes = 64 * 64 * 9 * 4, offset_bytes = 16 * 16 * 9 * 4;
  const GemmConvolution conv(weight.data(), nullptr, g);
  EXPECT_GE(conv.bytes(), weight_bytes + offset_bytes);
  EXPECT_LE(conv.bytes(), weight_bytes + offset_bytes + 4096);
  const GemmConvolution fc(weight.data(), nullptr, linear(1, 36, 1000));
  EXPECT_GE(fc.bytes(), 36 * 1000 * 4);
  EXPECT_LE(fc.bytes(), 36 * 1008 * 4 + 4096);  // pads to whole vectors, no offsets
}

TEST(GemmConvolutionTest, RejectsInconsistentGeometry) {
  const std::vector<float> weight(64, 1.0F);
  ConvolutionGeometry g = linear(2, 6, 4);
  g.groups = 4;  // 6 channels do not split into 4 groups
  EXPECT_THROW(GemmConvolution(weight.data(), nullptr, g), std::invalid_argument);
  g = linear(2, 4, 4);
  g.kernel_w = 5;  // wider than the padded input
  EXPECT_THROW(GemmConvolution(weight.data(), nullptr, g), std::invalid_argument);
}

}  // namespace
}  // namespace nimble::kernels::nhwc

// WinogradConvolution (csrc/kernels/cpu/channels_last/winograd_convolution.h) against a naive
// 3x3 convolution in double: random shapes (channels 1..67, maps 1..40 of odd and even sizes,
// padding 0 or 1, batch 1..3, bias, residual, every activation) on every Isa this CPU runs; the
// float error against the direct form's (GemmConvolution); pieces in any order or on two
// threads give the one-call result; the geometries it refuses.
//
// Tolerance: an output of F(2x2, 3x3) is a sum over 16 positions and C channels of U * V,
// where V sums up to 4 inputs (|V| <= 4 max|x|) and U = G g G^T up to (3/2)^2 of a weight's
// magnitude; each output sums 9 of the 16 products. Bounding each rounding by u = 2^-24
// times the magnitudes it touches gives |error| <= c u S, S = sum |w| |x| (+ |bias| +
// |residual|), with c of a few tens where the direct form's is the reduction's length in the
// worst case and its square root in practice. The suite asks for 96 u S (64, times 1.5 for
// the steepest activation, hardswish) plus 2e-6 of the result for the epilogue's own
// approximations (exp, erf: epilogue_body.inc); with uniform inputs S is about a quarter of
// 9C, so for 67 channels that is 5e-4 against results of order 10, while one wrong
// transform coefficient moves results by a tenth or more.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iostream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "csrc/kernels/cpu/channels_last/gemm_convolution.h"
#include "csrc/kernels/cpu/channels_last/winograd_convolution.h"
#include "tests/cpp/kernels/nhwc_reference.h"

namespace nimble::kernels::nhwc {
namespace {

constexpr double kUnitRoundoff = 1.0 / (1 << 24);

struct Case {
  ConvolutionGeometry g;
  std::vector<float> input, weight, bias, residual;
  bool has_bias = true, has_residual = false;
  Epilogue epilogue;

  // The result in double, and S (the header) per output.
  void reference(std::vector<double>* out, std::vector<double>* magnitude) const {
    const int64_t oh = g.out_height(), ow = g.out_width(), c = g.in_channels;
    out->assign(g.out_pixels() * g.out_channels, 0.0);
    magnitude->assign(out->size(), 0.0);
    for (int64_t n = 0; n < g.images; ++n)
      for (int64_t oy = 0; oy < oh; ++oy)
        for (int64_t ox = 0; ox < ow; ++ox)
          for (int64_t k = 0; k < g.out_channels; ++k) {
            const int64_t at = ((n * oh + oy) * ow + ox) * g.out_channels + k;
            double sum = has_bias ? bias[k] : 0.0, size = std::fabs(sum);
            for (int64_t ky = 0; ky < 3; ++ky)
              for (int64_t kx = 0; kx < 3; ++kx) {
                const int64_t iy = oy - g.pad_h + ky, ix = ox - g.pad_w + kx;
                if (iy < 0 || iy >= g.height || ix < 0 || ix >= g.width) continue;
                const float* x = &input[((n * g.height + iy) * g.width + ix) * c];
                for (int64_t ch = 0; ch < c; ++ch) {
                  const double term = double{x[ch]} * weight[((k * c + ch) * 3 + ky) * 3 + kx];
                  sum += term;
                  size += std::fabs(term);
                }
              }
            if (has_residual) {
              sum += residual[at];
              size += std::fabs(residual[at]);
            }
            (*out)[at] = reference_activation(sum, epilogue);
            (*magnitude)[at] = size;
          }
  }

  std::vector<float> run(Isa isa) const {
    const WinogradConvolution conv(weight.data(), has_bias ? bias.data() : nullptr, g, isa);
    std::vector<float> out(g.out_pixels() * g.out_channels, -7.0F);
    conv.run(input.data(), out.data(), has_residual ? residual.data() : nullptr, epilogue, 0,
             conv.pieces());
    return out;
  }

  std::string describe() const {
    return "n" + std::to_string(g.images) + " " + std::to_string(g.height) + "x" +
           std::to_string(g.width) + " c" + std::to_string(g.in_channels) + " k" +
           std::to_string(g.out_channels) + " pad " + std::to_string(g.pad_h) + "," +
           std::to_string(g.pad_w) + (has_bias ? " bias" : "") + (has_residual ? " residual" : "") +
           " act " + std::to_string(static_cast<int>(epilogue.activation));
  }
};

Case make_case(const ConvolutionGeometry& g, std::mt19937& rng, bool bias, bool residual,
               Epilogue epilogue) {
  // Braced: its elements are computed in order, so the draws are the same on every compiler.
  return Case{g,
              random_floats(g.images * g.height * g.width * g.in_channels, rng),
              random_floats(g.out_channels * g.in_channels * 9, rng),
              random_floats(g.out_channels, rng),
              random_floats(g.out_pixels() * g.out_channels, rng),
              bias,
              residual,
              epilogue};
}

ConvolutionGeometry three_by_three(int64_t images, int64_t h, int64_t w, int64_t c, int64_t k,
                                   int64_t pad_h, int64_t pad_w) {
  // images, height, width, in and out channels, kernel, stride, padding
  return ConvolutionGeometry{images, h, w, c, k, 3, 3, 1, 1, pad_h, pad_w};
}

Case random_case(std::mt19937& rng) {
  const auto pick = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  for (;;) {
    const ConvolutionGeometry g = three_by_three(pick(1, 3), pick(1, 40), pick(1, 40), pick(1, 67),
                                                 pick(1, 67), pick(0, 1), pick(0, 1));
    if (g.out_height() < 1 || g.out_width() < 1) continue;
    if (g.out_pixels() * g.out_channels * g.in_channels * 9 > 4'000'000) continue;
    const Epilogue e = random_epilogue(rng);
    return make_case(g, rng, pick(0, 1) == 1, pick(0, 1) == 1, e);
  }
}

// The largest error as a fraction of its element's tolerance (the header); fails past 1.
double expect_within_bound(const std::vector<float>& got, const Case& p, const std::string& what) {
  std::vector<double> want, magnitude;
  p.reference(&want, &magnitude);
  EXPECT_EQ(got.size(), want.size()) << what;
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double tolerance = 96 * kUnitRoundoff * magnitude[i] + 2e-6 * (1 + std::fabs(want[i]));
    const double error = std::fabs(got[i] - want[i]);
    if (!(error <= tolerance)) {
      ADD_FAILURE() << what << ": at " << i << " of " << got.size() << " got " << got[i]
                    << ", want " << want[i] << " (tolerance " << tolerance << ")";
      return error / tolerance;
    }
    worst = std::max(worst, error / tolerance);
  }
  return worst;
}

class WinogradIsaTest : public IsaTest {};

TEST_P(WinogradIsaTest, MatchesNaiveReferenceOnRandomShapes) {
  std::mt19937 rng(2046);
  double worst = 0;
  for (int trial = 0; trial < 250; ++trial) {
    const Case p = random_case(rng);
    worst = std::max(worst,
                     expect_within_bound(p.run(GetParam()), p,
                                         "trial " + std::to_string(trial) + ": " + p.describe()));
    if (HasFailure()) return;
  }
  std::cout << "largest error: " << worst << " of the tolerance\n";
}

// Shapes of resnet18's 3x3 layers (64..512 channels, maps 56..7 and odd ones), batch 2, and
// maps smaller than a tile.
TEST_P(WinogradIsaTest, MatchesNaiveReferenceOnNetworkLayersAndTinyMaps) {
  std::mt19937 rng(7);
  for (const ConvolutionGeometry& g :
       {three_by_three(1, 28, 28, 64, 64, 1, 1), three_by_three(2, 7, 7, 256, 96, 1, 1),
        three_by_three(1, 4, 4, 512, 512, 1, 1), three_by_three(1, 13, 9, 96, 160, 1, 1),
        three_by_three(3, 1, 1, 5, 7, 1, 1), three_by_three(1, 3, 3, 9, 17, 0, 0),
        three_by_three(1, 2, 5, 33, 3, 1, 0), three_by_three(2, 1, 40, 8, 24, 1, 1)}) {
    const Case p = make_case(g, rng, true, true, {Activation::kRelu});
    expect_within_bound(p.run(GetParam()), p, p.describe());
  }
}

// RMS error against the double reference, Winograd and the direct form (GemmConvolution) on
// the same layer: the transforms may cost a few times the direct form's error, no more.
TEST_P(WinogradIsaTest, ErrorWithinAFewTimesTheDirectForms) {
  std::mt19937 rng(5);
  const Case p = make_case(three_by_three(1, 14, 14, 256, 64, 1, 1), rng, true, false, {});
  std::vector<double> want, magnitude;
  p.reference(&want, &magnitude);
  const std::vector<float> winograd = p.run(GetParam());
  const GemmConvolution direct(p.weight.data(), p.bias.data(), p.g, GetParam());
  std::vector<float> gemm(want.size());
  direct.run(p.input.data(), gemm.data(), nullptr, {}, 0, direct.row_blocks(), 0,
             direct.column_blocks());
  double winograd_sq = 0, gemm_sq = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    winograd_sq += (winograd[i] - want[i]) * (winograd[i] - want[i]);
    gemm_sq += (gemm[i] - want[i]) * (gemm[i] - want[i]);
  }
  const double winograd_rms = std::sqrt(winograd_sq / want.size());
  const double gemm_rms = std::sqrt(gemm_sq / want.size());
  std::cout << "RMS error: winograd " << winograd_rms << ", direct " << gemm_rms << "\n";
  EXPECT_LE(winograd_rms, 4 * gemm_rms);
}

TEST_P(WinogradIsaTest, PiecesInAnyOrderOrOnTwoThreadsMatchOneCall) {
  std::mt19937 rng(9);
  // Several blocks of tiles; one block whose channels are split in two.
  for (const ConvolutionGeometry& g :
       {three_by_three(2, 30, 26, 24, 40, 1, 1), three_by_three(1, 7, 7, 128, 160, 1, 1)}) {
    const Case p = make_case(g, rng, true, true, {Activation::kGeluTanh});
    const WinogradConvolution conv(p.weight.data(), p.bias.data(), g, GetParam());
    ASSERT_GE(conv.pieces(), 2) << p.describe();
    const size_t size = g.out_pixels() * g.out_channels;
    std::vector<float> whole(size), shuffled(size, -7.0F), threaded(size, -7.0F);
    conv.run(p.input.data(), whole.data(), p.residual.data(), p.epilogue, 0, conv.pieces());
    std::vector<int64_t> order(conv.pieces());
    for (int64_t i = 0; i < conv.pieces(); ++i) order[i] = i;
    std::shuffle(order.begin(), order.end(), rng);
    for (const int64_t piece : order)
      conv.run(p.input.data(), shuffled.data(), p.residual.data(), p.epilogue, piece, piece + 1);
    const auto half = [&](size_t parity) {
      for (size_t i = parity; i < order.size(); i += 2)
        conv.run(p.input.data(), threaded.data(), p.residual.data(), p.epilogue, order[i],
                 order[i] + 1);
    };
    std::thread other(half, 1);
    half(0);
    other.join();
    EXPECT_EQ(0, std::memcmp(whole.data(), shuffled.data(), size * sizeof(float))) << p.describe();
    EXPECT_EQ(0, std::memcmp(whole.data(), threaded.data(), size * sizeof(float))) << p.describe();
    expect_within_bound(whole, p, p.describe());
  }
}

// Small maps: the rule splits 16x16 maps into blocks of 16 tiles (no input transformed
// twice), one block of 8x8 into two column blocks, and no odd count of blocks; every split,
// its pieces on two threads, bit for bit one call of the rule's.
TEST_P(WinogradIsaTest, SmallMapSplitsMatchTheRuleBitForBit) {
  std::mt19937 rng(13);
  const ConvolutionGeometry r64 = three_by_three(1, 16, 16, 64, 64, 1, 1);
  std::vector<float> w64(64 * 64 * 9, 0.01F);
  const WinogradConvolution rule64(w64.data(), nullptr, r64, GetParam());
  EXPECT_EQ(rule64.tiles_per_block(), 16);
  EXPECT_EQ(rule64.column_blocks(), 1);
  EXPECT_EQ(rule64.pieces(), 4);
  std::vector<float> w128(128 * 128 * 9, 0.01F);
  const WinogradConvolution rule128(w128.data(), nullptr, three_by_three(1, 8, 8, 128, 128, 1, 1),
                                    GetParam());
  EXPECT_EQ(rule128.pieces(), 2);
  EXPECT_EQ(rule128.column_blocks(), 2);
  std::vector<float> w256(256 * 256 * 9, 0.01F);
  const WinogradConvolution rule256(w256.data(), nullptr, three_by_three(1, 14, 14, 256, 256, 1, 1),
                                    GetParam());
  EXPECT_EQ(rule256.pieces() % 2, 0);
  for (const ConvolutionGeometry& g :
       {r64, three_by_three(1, 8, 8, 96, 128, 1, 1), three_by_three(2, 15, 13, 40, 72, 1, 1)}) {
    const Case p = make_case(g, rng, true, true, {Activation::kRelu});
    const size_t size = g.out_pixels() * g.out_channels;
    const WinogradConvolution rule(p.weight.data(), p.bias.data(), g, GetParam());
    std::vector<float> want(size);
    rule.run(p.input.data(), want.data(), p.residual.data(), p.epilogue, 0, rule.pieces());
    expect_within_bound(want, p, p.describe());
    for (const WinogradSplit split :
         {WinogradSplit{1 << 20, 1}, WinogradSplit{1 << 20, 2}, WinogradSplit{16, 1},
          WinogradSplit{16, 2}, WinogradSplit{8, 1}, WinogradSplit{8, 3}}) {
      const WinogradConvolution conv(p.weight.data(), p.bias.data(), g, GetParam(), split);
      std::vector<float> whole(size, -7.0F), threaded(size, -7.0F);
      conv.run(p.input.data(), whole.data(), p.residual.data(), p.epilogue, 0, conv.pieces());
      const auto every_other = [&](int64_t parity) {
        for (int64_t i = conv.pieces() - 1 - parity; i >= 0; i -= 2)
          conv.run(p.input.data(), threaded.data(), p.residual.data(), p.epilogue, i, i + 1);
      };
      std::thread other(every_other, 1);
      every_other(0);
      other.join();
      const std::string what = p.describe() + " tiles a block " +
                               std::to_string(split.block_tiles) + ", column splits " +
                               std::to_string(split.column_splits);
      EXPECT_EQ(0, std::memcmp(want.data(), whole.data(), size * sizeof(float))) << what;
      EXPECT_EQ(0, std::memcmp(want.data(), threaded.data(), size * sizeof(float))) << what;
    }
  }
}

// A transformed weight above 1.5x all tiles' V and M: one block of every tile in two column
// blocks (U read once); 28x28 and 96 > 208 on 14x14 keep their blocks. An odd map of one
// block, its two pieces on two threads, matches the reference and one call bit for bit.
TEST_P(WinogradIsaTest, LargeWeightOnFewTilesRunsOneBlock) {
  const auto rule = [&](const ConvolutionGeometry& g) {
    const std::vector<float> w(g.in_channels * g.out_channels * 9, 0.01F);
    return WinogradConvolution(w.data(), nullptr, g, GetParam());
  };
  for (const auto& [c, k] : {std::pair{256, 256}, {128, 256}, {160, 320}}) {
    const WinogradConvolution conv = rule(three_by_three(1, 14, 14, c, k, 1, 1));
    EXPECT_EQ(conv.tiles_per_block(), 49) << c << " > " << k;
    EXPECT_EQ(conv.column_blocks(), 2) << c << " > " << k;
  }
  EXPECT_GT(rule(three_by_three(1, 28, 28, 128, 128, 1, 1)).pieces(), 2);
  EXPECT_EQ(rule(three_by_three(1, 14, 14, 96, 208, 1, 1)).tiles_per_block(), 25);
  EXPECT_GT(rule(three_by_three(8, 14, 14, 256, 256, 1, 1)).pieces(), 2);  // batch 8: blocks
  std::mt19937 rng(17);
  const ConvolutionGeometry g = three_by_three(1, 13, 15, 160, 224, 1, 1);
  const Case p = make_case(g, rng, true, true, {Activation::kSilu});
  const WinogradConvolution conv(p.weight.data(), p.bias.data(), g, GetParam());
  ASSERT_EQ(conv.pieces(), 2);
  ASSERT_EQ(conv.tiles_per_block(), conv.tiles());
  const size_t size = g.out_pixels() * g.out_channels;
  std::vector<float> whole(size), threaded(size, -7.0F);
  conv.run(p.input.data(), whole.data(), p.residual.data(), p.epilogue, 0, 2);
  std::thread other(
      [&] { conv.run(p.input.data(), threaded.data(), p.residual.data(), p.epilogue, 1, 2); });
  conv.run(p.input.data(), threaded.data(), p.residual.data(), p.epilogue, 0, 1);
  other.join();
  EXPECT_EQ(0, std::memcmp(whole.data(), threaded.data(), size * sizeof(float)));
  expect_within_bound(whole, p, p.describe());
}

TEST_P(WinogradIsaTest, NanInInputStaysNan) {
  std::mt19937 rng(3);
  Case p = make_case(three_by_three(1, 6, 5, 20, 33, 1, 1), rng, true, false, {Activation::kRelu});
  p.input[(2 * 5 + 3) * 20 + 4] = std::nanf("");  // pixel (2, 3)
  const std::vector<float> got = p.run(GetParam());
  EXPECT_TRUE(std::isnan(got[(2 * 5 + 3) * 33]));
  EXPECT_FALSE(std::isnan(got[(5 * 5 + 0) * 33]));  // (5, 0): its window misses (2, 3)
}

INSTANTIATE_TEST_SUITE_P(Isas, WinogradIsaTest, every_isa(), isa_test_name);

TEST(WinogradConvolutionTest, RefusesWhatItCannotCompute) {
  const std::vector<float> weight(8 * 8 * 25, 0.5F);
  EXPECT_TRUE(WinogradConvolution::applies(three_by_three(1, 5, 5, 8, 8, 1, 1)));
  ConvolutionGeometry g = three_by_three(1, 5, 5, 8, 8, 1, 1);
  g.stride_w = 2;
  EXPECT_FALSE(WinogradConvolution::applies(g));
  EXPECT_THROW(WinogradConvolution(weight.data(), nullptr, g), std::invalid_argument);
  g = three_by_three(1, 5, 5, 8, 8, 1, 1);
  g.groups = 2;
  EXPECT_THROW(WinogradConvolution(weight.data(), nullptr, g), std::invalid_argument);
  g = three_by_three(1, 5, 5, 8, 8, 1, 1);
  g.kernel_w = 5;
  EXPECT_THROW(WinogradConvolution(weight.data(), nullptr, g), std::invalid_argument);
  g = three_by_three(1, 5, 5, 8, 8, 1, 1);
  g.dilation_h = 2;
  EXPECT_THROW(WinogradConvolution(weight.data(), nullptr, g), std::invalid_argument);
  EXPECT_THROW(WinogradConvolution(weight.data(), nullptr, three_by_three(1, 1, 2, 8, 8, 0, 0)),
               std::invalid_argument);  // no output
}

}  // namespace
}  // namespace nimble::kernels::nhwc

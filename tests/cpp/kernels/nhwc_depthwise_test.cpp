// nimble's NHWC depthwise convolution (csrc/kernels/cpu/channels_last/depthwise_convolution.h)
// gives a naive loop's results on random geometries, every epilogue and every Isa this CPU runs
// (channel counts off the vector width, border pixels, strides, dilation, padding wider
// than the image); rows computed in any split, on any threads, agree with one call.
// Torch-free: the reference is written here.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "csrc/kernels/cpu/channels_last/depthwise_convolution.h"
#include "tests/cpp/kernels/nhwc_reference.h"

namespace nimble::kernels::nhwc {
namespace {

// The definition, in double: padding reads zeros.
std::vector<float> reference(const ConvolutionGeometry& g, const std::vector<float>& in,
                             const std::vector<float>& w, const float* bias, const float* residual,
                             const Epilogue& e) {
  const int64_t c_count = g.in_channels, oh = g.out_height(), ow = g.out_width();
  std::vector<float> out(g.images * oh * ow * c_count);
  for (int64_t n = 0; n < g.images; ++n)
    for (int64_t oy = 0; oy < oh; ++oy)
      for (int64_t ox = 0; ox < ow; ++ox)
        for (int64_t c = 0; c < c_count; ++c) {
          double sum = bias ? bias[c] : 0.0;
          for (int64_t ky = 0; ky < g.kernel_h; ++ky)
            for (int64_t kx = 0; kx < g.kernel_w; ++kx) {
              const int64_t iy = oy * g.stride_h - g.pad_h + ky * g.dilation_h;
              const int64_t ix = ox * g.stride_w - g.pad_w + kx * g.dilation_w;
              if (iy < 0 || iy >= g.height || ix < 0 || ix >= g.width) continue;
              sum += static_cast<double>(in[((n * g.height + iy) * g.width + ix) * c_count + c]) *
                     w[(c * g.kernel_h + ky) * g.kernel_w + kx];
            }
          const int64_t o = ((n * oh + oy) * ow + ox) * c_count + c;
          if (residual) sum += residual[o];
          out[o] = static_cast<float>(reference_activation(sum, e));
        }
  return out;
}

struct Problem {
  ConvolutionGeometry g;
  std::vector<float> input, weight, bias, residual;
  bool has_bias = true, has_residual = false;
  Epilogue epilogue;

  const float* bias_ptr() const { return has_bias ? bias.data() : nullptr; }
  const float* residual_ptr() const { return has_residual ? residual.data() : nullptr; }
  int64_t rows() const { return g.images * g.out_height(); }
  std::string describe() const {
    char s[256];
    std::snprintf(s, sizeof(s),
                  "C=%ld images=%ld H=%ld W=%ld k=%ldx%ld stride=%ld,%ld pad=%ld,%ld "
                  "dilation=%ld,%ld bias=%d residual=%d activation=%d lo=%g hi=%g",
                  long(g.in_channels), long(g.images), long(g.height), long(g.width),
                  long(g.kernel_h), long(g.kernel_w), long(g.stride_h), long(g.stride_w),
                  long(g.pad_h), long(g.pad_w), long(g.dilation_h), long(g.dilation_w),
                  int(has_bias), int(has_residual), int(epilogue.activation), epilogue.lo,
                  epilogue.hi);
    return s;
  }
};

std::vector<float> random_floats(std::mt19937& rng, int64_t n) {
  std::uniform_real_distribution<float> u(-1.0F, 1.0F);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

void fill(Problem& p, std::mt19937& rng) {
  const ConvolutionGeometry& g = p.g;
  p.input = random_floats(rng, g.images * g.height * g.width * g.in_channels);
  p.weight = random_floats(rng, g.in_channels * g.kernel_h * g.kernel_w);
  p.bias = random_floats(rng, g.in_channels);
  p.residual = random_floats(rng, g.out_pixels() * g.in_channels);
}

Problem random_problem(std::mt19937& rng) {
  const auto pick = [&rng](int lo, int hi) { return std::uniform_int_distribution<>(lo, hi)(rng); };
  Problem p;
  ConvolutionGeometry& g = p.g;
  do {
    g.in_channels = g.out_channels = g.groups = pick(1, 70);
    g.images = pick(1, 2);
    g.height = pick(1, 20);
    g.width = pick(1, 20);
    g.kernel_h = pick(1, 7);
    g.kernel_w = pick(0, 2) == 0 ? pick(1, 7) : g.kernel_h;
    g.stride_h = pick(1, 3);
    g.stride_w = pick(0, 2) == 0 ? pick(1, 3) : g.stride_h;
    g.pad_h = pick(0, 3);
    g.pad_w = pick(0, 3);
    g.dilation_h = pick(1, 2);
    g.dilation_w = pick(1, 2);
  } while (g.out_height() < 1 || g.out_width() < 1);
  p.has_bias = pick(0, 1) == 1;
  p.has_residual = pick(0, 1) == 1;
  p.epilogue.activation = static_cast<Activation>(pick(0, int(Activation::kGeluTanh)));
  p.epilogue.lo = p.epilogue.activation == Activation::kClamp ? -0.5F : 0.1F;
  p.epilogue.hi = 0.75F;
  fill(p, rng);
  return p;
}

std::vector<float> run(const Problem& p, Isa isa, int64_t begin, int64_t end,
                       const DepthwiseBlocking& blocking = {}) {
  const DepthwiseWeights weights(p.weight.data(), p.bias_ptr(), p.g, isa);
  std::vector<float> out(p.g.out_pixels() * p.g.in_channels, -7.0F);
  depthwise_rows(p.g, weights, p.input.data(), out.data(), p.residual_ptr(), p.epilogue, begin, end,
                 blocking);
  return out;
}

void expect_close(const std::vector<float>& got, const std::vector<float>& want,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  int reported = 0;
  for (size_t i = 0; i < got.size() && reported < 5; ++i) {
    if (!(std::fabs(got[i] - want[i]) <= 1e-5F + 1e-5F * std::fabs(want[i]))) {
      ADD_FAILURE() << what << ": at " << i << " got " << got[i] << ", want " << want[i];
      ++reported;
    }
  }
}

TEST(NhwcDepthwise, MatchesNaiveLoopOnRandomGeometriesAndEpiloguesForEveryIsa) {
  std::mt19937 rng(20240611);
  for (int trial = 0; trial < 400; ++trial) {
    const Problem p = random_problem(rng);
    const std::vector<float> want =
        reference(p.g, p.input, p.weight, p.bias_ptr(), p.residual_ptr(), p.epilogue);
    for (const Isa isa : runnable_isas()) {
      expect_close(run(p, isa, 0, p.rows()), want, std::string(isa_name(isa)) + " " + p.describe());
    }
  }
}

// Each value of each blocking parameter (kernel_parameters.h), alone and mixed at random, on
// random geometries (long rows too, where windows would run) and epilogues, every Isa.
TEST(NhwcDepthwise, EveryBlockingMatchesNaiveLoop) {
  std::mt19937 rng(45);
  std::vector<DepthwiseBlocking> blockings;
  for (const int64_t v : {1, 2, 3, 4, 7}) blockings.push_back({v, 0, true, 0});
  for (const int64_t v : {1, 2, 3, 4, 5, 6, 7, 8, 11, 12, 40}) blockings.push_back({0, v, true, 0});
  blockings.push_back({0, 0, false, 0});
  const auto pick = [&](int hi) { return std::uniform_int_distribution<int>(0, hi)(rng); };
  for (int trial = 0; trial < 80; ++trial) {
    Problem p = random_problem(rng);
    if (trial % 2 == 0) {  // long rows of a windowed kernel
      p.g.kernel_w = 3 + 2 * pick(2);
      p.g.width = 30 + pick(40);
      p.g.stride_w = 1 + pick(1);
      p.g.dilation_w = 1;
      fill(p, rng);
    }
    const std::vector<float> want =
        reference(p.g, p.input, p.weight, p.bias_ptr(), p.residual_ptr(), p.epilogue);
    blockings.push_back({pick(4), pick(12), pick(1) == 0, 0});
    for (const Isa isa : runnable_isas()) {
      for (const DepthwiseBlocking& b : blockings) {
        expect_close(run(p, isa, 0, p.rows(), b), want,
                     std::string(isa_name(isa)) + " " + p.describe() + " vectors " +
                         std::to_string(b.channel_vectors) + " pixels " + std::to_string(b.pixels) +
                         " windows " + std::to_string(b.windows));
      }
    }
    blockings.pop_back();
  }
  const Problem p = random_problem(rng);
  EXPECT_THROW(run(p, runnable_isas().back(), 0, p.rows(), {-1, 0, true, 0}),
               std::invalid_argument);
}

// Long rows, where the interior runs whole register windows (3, 5 or 7 tap columns one pixel
// apart, stride 1 or 2) and the pixels left over run the general blocks.
TEST(NhwcDepthwise, MatchesNaiveLoopOnLongRowsOfEveryWindowedKernel) {
  std::mt19937 rng(99);
  for (int trial = 0; trial < 120; ++trial) {
    const auto pick = [&rng](int lo, int hi) {
      return std::uniform_int_distribution<>(lo, hi)(rng);
    };
    Problem p = random_problem(rng);
    ConvolutionGeometry& g = p.g;
    g.height = pick(1, 4);
    g.width = pick(20, 80);
    g.kernel_w = 3 + 2 * pick(0, 2);
    g.pad_h = pick(0, 1);
    g.dilation_h = 1;
    g.kernel_h = pick(1, std::min<int>(3, g.height + 2 * g.pad_h));
    g.stride_w = pick(1, 2);
    g.dilation_w = 1;
    g.pad_w = pick(0, 1) * (g.kernel_w / 2);
    fill(p, rng);
    const std::vector<float> want =
        reference(g, p.input, p.weight, p.bias_ptr(), p.residual_ptr(), p.epilogue);
    for (const Isa isa : runnable_isas()) {
      expect_close(run(p, isa, 0, p.rows()), want, std::string(isa_name(isa)) + " " + p.describe());
    }
  }
}

// The layers that matter: MobileNetV2 / EfficientNet-B0 / MnasNet depthwise shapes, with
// relu6 (and a residual at stride 1), all channel counts multiples of 16: the unmasked
// blocks and windows.
TEST(NhwcDepthwise, MatchesNaiveLoopOnMobileNetShapes) {
  const int shapes[][4] = {{32, 32, 3, 1},  {96, 32, 3, 2},  {144, 16, 3, 1}, {144, 16, 3, 2},
                           {192, 8, 3, 1},  {384, 4, 3, 1},  {576, 4, 3, 2},  {960, 2, 3, 1},
                           {240, 28, 5, 2}, {672, 14, 5, 1}, {64, 9, 7, 1},   {48, 23, 3, 1}};
  std::mt19937 rng(7);
  for (const auto& s : shapes) {
    Problem p;
    p.g.in_channels = p.g.out_channels = p.g.groups = s[0];
    p.g.height = p.g.width = s[1];
    p.g.kernel_h = p.g.kernel_w = s[2];
    p.g.stride_h = p.g.stride_w = s[3];
    p.g.pad_h = p.g.pad_w = s[2] / 2;
    p.epilogue = {Activation::kClamp, 0.0F, 6.0F};
    p.has_residual = s[3] == 1;
    fill(p, rng);
    const std::vector<float> want =
        reference(p.g, p.input, p.weight, p.bias_ptr(), p.residual_ptr(), p.epilogue);
    for (const Isa isa : runnable_isas())
      expect_close(run(p, isa, 0, p.rows()), want, std::string(isa_name(isa)) + " " + p.describe());
  }
}

TEST(NhwcDepthwise, RowRangesSplitAnyWayOrOnTwoThreadsGiveOneCallsResult) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 30; ++trial) {
    Problem p = random_problem(rng);
    p.g.images = 2;
    fill(p, rng);
    const int64_t rows = p.rows();
    for (const Isa isa : runnable_isas()) {
      const std::vector<float> whole = run(p, isa, 0, rows);
      const DepthwiseWeights weights(p.weight.data(), p.bias_ptr(), p.g, isa);
      std::vector<float> by_row(whole.size(), -7.0F), halves(whole.size(), -7.0F);
      for (int64_t row = rows - 1; row >= 0; --row) {
        depthwise_rows(p.g, weights, p.input.data(), by_row.data(), p.residual_ptr(), p.epilogue,
                       row, row + 1);
      }
      const int64_t middle = rows / 2;
      std::thread first([&] {
        depthwise_rows(p.g, weights, p.input.data(), halves.data(), p.residual_ptr(), p.epilogue, 0,
                       middle);
      });
      std::thread second([&] {
        depthwise_rows(p.g, weights, p.input.data(), halves.data(), p.residual_ptr(), p.epilogue,
                       middle, rows);
      });
      first.join();
      second.join();
      EXPECT_EQ(by_row, whole) << isa_name(isa) << " " << p.describe();
      EXPECT_EQ(halves, whole) << isa_name(isa) << " " << p.describe();
    }
  }
}

TEST(NhwcDepthwise, WritesOnlyTheRowsAskedFor) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 30; ++trial) {
    const Problem p = random_problem(rng);
    const int64_t rows = p.rows(), row_floats = p.g.out_width() * p.g.in_channels;
    const int64_t begin = rows / 3, end = std::max(begin, 2 * rows / 3);
    for (const Isa isa : runnable_isas()) {
      const std::vector<float> out = run(p, isa, begin, end);
      for (int64_t i = 0; i < rows * row_floats; ++i) {
        const int64_t row = i / row_floats;
        if (row < begin || row >= end) {
          ASSERT_EQ(out[i], -7.0F) << isa_name(isa) << " at " << i;
        }
      }
    }
  }
}

TEST(NhwcDepthwise, NanInputStaysNanThroughReluAndClamp) {
  for (const Activation activation : {Activation::kRelu, Activation::kClamp}) {
    Problem p;
    p.g.in_channels = p.g.out_channels = p.g.groups = 37;  // full vectors and a masked tail
    p.g.height = p.g.width = 6;
    p.g.kernel_h = p.g.kernel_w = 3;
    p.g.pad_h = p.g.pad_w = 1;
    p.epilogue = {activation, 0.0F, 6.0F};
    std::mt19937 rng(3);
    fill(p, rng);
    for (float& x : p.input) x = std::numeric_limits<float>::quiet_NaN();
    for (const Isa isa : runnable_isas()) {
      for (const float y : run(p, isa, 0, p.rows())) ASSERT_TRUE(std::isnan(y)) << isa_name(isa);
    }
  }
}

TEST(NhwcDepthwise, BytesCoverThePackedWeightAndBiasAndLittleMore) {
  ConvolutionGeometry g;
  g.in_channels = g.out_channels = g.groups = 70;
  g.height = g.width = 8;
  g.kernel_h = 5;
  g.kernel_w = 3;
  const std::vector<float> weight(70 * 15, 1.0F);
  for (const Isa isa : runnable_isas()) {
    const DepthwiseWeights w(weight.data(), nullptr, g, isa);
    EXPECT_EQ(w.isa(), isa);
    EXPECT_GE(w.bytes(), int64_t{70 * 16 * 4});
    EXPECT_LE(w.bytes(), int64_t{(70 + 16) * 16 * 4});
  }
}

TEST(NhwcDepthwise, RejectsAGeometryThatIsNotDepthwise) {
  ConvolutionGeometry g;
  g.in_channels = g.out_channels = 8;
  g.groups = 4;
  g.kernel_h = g.kernel_w = 3;
  const std::vector<float> weight(8 * 9, 1.0F);
  EXPECT_THROW(DepthwiseWeights(weight.data(), nullptr, g), std::invalid_argument);
}

}  // namespace
}  // namespace nimble::kernels::nhwc

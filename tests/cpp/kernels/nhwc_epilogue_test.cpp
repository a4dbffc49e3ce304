// The epilogue of nimble's channels-last kernels (csrc/kernels/cpu/nhwc/epilogue.h): every
// activation against the C library's functions within float32 rounding, the residual added
// first, NaN kept, and the ISA queries consistent.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <vector>

#include "csrc/kernels/cpu/nhwc/epilogue.h"

namespace nimble::kernels::nhwc {
namespace {

struct Case {
  Activation activation;
  float lo, hi;
  std::function<double(double)> reference;
};

std::vector<Case> cases() {
  const auto sigmoid = [](double v) { return 1.0 / (1.0 + std::exp(-v)); };
  return {
      {Activation::kNone, 0, 0, [](double v) { return v; }},
      {Activation::kRelu, 0, 0, [](double v) { return v < 0 ? 0.0 : v; }},
      {Activation::kClamp, -0.5F, 0.25F,
       [](double v) { return std::min(std::max(v, -0.5), 0.25); }},
      {Activation::kLeakyRelu, 0.05F, 0, [](double v) { return v < 0 ? 0.05 * v : v; }},
      {Activation::kHardswish, 0, 0,
       [](double v) { return v * std::min(std::max(v + 3.0, 0.0), 6.0) / 6.0; }},
      {Activation::kHardsigmoid, 0, 0,
       [](double v) { return std::min(std::max(v + 3.0, 0.0), 6.0) / 6.0; }},
      {Activation::kSilu, 0, 0, [sigmoid](double v) { return v * sigmoid(v); }},
      {Activation::kSigmoid, 0, 0, sigmoid},
      {Activation::kTanh, 0, 0, [](double v) { return std::tanh(v); }},
      {Activation::kGeluErf, 0, 0,
       [](double v) { return 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0))); }},
      {Activation::kGeluTanh, 0, 0,
       [](double v) {
         return 0.5 * v * (1.0 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
       }},
  };
}

std::vector<float> inputs() {
  std::vector<float> xs;
  for (float x = -95.0F; x <= 95.0F; x += 0.0173F) xs.push_back(x);
  for (float x = -1e-3F; x <= 1e-3F; x += 1.7e-5F) xs.push_back(x);
  return xs;
}

TEST(NhwcEpilogue, EveryActivationMatchesItsDefinitionWithinFloatRounding) {
  const std::vector<float> xs = inputs();
  for (const Case& c : cases()) {
    std::vector<float> y = xs;
    finish(y.data(), nullptr, static_cast<int64_t>(y.size()), {c.activation, c.lo, c.hi});
    for (size_t i = 0; i < xs.size(); ++i) {
      const double want = c.reference(xs[i]);
      // torch.testing.assert_close's float32 tolerances.
      ASSERT_NEAR(y[i], want, 1e-5 + 1.3e-6 * std::fabs(want))
          << "activation " << static_cast<int>(c.activation) << " at x = " << xs[i];
    }
  }
}

TEST(NhwcEpilogue, TheResidualIsAddedBeforeTheActivation) {
  std::vector<float> y = {1.0F, -2.0F, 0.5F}, residual = {-3.0F, 5.0F, 0.25F};
  finish(y.data(), residual.data(), 3, {Activation::kRelu, 0, 0});
  EXPECT_EQ(y, (std::vector<float>{0.0F, 3.0F, 0.75F}));
}

TEST(NhwcEpilogue, NaNStaysNaNAndInfinitiesSaturate) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  for (const Case& c : cases()) {
    std::vector<float> y(37, nan);  // longer than one vector, with a tail
    finish(y.data(), nullptr, static_cast<int64_t>(y.size()), {c.activation, c.lo, c.hi});
    for (float v : y) EXPECT_TRUE(std::isnan(v)) << "activation " << static_cast<int>(c.activation);
  }
  std::vector<float> y = {inf, -inf};
  finish(y.data(), nullptr, 2, {Activation::kSigmoid, 0, 0});
  EXPECT_EQ(y, (std::vector<float>{1.0F, 0.0F}));
  y = {inf, -inf};
  finish(y.data(), nullptr, 2, {Activation::kTanh, 0, 0});
  EXPECT_EQ(y, (std::vector<float>{1.0F, -1.0F}));
}

TEST(NhwcEpilogue, TheBestIsaIsOneThisCpuSupports) {
  EXPECT_TRUE(supports(best_isa()));
  EXPECT_TRUE(supports(Isa::kPortable));
  if (supports(Isa::kAvx512) && !isa_capped()) {
    EXPECT_EQ(best_isa(), Isa::kAvx512);
  }
  EXPECT_STREQ(isa_name(Isa::kAvx2), "avx2");
}

}  // namespace
}  // namespace nimble::kernels::nhwc

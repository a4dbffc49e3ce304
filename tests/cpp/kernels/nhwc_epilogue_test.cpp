// The epilogue of nimble's channels-last kernels (csrc/kernels/cpu/nhwc/epilogue.h): every
// activation against the C library's functions within float32 rounding, the residual added
// first, NaN kept, and the ISA queries consistent.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "csrc/kernels/cpu/nhwc/epilogue.h"
#include "tests/cpp/kernels/nhwc_reference.h"

namespace nimble::kernels::nhwc {
namespace {

// Every activation, with bounds and a slope where it takes them.
std::vector<Epilogue> cases() {
  std::vector<Epilogue> out;
  for (int a = 0; a <= static_cast<int>(Activation::kGeluTanh); ++a)
    out.push_back({static_cast<Activation>(a), 0, 0});
  out[static_cast<int>(Activation::kClamp)] = {Activation::kClamp, -0.5F, 0.25F};
  out[static_cast<int>(Activation::kLeakyRelu)] = {Activation::kLeakyRelu, 0.05F, 0};
  return out;
}

std::vector<float> inputs() {
  std::vector<float> xs;
  for (float x = -95.0F; x <= 95.0F; x += 0.0173F) xs.push_back(x);
  for (float x = -1e-3F; x <= 1e-3F; x += 1.7e-5F) xs.push_back(x);
  return xs;
}

TEST(NhwcEpilogue, EveryActivationMatchesItsDefinitionWithinFloatRounding) {
  const std::vector<float> xs = inputs();
  for (const Epilogue& c : cases()) {
    std::vector<float> y = xs;
    finish(y.data(), nullptr, static_cast<int64_t>(y.size()), c);
    for (size_t i = 0; i < xs.size(); ++i) {
      const double want = reference_activation(xs[i], c);
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
  for (const Epilogue& c : cases()) {
    std::vector<float> y(37, nan);  // longer than one vector, with a tail
    finish(y.data(), nullptr, static_cast<int64_t>(y.size()), c);
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

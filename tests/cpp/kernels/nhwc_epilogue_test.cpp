// The epilogue of nimble's channels-last kernels (csrc/kernels/cpu/channels_last/epilogue.h), the
// code of every Isa this CPU runs: every activation against the C library's functions within
// float32 rounding, the residual added first, NaN kept; and the ISA queries against the CPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <vector>

#include "csrc/kernels/cpu/channels_last/epilogue.h"
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

class NhwcEpilogueIsa : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override {
    if (!supports(GetParam())) GTEST_SKIP() << isa_name(GetParam()) << " not on this CPU";
  }
};

TEST_P(NhwcEpilogueIsa, EveryActivationMatchesItsDefinitionWithinFloatRounding) {
  const std::vector<float> xs = inputs();
  for (const Epilogue& c : cases()) {
    std::vector<float> y = xs;
    finish(GetParam(), y.data(), nullptr, static_cast<int64_t>(y.size()), c);
    for (size_t i = 0; i < xs.size(); ++i) {
      const double want = reference_activation(xs[i], c);
      // torch.testing.assert_close's float32 tolerances.
      ASSERT_NEAR(y[i], want, 1e-5 + 1.3e-6 * std::fabs(want))
          << "activation " << static_cast<int>(c.activation) << " at x = " << xs[i];
    }
  }
}

TEST_P(NhwcEpilogueIsa, TheResidualIsAddedBeforeTheActivation) {
  std::vector<float> y = {1.0F, -2.0F, 0.5F}, residual = {-3.0F, 5.0F, 0.25F};
  finish(GetParam(), y.data(), residual.data(), 3, {Activation::kRelu, 0, 0});
  EXPECT_EQ(y, (std::vector<float>{0.0F, 3.0F, 0.75F}));
}

TEST_P(NhwcEpilogueIsa, NaNStaysNaNAndInfinitiesSaturate) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  for (const Epilogue& c : cases()) {
    std::vector<float> y(37, nan);  // longer than one vector, with a tail
    finish(GetParam(), y.data(), nullptr, static_cast<int64_t>(y.size()), c);
    for (float v : y) EXPECT_TRUE(std::isnan(v)) << "activation " << static_cast<int>(c.activation);
  }
  std::vector<float> y = {inf, -inf};
  finish(GetParam(), y.data(), nullptr, 2, {Activation::kSigmoid, 0, 0});
  EXPECT_EQ(y, (std::vector<float>{1.0F, 0.0F}));
  y = {inf, -inf};
  finish(GetParam(), y.data(), nullptr, 2, {Activation::kTanh, 0, 0});
  EXPECT_EQ(y, (std::vector<float>{1.0F, -1.0F}));
}

INSTANTIATE_TEST_SUITE_P(Isas, NhwcEpilogueIsa,
                         ::testing::Values(Isa::kPortable, Isa::kAvx2, Isa::kAvx512),
                         [](const ::testing::TestParamInfo<Isa>& info) {
                           return std::string(isa_name(info.param));
                         });

// What best_isa() should be, worked out here from the CPU and the environment, not by the
// code under test.
Isa cpu_best() {
  if (__builtin_cpu_supports("avx512f")) return Isa::kAvx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return Isa::kAvx2;
  return Isa::kPortable;
}

TEST(NhwcEpilogue, TheBestIsaIsTheCpusCappedByTheEnvironment) {
  const char* cap = std::getenv("NIMBLE_CPU_ISA");
  Isa want = cpu_best();
  if (cap != nullptr && std::strcmp(cap, "avx2") == 0 && want == Isa::kAvx512) want = Isa::kAvx2;
  if (cap != nullptr && std::strcmp(cap, "portable") == 0) want = Isa::kPortable;
  EXPECT_EQ(best_isa(), want);
  EXPECT_EQ(isa_capped(), want != cpu_best());
  EXPECT_TRUE(supports(Isa::kPortable));
  EXPECT_EQ(supports(Isa::kAvx512), cpu_best() == Isa::kAvx512);
  EXPECT_EQ(supports(Isa::kAvx2), cpu_best() != Isa::kPortable);
  EXPECT_STREQ(isa_name(Isa::kAvx2), "avx2");
  EXPECT_STREQ(isa_name(Isa::kAvx512), "avx512");
  EXPECT_STREQ(isa_name(Isa::kPortable), "portable");
}

// The names an activation has at a string boundary (an op schema, Python, oneDNN's post-op):
// each parses back to its activation, gelu to the exact one; other names to none.
TEST(Epilogue, EveryActivationsNameParsesBackToIt) {
  for (int a = 0; a <= static_cast<int>(Activation::kGeluTanh); ++a) {
    const auto activation = static_cast<Activation>(a);
    const std::optional<Activation> parsed = activation_of_name(activation_name(activation));
    ASSERT_TRUE(parsed.has_value()) << activation_name(activation);
    EXPECT_EQ(*parsed, activation == Activation::kGeluTanh ? Activation::kGeluErf : activation);
  }
  EXPECT_STREQ(activation_name(Activation::kSilu), "swish");
  EXPECT_STREQ(activation_name(Activation::kClamp), "hardtanh");
  EXPECT_FALSE(activation_of_name("silu").has_value());
  EXPECT_FALSE(activation_of_name("").has_value());
  // ATen's op names, as a recorded op has them (without the in-place `_`).
  EXPECT_EQ(activation_of_aten_name("silu"), Activation::kSilu);
  EXPECT_EQ(activation_of_aten_name("hardtanh"), Activation::kClamp);
  EXPECT_EQ(activation_of_aten_name("gelu"), Activation::kGeluErf);
  EXPECT_EQ(activation_of_aten_name("hardswish"), Activation::kHardswish);
  EXPECT_FALSE(activation_of_aten_name("swish").has_value());
  EXPECT_FALSE(activation_of_aten_name("none").has_value());
  EXPECT_FALSE(activation_of_aten_name("").has_value());
  EXPECT_FALSE(activation_of_aten_name("elu").has_value());
  Epilogue e;
  EXPECT_EQ(describe(e), "none");
  e.residual = true;
  EXPECT_EQ(describe(e), "add");
  e.activation = Activation::kGeluTanh;
  EXPECT_EQ(describe(e), "add+gelu");
  e.residual = false;
  EXPECT_EQ(describe(e), "gelu");
}

}  // namespace
}  // namespace nimble::kernels::nhwc

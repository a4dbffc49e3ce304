#pragma once
// What the suites of nimble's channels-last kernels (nhwc_*_test.cpp) check against: each
// activation of an Epilogue in double precision, NaN kept (every comparison below is false
// for NaN, which then passes through, as in eager PyTorch).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "csrc/kernels/cpu/channels_last/epilogue.h"

namespace nimble::kernels::nhwc {

inline double reference_activation(double v, const Epilogue& e) {
  const auto hard = [](double x) { return (x < 0 ? 0 : (x > 6 ? 6 : x)) / 6; };
  switch (e.activation) {
    case Activation::kNone:
      return v;
    case Activation::kRelu:
      return v < 0 ? 0 : v;
    case Activation::kClamp:
      return v < e.lo ? e.lo : (v > e.hi ? e.hi : v);
    case Activation::kLeakyRelu:
      return v < 0 ? v * e.lo : v;
    case Activation::kHardswish:
      return v * hard(v + 3);
    case Activation::kHardsigmoid:
      return hard(v + 3);
    case Activation::kSilu:
      return v / (1 + std::exp(-v));
    case Activation::kSigmoid:
      return 1 / (1 + std::exp(-v));
    case Activation::kTanh:
      return std::tanh(v);
    case Activation::kGeluErf:
      return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0)));
    case Activation::kGeluTanh:
      return 0.5 * v * (1 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
  }
  return v;
}

// Uniform in [-1, 1).
inline std::vector<float> random_floats(int64_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1.0F, 1.0F);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

// Any activation, with random bounds for clamp and a random slope for leaky_relu.
inline Epilogue random_epilogue(std::mt19937& rng) {
  Epilogue e;
  e.activation = static_cast<Activation>(
      std::uniform_int_distribution<int64_t>(0, static_cast<int64_t>(Activation::kGeluTanh))(rng));
  if (e.activation == Activation::kClamp) {
    e.lo = -std::uniform_real_distribution<float>(0.0F, 0.5F)(rng);
    e.hi = std::uniform_real_distribution<float>(0.1F, 1.0F)(rng);
  } else if (e.activation == Activation::kLeakyRelu) {
    e.lo = std::uniform_real_distribution<float>(0.01F, 0.3F)(rng);
  }
  return e;
}

// Every Isa this CPU runs, whatever NIMBLE_CPU_ISA says: each is tested by name.
inline std::vector<Isa> runnable_isas() {
  std::vector<Isa> isas;
  for (const Isa isa : {Isa::kPortable, Isa::kAvx2, Isa::kAvx512}) {
    if (supports(isa)) isas.push_back(isa);
  }
  return isas;
}

// A suite run once per Isa (every_isa(), named by isa_test_name), skipped where this CPU
// lacks it.
class IsaTest : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override {
    if (!supports(GetParam())) GTEST_SKIP() << isa_name(GetParam()) << " not on this CPU";
  }
};
inline auto every_isa() { return ::testing::Values(Isa::kPortable, Isa::kAvx2, Isa::kAvx512); }
inline std::string isa_test_name(const ::testing::TestParamInfo<Isa>& info) {
  return isa_name(info.param);
}

}  // namespace nimble::kernels::nhwc

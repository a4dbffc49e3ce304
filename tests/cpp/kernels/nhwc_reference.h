#pragma once
// What the suites of nimble's channels-last kernels (nhwc_*_test.cpp) check against: each
// activation of an Epilogue in double precision, NaN kept (every comparison below is false
// for NaN, which then passes through, as in eager PyTorch).
#include <cmath>
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

// Every Isa this CPU runs, whatever NIMBLE_CPU_ISA says: each is tested by name.
inline std::vector<Isa> runnable_isas() {
  std::vector<Isa> isas;
  for (const Isa isa : {Isa::kPortable, Isa::kAvx2, Isa::kAvx512}) {
    if (supports(isa)) isas.push_back(isa);
  }
  return isas;
}

}  // namespace nimble::kernels::nhwc

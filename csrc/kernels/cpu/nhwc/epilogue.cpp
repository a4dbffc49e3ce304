#include "csrc/kernels/cpu/nhwc/epilogue.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

namespace nimble::kernels::nhwc {
namespace {

// exp(x) for float, branch-free so that the loops below vectorize: x = n ln2 + r with
// |r| <= ln2 / 2, e^r by a degree-6 polynomial (relative error under 2e-7 there), 2^n built
// in the exponent bits. Below -87.3 it gives 0, above 88.7 infinity, as expf does; NaN stays
// NaN (the select at the end).
inline float exp_approx(float x) {
  const float clamped = x < -87.3F ? -87.3F : (x > 88.7F ? 88.7F : x);
  const float n = std::nearbyint(clamped * 1.44269504088896341F);
  const float r = clamped - n * 0.693359375F + n * 2.12194440e-4F;
  float p = 1.3981999507E-3F;
  p = p * r + 8.3334519073E-3F;
  p = p * r + 4.1665795894E-2F;
  p = p * r + 1.6666665459E-1F;
  p = p * r + 5.0000001201E-1F;
  p = p * r * r + r + 1.0F;
  int32_t bits;
  std::memcpy(&bits, &p, sizeof(bits));
  bits += static_cast<int32_t>(static_cast<uint32_t>(static_cast<int32_t>(n)) << 23);
  float result;
  std::memcpy(&result, &bits, sizeof(result));
  result = x > 88.7F ? INFINITY : (x < -87.3F ? 0.0F : result);
  return x != x ? x : result;
}

inline float sigmoid(float x) { return 1.0F / (1.0F + exp_approx(-x)); }

// tanh through exp(2|x|), odd by construction: near 0 the difference of two close numbers
// loses relative precision but stays within 1e-7 absolute.
inline float tanh_approx(float x) {
  const float a = x < 0.0F ? -x : x;
  const float t = 1.0F - 2.0F / (exp_approx(2.0F * a) + 1.0F);
  const float r = x < 0.0F ? -t : t;
  return x != x ? x : r;
}

// erf by Abramowitz and Stegun 7.1.26 (absolute error under 1.5e-7).
inline float erf_approx(float x) {
  const float a = x < 0.0F ? -x : x;
  const float t = 1.0F / (1.0F + 0.3275911F * a);
  const float poly =
      t * (0.254829592F +
           t * (-0.284496736F + t * (1.421413741F + t * (-1.453152027F + t * 1.061405429F))));
  const float e = 1.0F - poly * exp_approx(-a * a);
  const float r = x < 0.0F ? -e : e;
  return x != x ? x : r;
}

// One loop per activation: each body is plain float code with selects, which GCC turns into
// vector code for the clone the CPU runs.
template <typename F>
inline void apply(float* __restrict y, const float* __restrict residual, int64_t n, F f) {
  if (residual) {
    for (int64_t i = 0; i < n; ++i) y[i] = f(y[i] + residual[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) y[i] = f(y[i]);
  }
}

}  // namespace

__attribute__((target_clones("avx512f", "arch=haswell", "default"))) void finish(
    float* y, const float* residual, int64_t n, const Epilogue& epilogue) {
  const float lo = epilogue.lo, hi = epilogue.hi;
  // The comparisons are written so that a NaN input fails them and passes through.
  switch (epilogue.activation) {
    case Activation::kNone:
      if (residual) apply(y, residual, n, [](float v) { return v; });
      return;
    case Activation::kRelu:
      return apply(y, residual, n, [](float v) { return v < 0.0F ? 0.0F : v; });
    case Activation::kClamp:
      return apply(y, residual, n, [lo, hi](float v) { return v < lo ? lo : (v > hi ? hi : v); });
    case Activation::kLeakyRelu:
      return apply(y, residual, n, [lo](float v) { return v < 0.0F ? v * lo : v; });
    case Activation::kHardswish:
      return apply(y, residual, n, [](float v) {
        const float g = v + 3.0F;
        const float c = g < 0.0F ? 0.0F : (g > 6.0F ? 6.0F : g);
        return v * c * (1.0F / 6.0F);
      });
    case Activation::kHardsigmoid:
      return apply(y, residual, n, [](float v) {
        const float g = v + 3.0F;
        const float c = g < 0.0F ? 0.0F : (g > 6.0F ? 6.0F : g);
        return v != v ? v : c * (1.0F / 6.0F);
      });
    case Activation::kSilu:
      return apply(y, residual, n, [](float v) { return v * sigmoid(v); });
    case Activation::kSigmoid:
      return apply(y, residual, n, [](float v) { return sigmoid(v); });
    case Activation::kTanh:
      return apply(y, residual, n, [](float v) { return tanh_approx(v); });
    case Activation::kGeluErf:
      return apply(y, residual, n, [](float v) {
        return 0.5F * v * (1.0F + erf_approx(v * 0.70710678118654752F));
      });
    case Activation::kGeluTanh:
      return apply(y, residual, n, [](float v) {
        const float inner = 0.79788456080286536F * (v + 0.044715F * v * v * v);
        return 0.5F * v * (1.0F + tanh_approx(inner));
      });
  }
}

bool supports(Isa isa) {
  switch (isa) {
    case Isa::kPortable:
      return true;
    case Isa::kAvx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case Isa::kAvx512:
      return __builtin_cpu_supports("avx512f");
  }
  return false;
}

namespace {

Isa supported_isa() {
  return supports(Isa::kAvx512) ? Isa::kAvx512 : supports(Isa::kAvx2) ? Isa::kAvx2 : Isa::kPortable;
}

Isa read_best_isa() {
  const Isa best = supported_isa();
  const char* cap = std::getenv("NIMBLE_CPU_ISA");
  if (cap == nullptr || *cap == '\0') return best;
  for (Isa isa : {Isa::kPortable, Isa::kAvx2, Isa::kAvx512}) {
    if (std::strcmp(cap, isa_name(isa)) == 0) return isa < best ? isa : best;
  }
  throw std::invalid_argument(
      std::string("NIMBLE_CPU_ISA: expected avx512, avx2 or portable, got '") + cap + "'");
}

}  // namespace

Isa best_isa() {
  static const Isa best = read_best_isa();
  return best;
}

bool isa_capped() { return best_isa() != supported_isa(); }

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::kPortable:
      return "portable";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kAvx512:
      return "avx512";
  }
  return "?";
}

}  // namespace nimble::kernels::nhwc

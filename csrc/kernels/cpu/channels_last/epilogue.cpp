#include "csrc/kernels/cpu/channels_last/epilogue.h"

#include <cmath>

#include "csrc/kernels/cpu/channels_last/vector_ops.h"

namespace nimble::kernels::nhwc {
namespace {

#pragma GCC push_options
#pragma GCC target("avx512f")
namespace avx512 {
using Ops = Avx512Ops;
#include "csrc/kernels/cpu/channels_last/epilogue_body.inc"
#include "csrc/kernels/cpu/channels_last/vector_math.inc"
}  // namespace avx512
#pragma GCC pop_options

// The AVX2 vector code in a region of its own: vector_ops.h's AVX2 operations cannot be inlined
// into the region below (its optimize pragma makes the targets differ).
#pragma GCC push_options
#pragma GCC target("avx2,fma")
namespace avx2_vectors {
using Ops = Avx2Ops;
#include "csrc/kernels/cpu/channels_last/vector_math.inc"
}  // namespace avx2_vectors
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("arch=haswell")
// Without it GCC keeps the selects of these loops as branches for AVX2 (AVX-512 masks them),
// and nothing vectorizes: 3.3 ns an element for silu instead of 0.6. Results are the same;
// only floating-point exception flags may differ, which nothing here reads.
#pragma GCC optimize("no-trapping-math")
namespace avx2 {
inline void sigmoid_family(float* y, const float* residual, int64_t n, bool silu) {
  avx2_vectors::sigmoid_family(y, residual, n, silu);
}
#include "csrc/kernels/cpu/channels_last/epilogue_body.inc"
}  // namespace avx2
#pragma GCC pop_options

namespace portable {
#include "csrc/kernels/cpu/channels_last/epilogue_body.inc"
inline void sigmoid_family(float* y, const float* residual, int64_t n, bool silu) {
  if (silu) return apply(y, residual, n, [](float v) { return v * sigmoid(v); });
  apply(y, residual, n, [](float v) { return sigmoid(v); });
}
}  // namespace portable

}  // namespace

void finish(Isa isa, float* y, const float* residual, int64_t n, const Epilogue& epilogue) {
  switch (isa) {
    case Isa::kAvx512:
      return avx512::finish_body(y, residual, n, epilogue);
    case Isa::kAvx2:
      return avx2::finish_body(y, residual, n, epilogue);
    case Isa::kPortable:
      return portable::finish_body(y, residual, n, epilogue);
  }
}

void scale_shift(Isa isa, const float* x, float* y, const float* scale, const float* shift,
                 int64_t channels, const Epilogue& epilogue, int64_t begin, int64_t end) {
  switch (isa) {
    case Isa::kAvx512:
      return avx512::scale_shift_body(x, y, scale, shift, channels, epilogue, begin, end);
    case Isa::kAvx2:
      return avx2::scale_shift_body(x, y, scale, shift, channels, epilogue, begin, end);
    case Isa::kPortable:
      return portable::scale_shift_body(x, y, scale, shift, channels, epilogue, begin, end);
  }
}

}  // namespace nimble::kernels::nhwc

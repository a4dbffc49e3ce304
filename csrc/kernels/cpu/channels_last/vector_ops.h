#pragma once
// The vector operations nimble's CPU kernels are written in (the pattern of isa.h): one
// struct per ISA with the same members, compiled for that ISA. A kernel derives its `Ops`
// from one and adds its own tuning constants. Members are static and always inlined, so a
// body written over Ops compiles to the same instructions as one written in intrinsics.
#include <immintrin.h>

#include "csrc/kernels/cpu/channels_last/isa.h"

namespace nimble::kernels::nhwc {

#define NIMBLE_VECTOR_OP static __attribute__((always_inline)) inline

#pragma GCC push_options
#pragma GCC target("avx512f")
struct Avx512Ops {
  using Vec = __m512;
  using Mask = __mmask16;
  static constexpr Isa kIsa = Isa::kAvx512;
  static constexpr int kWidth = 16;
  NIMBLE_VECTOR_OP Vec load(const float* p) { return _mm512_loadu_ps(p); }
  NIMBLE_VECTOR_OP Vec load(const float* p, Mask m) { return _mm512_maskz_loadu_ps(m, p); }
  NIMBLE_VECTOR_OP Vec load_aligned(const float* p) { return _mm512_load_ps(p); }
  NIMBLE_VECTOR_OP void store(float* p, Vec y) { _mm512_storeu_ps(p, y); }
  NIMBLE_VECTOR_OP void store(float* p, Vec y, Mask m) { _mm512_mask_storeu_ps(p, m, y); }
  NIMBLE_VECTOR_OP Vec fma(Vec a, Vec b, Vec c) { return _mm512_fmadd_ps(a, b, c); }
  NIMBLE_VECTOR_OP Vec add(Vec a, Vec b) { return _mm512_add_ps(a, b); }
  NIMBLE_VECTOR_OP Vec sub(Vec a, Vec b) { return _mm512_sub_ps(a, b); }
  NIMBLE_VECTOR_OP Vec zero() { return _mm512_setzero_ps(); }
  NIMBLE_VECTOR_OP Vec broadcast(float x) { return _mm512_set1_ps(x); }
  NIMBLE_VECTOR_OP Vec broadcast(const float* p) { return _mm512_set1_ps(*p); }
  // The second operand when either is NaN. (Full-mask forms: GCC 12 warns of the plain
  // ones' undefined pass-through operand.)
  NIMBLE_VECTOR_OP Vec max(Vec a, Vec b) { return _mm512_maskz_max_ps(0xFFFF, a, b); }
  NIMBLE_VECTOR_OP Vec min(Vec a, Vec b) { return _mm512_maskz_min_ps(0xFFFF, a, b); }
  // y < 0 ? y * slope : y (NaN passes).
  NIMBLE_VECTOR_OP Vec leaky_relu(Vec y, Vec slope) {
    return _mm512_mask_mul_ps(y, _mm512_cmp_ps_mask(y, zero(), _CMP_LT_OQ), y, slope);
  }
  NIMBLE_VECTOR_OP Vec mul(Vec a, Vec b) { return _mm512_mul_ps(a, b); }
  NIMBLE_VECTOR_OP Vec abs(Vec a) { return _mm512_abs_ps(a); }
  NIMBLE_VECTOR_OP Vec round(Vec a) {
    return _mm512_maskz_roundscale_ps(0xFFFF, a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  // p * 2^n for integral n in [-126, 127].
  NIMBLE_VECTOR_OP Vec times_power_of_two(Vec p, Vec n) {
    return _mm512_maskz_scalef_ps(0xFFFF, p, n);
  }
  // 1 / d for d in [1, 2], correctly rounded but rarely: the 14-bit estimate and one Newton
  // step, r + r (1 - d r) with the residual by an FMA (1 / 1 is 1 exactly).
  NIMBLE_VECTOR_OP Vec reciprocal(Vec d) {
    const Vec r = _mm512_maskz_rcp14_ps(0xFFFF, d);
    return _mm512_fmadd_ps(r, _mm512_fnmadd_ps(d, r, _mm512_set1_ps(1.0F)), r);
  }
  // x < 0 ? negative : otherwise, lane by lane.
  NIMBLE_VECTOR_OP Vec where_negative(Vec x, Vec negative, Vec otherwise) {
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, zero(), _CMP_LT_OQ), otherwise, negative);
  }
  // x where x is NaN, y elsewhere.
  NIMBLE_VECTOR_OP Vec nan_from(Vec x, Vec y) {
    return _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), x);
  }
  // Lanes [0, n), 0 <= n < kWidth.
  NIMBLE_VECTOR_OP Mask first_lanes(int n) { return static_cast<Mask>((1U << n) - 1); }
};
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx2,fma")
struct Avx2Ops {
  using Vec = __m256;
  using Mask = __m256i;
  static constexpr Isa kIsa = Isa::kAvx2;
  static constexpr int kWidth = 8;
  NIMBLE_VECTOR_OP Vec load(const float* p) { return _mm256_loadu_ps(p); }
  NIMBLE_VECTOR_OP Vec load(const float* p, Mask m) { return _mm256_maskload_ps(p, m); }
  NIMBLE_VECTOR_OP Vec load_aligned(const float* p) { return _mm256_load_ps(p); }
  NIMBLE_VECTOR_OP void store(float* p, Vec y) { _mm256_storeu_ps(p, y); }
  // maskload / maskstore are slower than plain ones on AMD: kernels use them for a tail only.
  NIMBLE_VECTOR_OP void store(float* p, Vec y, Mask m) { _mm256_maskstore_ps(p, m, y); }
  NIMBLE_VECTOR_OP Vec fma(Vec a, Vec b, Vec c) { return _mm256_fmadd_ps(a, b, c); }
  NIMBLE_VECTOR_OP Vec add(Vec a, Vec b) { return _mm256_add_ps(a, b); }
  NIMBLE_VECTOR_OP Vec sub(Vec a, Vec b) { return _mm256_sub_ps(a, b); }
  NIMBLE_VECTOR_OP Vec zero() { return _mm256_setzero_ps(); }
  NIMBLE_VECTOR_OP Vec broadcast(float x) { return _mm256_set1_ps(x); }
  NIMBLE_VECTOR_OP Vec broadcast(const float* p) { return _mm256_broadcast_ss(p); }
  NIMBLE_VECTOR_OP Vec max(Vec a, Vec b) { return _mm256_max_ps(a, b); }
  NIMBLE_VECTOR_OP Vec min(Vec a, Vec b) { return _mm256_min_ps(a, b); }
  NIMBLE_VECTOR_OP Vec leaky_relu(Vec y, Vec slope) {
    return _mm256_blendv_ps(y, _mm256_mul_ps(y, slope), _mm256_cmp_ps(y, zero(), _CMP_LT_OQ));
  }
  NIMBLE_VECTOR_OP Vec mul(Vec a, Vec b) { return _mm256_mul_ps(a, b); }
  NIMBLE_VECTOR_OP Vec abs(Vec a) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0F), a); }
  NIMBLE_VECTOR_OP Vec round(Vec a) {
    return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  // In the exponent bits: n is integral and p * 2^n a normal float.
  NIMBLE_VECTOR_OP Vec times_power_of_two(Vec p, Vec n) {
    const __m256i shifted = _mm256_slli_epi32(_mm256_cvtps_epi32(n), 23);
    return _mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(p), shifted));
  }
  // The 12-bit estimate needs two Newton steps (one leaves 1 / 1 one ulp short of 1).
  NIMBLE_VECTOR_OP Vec reciprocal(Vec d) {
    const Vec one = _mm256_set1_ps(1.0F);
    Vec r = _mm256_rcp_ps(d);
    r = _mm256_fmadd_ps(r, _mm256_fnmadd_ps(d, r, one), r);
    return _mm256_fmadd_ps(r, _mm256_fnmadd_ps(d, r, one), r);
  }
  NIMBLE_VECTOR_OP Vec where_negative(Vec x, Vec negative, Vec otherwise) {
    return _mm256_blendv_ps(otherwise, negative, _mm256_cmp_ps(x, zero(), _CMP_LT_OQ));
  }
  NIMBLE_VECTOR_OP Vec nan_from(Vec x, Vec y) {
    return _mm256_blendv_ps(y, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
  }
  NIMBLE_VECTOR_OP Mask first_lanes(int n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
};
#pragma GCC pop_options

#undef NIMBLE_VECTOR_OP

}  // namespace nimble::kernels::nhwc

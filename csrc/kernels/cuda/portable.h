#pragma once
// What nimble's CUDA kernel bodies are written against, so that one source compiles both as
// NVRTC device code and as host C++. A body is a set of phases over explicit block and thread
// indices; the barriers between phases are the runner's (host_grid.h on the CPU, run_block
// below on a GPU), so the CPU can run a whole grid phase by phase and check the arithmetic.
// NVRTC sees this file as an embedded string: no standard headers, no host-only code outside
// the #else branches.
#if defined(__CUDACC_RTC__) || defined(__CUDACC__)
#define NIMBLE_DEVICE_CODE 1
#define NIMBLE_HD __host__ __device__ __forceinline__
#define NIMBLE_PRAGMA_TEXT(x) #x
#define NIMBLE_PRAGMA(x) _Pragma(NIMBLE_PRAGMA_TEXT(x))
// The unroll knob of the kernel being compiled (one configuration per program).
#define NIMBLE_UNROLL NIMBLE_PRAGMA(unroll NIMBLE_UNROLL_FACTOR)
#else
#include <cmath>
#define NIMBLE_HD inline
#define NIMBLE_UNROLL
#endif

// A test build defines NIMBLE_OFF_BY_ONE=1 to shift one index in every body: the check
// against ATen must then fail (tests/cpp/kernels/cuda_off_by_one_test.cpp).
#ifndef NIMBLE_OFF_BY_ONE
#define NIMBLE_OFF_BY_ONE 0
#endif

namespace nimble_cuda {

// Bodies of a build with the injected bug live apart from the correct ones, so that one
// program never links two different definitions of an inline function.
#if NIMBLE_OFF_BY_ONE
#define NIMBLE_BODY_NAMESPACE off_by_one
#else
#define NIMBLE_BODY_NAMESPACE exact
#endif

// The body whose constants are `Knobs` (each body header names its own): host code finds a
// body from its Knobs, which, unlike the body, is the same type in every build.
template <class Knobs>
struct BodyOf;

// The block and thread a phase runs as (threads are one-dimensional).
struct Thread {
  int block_x, block_y, block_z;
  int thread;
};

// What the kernel does to a value before storing it: bias (added by the body), the residual,
// then the activation. Codes, not an enum class: the same numbers cross into NVRTC defines.
enum Activation { kActNone = 0, kActRelu = 1, kActHardtanh = 2, kActSilu = 3, kActHardswish = 4 };

NIMBLE_HD float min_f(float a, float b) { return a < b ? a : b; }
NIMBLE_HD float max_f(float a, float b) { return a > b ? a : b; }
NIMBLE_HD int min_i(int a, int b) { return a < b ? a : b; }
NIMBLE_HD int ceil_div(int a, int b) { return (a + b - 1) / b; }

NIMBLE_HD float exp_f(float x) {
#ifdef NIMBLE_DEVICE_CODE
  return expf(x);
#else
  return std::exp(x);
#endif
}

// `activation` is a compile-time constant on the GPU (its branches fold away).
NIMBLE_HD float activate(int activation, float v, float lo, float hi) {
  if (activation == kActRelu) return max_f(v, 0.0f);
  if (activation == kActHardtanh) return min_f(max_f(v, lo), hi);
  if (activation == kActSilu) return v / (1.0f + exp_f(-v));
  if (activation == kActHardswish) return v * min_f(max_f(v + 3.0f, 0.0f), 6.0f) / 6.0f;
  return v;
}

// Copies `count` floats (at most `width`) from `src` to `dst`: one vector access when all
// `width` are there and both addresses are aligned to it, else one float at a time. The values
// are the same either way; only the GPU's memory transactions differ.
NIMBLE_HD void copy_floats(float* dst, const float* src, int count, int width) {
#ifdef NIMBLE_DEVICE_CODE
  const unsigned long long both =
      reinterpret_cast<unsigned long long>(dst) | reinterpret_cast<unsigned long long>(src);
  if (count == width && width == 4 && (both & 15ull) == 0) {
    *reinterpret_cast<float4*>(dst) = *reinterpret_cast<const float4*>(src);
    return;
  }
  if (count == width && width == 2 && (both & 7ull) == 0) {
    *reinterpret_cast<float2*>(dst) = *reinterpret_cast<const float2*>(src);
    return;
  }
#else
  (void)width;
#endif
  for (int i = 0; i < count; ++i) dst[i] = src[i];
}

// Stores `count` (at most `width`, at most 4) neighbouring results at `y`: each accumulator
// plus the bias, plus the residual at the same place (when `residual` is not null), through the
// activation; one vector store when it can.
NIMBLE_HD void store_results(float* y, const float* residual, const float* acc, int count,
                             int width, float bias, int activation, float lo, float hi) {
  alignas(16) float value[4] = {0, 0, 0, 0};
  if (residual) copy_floats(value, residual, count, width);
  for (int v = 0; v < count; ++v) value[v] = activate(activation, acc[v] + bias + value[v], lo, hi);
  copy_floats(y, value, count, width);
}

#ifdef NIMBLE_DEVICE_CODE
// One block of a kernel `K` on the GPU: begin, then per step the staging phase (threads fill
// shared memory together), a barrier, the compute phase, a barrier, and finally the store.
template <class K>
__device__ __forceinline__ void run_block(const typename K::Knobs& k, const typename K::Args& a,
                                          float* shared) {
  const Thread t{static_cast<int>(blockIdx.x), static_cast<int>(blockIdx.y),
                 static_cast<int>(blockIdx.z), static_cast<int>(threadIdx.x)};
  typename K::Registers regs;
  K::begin(k, a, t, regs);
  const int steps = K::steps(k, a);
  for (int step = 0; step < steps; ++step) {
    if (k.staged) {
      K::stage(k, a, t, step, shared);
      __syncthreads();
    }
    K::compute(k, a, t, step, shared, regs);
    if (k.staged) __syncthreads();
  }
  K::finish(k, a, t, regs);
}
#endif

}  // namespace nimble_cuda

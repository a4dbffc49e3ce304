#pragma once
// Body of the CUDA family "cuda_depthwise": a depthwise convolution (one filter per channel,
// NCHW). A block computes a tile_h x tile_w tile of one channel plane of one image; each thread
// holds `vec` neighbouring outputs of a row per group, per_thread() outputs in all, in
// registers. With `staged`, the block first copies its input tile (with the filter's halo)
// into shared memory; without, the taps read global memory (the L1 cache serves the overlap).
// The epilogue (bias, residual, activation) is applied before the one store.
#include "csrc/kernels/cuda/portable.h"

namespace nimble_cuda {

// Constants of one compiled kernel: the op's geometry and epilogue, then the tuned knobs.
struct DepthwiseKnobs {
  int r, s, stride_h, stride_w, dilation_h, dilation_w;
  int bias, residual, activation;
  int tile_h, tile_w, threads, vec, unroll, staged;

  NIMBLE_HD constexpr int in_tile_h() const {
    return (tile_h - 1) * stride_h + (r - 1) * dilation_h + 1;
  }
  NIMBLE_HD constexpr int in_tile_w() const {
    return (tile_w - 1) * stride_w + (s - 1) * dilation_w + 1;
  }
  NIMBLE_HD constexpr int shared_floats() const { return staged ? in_tile_h() * in_tile_w() : 0; }
  NIMBLE_HD constexpr int per_thread() const { return tile_h * tile_w / threads; }
};

// Runtime operands: the grid is (ceil(out_w / tile_w), ceil(out_h / tile_h), images x channels).
struct DepthwiseArgs {
  const float* x;
  const float* weight;    // [channels, 1, r, s]
  const float* bias;      // [channels] or null
  const float* residual;  // like y, or null
  float* y;
  int channels, h, w, out_h, out_w, pad_h, pad_w;
  float lo, hi;  // hardtanh's bounds
};

#ifndef NIMBLE_MAX_ACC
#define NIMBLE_MAX_ACC 64
#endif

inline namespace NIMBLE_BODY_NAMESPACE {

struct DepthwiseKernel {
  using Knobs = DepthwiseKnobs;
  using Args = DepthwiseArgs;
  struct Registers {
    float acc[NIMBLE_MAX_ACC];
  };

  NIMBLE_HD static int steps(const Knobs&, const Args&) { return 1; }
  NIMBLE_HD static const float* plane(const Args& a, const Thread& t) {
    return a.x + static_cast<long long>(t.block_z) * a.h * a.w;
  }
  NIMBLE_HD static float input_at(const Args& a, const float* plane, int iy, int ix) {
    return iy >= 0 && iy < a.h && ix >= 0 && ix < a.w - NIMBLE_OFF_BY_ONE ? plane[iy * a.w + ix]
                                                                          : 0.0f;
  }
  // The input row and column under the block's first output and its first tap.
  NIMBLE_HD static int y0(const Knobs& k, const Args& a, const Thread& t) {
    return t.block_y * k.tile_h * k.stride_h - a.pad_h;
  }
  NIMBLE_HD static int x0(const Knobs& k, const Args& a, const Thread& t) {
    return t.block_x * k.tile_w * k.stride_w - a.pad_w;
  }

  NIMBLE_HD static void begin(const Knobs& k, const Args&, const Thread&, Registers& regs) {
    for (int i = 0; i < k.per_thread(); ++i) regs.acc[i] = 0.0f;
  }

  NIMBLE_HD static void stage(const Knobs& k, const Args& a, const Thread& t, int, float* shared) {
    const int width = k.in_tile_w();
    const float* p = plane(a, t);
    for (int i = t.thread; i < k.in_tile_h() * width; i += k.threads)
      shared[i] = input_at(a, p, y0(k, a, t) + i / width, x0(k, a, t) + i % width);
  }

  NIMBLE_HD static void compute(const Knobs& k, const Args& a, const Thread& t, int,
                                const float* shared, Registers& regs) {
    const float* w = a.weight + (t.block_z % a.channels) * k.r * k.s;
    const float* p = plane(a, t);
    for (int g = 0; g < k.per_thread() / k.vec; ++g) {
      const int o = (g * k.threads + t.thread) * k.vec;
      const int oy = o / k.tile_w, ox = o % k.tile_w;
      NIMBLE_UNROLL
      for (int tap = 0; tap < k.r * k.s; ++tap) {
        const int ly = oy * k.stride_h + (tap / k.s) * k.dilation_h;
        const float wv = w[tap];
        for (int v = 0; v < k.vec; ++v) {
          const int lx = (ox + v) * k.stride_w + (tap % k.s) * k.dilation_w;
          const float in = k.staged ? shared[ly * k.in_tile_w() + lx]
                                    : input_at(a, p, y0(k, a, t) + ly, x0(k, a, t) + lx);
          regs.acc[g * k.vec + v] += wv * in;
        }
      }
    }
  }

  NIMBLE_HD static void finish(const Knobs& k, const Args& a, const Thread& t,
                               const Registers& regs) {
    const int channel = t.block_z % a.channels;
    const long long plane_out = static_cast<long long>(t.block_z) * a.out_h * a.out_w;
    for (int g = 0; g < k.per_thread() / k.vec; ++g) {
      const int o = (g * k.threads + t.thread) * k.vec;
      const int oy = t.block_y * k.tile_h + o / k.tile_w;
      const int ox = t.block_x * k.tile_w + o % k.tile_w;
      const int count = min_i(k.vec, a.out_w - ox);
      if (oy >= a.out_h || count <= 0) continue;
      const long long at = plane_out + static_cast<long long>(oy) * a.out_w + ox;
      store_results(a.y + at, k.residual ? a.residual + at : nullptr, regs.acc + g * k.vec, count,
                    k.vec, k.bias ? a.bias[channel] : 0.0f, k.activation, a.lo, a.hi);
    }
  }
};

}  // namespace NIMBLE_BODY_NAMESPACE

template <>
struct BodyOf<DepthwiseKnobs> {
  using type = DepthwiseKernel;
};

#ifdef NIMBLE_DEVICE_CODE
extern "C" __global__ void __launch_bounds__(NIMBLE_THREADS)
    nimble_depthwise_conv(const DepthwiseArgs args) {
  constexpr DepthwiseKnobs knobs{NIMBLE_KNOBS};
  __shared__ float shared[knobs.shared_floats() > 0 ? knobs.shared_floats() : 1];
  run_block<DepthwiseKernel>(knobs, args, shared);
}
#endif

}  // namespace nimble_cuda

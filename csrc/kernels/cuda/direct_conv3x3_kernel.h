#pragma once
// Body of the CUDA family "cuda_direct3x3": a dense 3x3 convolution (groups 1, dilation 1,
// stride 1 or 2, NCHW). A block computes block_k output channels of a tile_h x tile_w tile of
// one image, stepping over the input channels block_c at a time; each thread accumulates
// per_thread() outputs in registers, in groups of `vec` neighbours along a row. With `staged`,
// each step first copies the input tile (with its halo) and the weights it needs into shared
// memory.
#include "csrc/kernels/cuda/portable.h"

namespace nimble_cuda {

struct DirectConvKnobs {
  int stride, bias, residual, activation;
  int tile_h, tile_w, block_k, block_c, threads, vec, unroll, staged;

  NIMBLE_HD constexpr int in_tile_h() const { return (tile_h - 1) * stride + 3; }
  NIMBLE_HD constexpr int in_tile_w() const { return (tile_w - 1) * stride + 3; }
  NIMBLE_HD constexpr int input_floats() const { return block_c * in_tile_h() * in_tile_w(); }
  NIMBLE_HD constexpr int shared_floats() const {
    return staged ? input_floats() + block_k * block_c * 9 : 0;
  }
  NIMBLE_HD constexpr int per_thread() const { return block_k * tile_h * tile_w / threads; }
};

// The grid is (ceil(out_w / tile_w), ceil(out_h / tile_h), images x ceil(k / block_k)).
struct DirectConvArgs {
  const float* x;         // [images, c, h, w]
  const float* weight;    // [k, c, 3, 3]
  const float* bias;      // [k] or null
  const float* residual;  // like y, or null
  float* y;               // [images, k, out_h, out_w]
  int c, h, w, k, out_h, out_w, pad_h, pad_w;
  float lo, hi;
};

#ifndef NIMBLE_MAX_ACC
#define NIMBLE_MAX_ACC 64
#endif

inline namespace NIMBLE_BODY_NAMESPACE {

struct DirectConv3x3Kernel {
  using Knobs = DirectConvKnobs;
  using Args = DirectConvArgs;
  struct Registers {
    float acc[NIMBLE_MAX_ACC];
  };

  NIMBLE_HD static int steps(const Knobs& k, const Args& a) { return ceil_div(a.c, k.block_c); }
  NIMBLE_HD static int k_blocks(const Knobs& k, const Args& a) { return ceil_div(a.k, k.block_k); }
  NIMBLE_HD static int image(const Knobs& k, const Args& a, const Thread& t) {
    return t.block_z / k_blocks(k, a);
  }
  NIMBLE_HD static int k0(const Knobs& k, const Args& a, const Thread& t) {
    return t.block_z % k_blocks(k, a) * k.block_k;
  }
  NIMBLE_HD static int y0(const Knobs& k, const Args& a, const Thread& t) {
    return t.block_y * k.tile_h * k.stride - a.pad_h;
  }
  NIMBLE_HD static int x0(const Knobs& k, const Args& a, const Thread& t) {
    return t.block_x * k.tile_w * k.stride - a.pad_w;
  }
  NIMBLE_HD static float input_at(const Knobs& k, const Args& a, const Thread& t, int c, int iy,
                                  int ix) {
    if (c >= a.c || iy < 0 || iy >= a.h || ix < 0 || ix >= a.w - NIMBLE_OFF_BY_ONE) return 0.0f;
    return a.x[((static_cast<long long>(image(k, a, t)) * a.c + c) * a.h + iy) * a.w + ix];
  }
  NIMBLE_HD static float weight_at(const Args& a, int out, int c, int tap) {
    return out < a.k && c < a.c ? a.weight[(static_cast<long long>(out) * a.c + c) * 9 + tap]
                                : 0.0f;
  }

  NIMBLE_HD static void begin(const Knobs& k, const Args&, const Thread&, Registers& regs) {
    for (int i = 0; i < k.per_thread(); ++i) regs.acc[i] = 0.0f;
  }

  NIMBLE_HD static void stage(const Knobs& k, const Args& a, const Thread& t, int step,
                              float* shared) {
    const int c0 = step * k.block_c;
    const int width = k.in_tile_w(), area = k.in_tile_h() * width;
    for (int i = t.thread; i < k.input_floats(); i += k.threads) {
      const int at = i % area;
      shared[i] =
          input_at(k, a, t, c0 + i / area, y0(k, a, t) + at / width, x0(k, a, t) + at % width);
    }
    float* weights = shared + k.input_floats();
    for (int i = t.thread; i < k.block_k * k.block_c * 9; i += k.threads)
      weights[i] = weight_at(a, k0(k, a, t) + i / (k.block_c * 9), c0 + i / 9 % k.block_c, i % 9);
  }

  NIMBLE_HD static void compute(const Knobs& k, const Args& a, const Thread& t, int step,
                                const float* shared, Registers& regs) {
    const int c0 = step * k.block_c;
    const int pixels = k.tile_h * k.tile_w;
    const float* weights = shared + k.input_floats();
    for (int g = 0; g < k.per_thread() / k.vec; ++g) {
      const int o = (g * k.threads + t.thread) * k.vec;
      const int out = o / pixels, oy = o % pixels / k.tile_w, ox = o % k.tile_w;
      NIMBLE_UNROLL
      for (int cc = 0; cc < k.block_c; ++cc) {
        for (int tap = 0; tap < 9; ++tap) {
          const int ly = oy * k.stride + tap / 3;
          const float wv = k.staged ? weights[(out * k.block_c + cc) * 9 + tap]
                                    : weight_at(a, k0(k, a, t) + out, c0 + cc, tap);
          for (int v = 0; v < k.vec; ++v) {
            const int lx = (ox + v) * k.stride + tap % 3;
            const float in = k.staged
                                 ? shared[(cc * k.in_tile_h() + ly) * k.in_tile_w() + lx]
                                 : input_at(k, a, t, c0 + cc, y0(k, a, t) + ly, x0(k, a, t) + lx);
            regs.acc[g * k.vec + v] += wv * in;
          }
        }
      }
    }
  }

  NIMBLE_HD static void finish(const Knobs& k, const Args& a, const Thread& t,
                               const Registers& regs) {
    const int pixels = k.tile_h * k.tile_w;
    for (int g = 0; g < k.per_thread() / k.vec; ++g) {
      const int o = (g * k.threads + t.thread) * k.vec;
      const int out = k0(k, a, t) + o / pixels;
      const int oy = t.block_y * k.tile_h + o % pixels / k.tile_w;
      const int ox = t.block_x * k.tile_w + o % k.tile_w;
      const int count = min_i(k.vec, a.out_w - ox);
      if (out >= a.k || oy >= a.out_h || count <= 0) continue;
      const long long at =
          ((static_cast<long long>(image(k, a, t)) * a.k + out) * a.out_h + oy) * a.out_w + ox;
      store_results(a.y + at, k.residual ? a.residual + at : nullptr, regs.acc + g * k.vec, count,
                    k.vec, k.bias ? a.bias[out] : 0.0f, k.activation, a.lo, a.hi);
    }
  }
};

}  // namespace NIMBLE_BODY_NAMESPACE

template <>
struct BodyOf<DirectConvKnobs> {
  using type = DirectConv3x3Kernel;
};

#ifdef NIMBLE_DEVICE_CODE
extern "C" __global__ void __launch_bounds__(NIMBLE_THREADS)
    nimble_direct_conv3x3(const DirectConvArgs args) {
  constexpr DirectConvKnobs knobs{NIMBLE_KNOBS};
  __shared__ float shared[knobs.shared_floats() > 0 ? knobs.shared_floats() : 1];
  run_block<DirectConv3x3Kernel>(knobs, args, shared);
}
#endif

}  // namespace nimble_cuda

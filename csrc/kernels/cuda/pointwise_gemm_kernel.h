#pragma once
// Body of the CUDA family "cuda_pointwise": a 1x1 convolution (stride 1, no padding) or a
// linear layer as a tiled GEMM, y[m, j] = sum_c weight[m, c] * x[c, j], where column j is
// pixel j % pixels of image j / pixels (a linear layer: pixels = 1). A block computes a
// block_m x block_n tile of y, stepping over the channels block_k at a time; each thread
// accumulates rows() x vec outputs in registers (vec neighbouring columns). With `staged`,
// each step first copies the weight and input tiles into shared memory.
#include "csrc/kernels/cuda/portable.h"

namespace nimble_cuda {

struct PointwiseKnobs {
  int bias, residual, activation;
  int block_m, block_n, block_k, threads, vec, unroll, staged;

  NIMBLE_HD constexpr int thread_columns() const { return block_n / vec; }
  NIMBLE_HD constexpr int rows() const { return block_m * block_n / (threads * vec); }
  NIMBLE_HD constexpr int shared_floats() const {
    return staged ? block_k * (block_m + block_n) : 0;
  }
  NIMBLE_HD constexpr int per_thread() const { return rows() * vec; }
};

// The grid is (ceil(columns / block_n), ceil(m / block_m), 1).
struct PointwiseArgs {
  const float* x;         // [images, channels, pixels]
  const float* weight;    // [m, channels]
  const float* bias;      // [m] or null
  const float* residual;  // like y, or null
  float* y;               // [images, m, pixels]
  int m, channels, pixels, columns;
  float lo, hi;
};

#ifndef NIMBLE_MAX_ACC
#define NIMBLE_MAX_ACC 64
#endif

inline namespace NIMBLE_BODY_NAMESPACE {

struct PointwiseGemmKernel {
  using Knobs = PointwiseKnobs;
  using Args = PointwiseArgs;
  struct Registers {
    float acc[NIMBLE_MAX_ACC];
    long long column[4];  // offset of each of the thread's columns in x and y, -1: none
  };

  NIMBLE_HD static int steps(const Knobs& k, const Args& a) {
    return ceil_div(a.channels, k.block_k);
  }
  NIMBLE_HD static bool channel_in(const Args& a, int c) {
    return c < a.channels - NIMBLE_OFF_BY_ONE;
  }
  NIMBLE_HD static int first_row(const Knobs& k, const Thread& t) {
    return t.block_y * k.block_m + t.thread / k.thread_columns() * k.rows();
  }
  NIMBLE_HD static int first_column(const Knobs& k, const Thread& t) {
    return t.block_x * k.block_n + t.thread % k.thread_columns() * k.vec;
  }
  // Where column j starts in x (channel 0) and in y (row 0): image * rows * pixels + pixel.
  NIMBLE_HD static long long column_offset(const Args& a, int j, int rows) {
    return static_cast<long long>(j / a.pixels) * rows * a.pixels + j % a.pixels;
  }
  NIMBLE_HD static float weight_at(const Args& a, int row, int c) {
    return row < a.m && channel_in(a, c) ? a.weight[static_cast<long long>(row) * a.channels + c]
                                         : 0.0f;
  }

  NIMBLE_HD static void begin(const Knobs& k, const Args& a, const Thread& t, Registers& regs) {
    for (int i = 0; i < k.per_thread(); ++i) regs.acc[i] = 0.0f;
    for (int v = 0; v < k.vec; ++v) {
      const int j = first_column(k, t) + v;
      regs.column[v] = j < a.columns ? column_offset(a, j, a.channels) : -1;
    }
  }

  NIMBLE_HD static void stage(const Knobs& k, const Args& a, const Thread& t, int step,
                              float* shared) {
    const int c0 = step * k.block_k;
    const int m0 = t.block_y * k.block_m, j0 = t.block_x * k.block_n;
    // The weight tile transposed ([block_k][block_m]); reads run along a weight row.
    for (int i = t.thread; i < k.block_k * k.block_m; i += k.threads)
      shared[(i % k.block_k) * k.block_m + i / k.block_k] =
          weight_at(a, m0 + i / k.block_k, c0 + i % k.block_k);
    float* tile = shared + k.block_k * k.block_m;
    for (int i = t.thread; i < k.block_k * k.block_n; i += k.threads) {
      const int c = c0 + i / k.block_n, j = j0 + i % k.block_n;
      tile[i] = j < a.columns && channel_in(a, c)
                    ? a.x[column_offset(a, j, a.channels) + static_cast<long long>(c) * a.pixels]
                    : 0.0f;
    }
  }

  NIMBLE_HD static void compute(const Knobs& k, const Args& a, const Thread& t, int step,
                                const float* shared, Registers& regs) {
    const int c0 = step * k.block_k;
    const int row0 = first_row(k, t), col0 = t.thread % k.thread_columns() * k.vec;
    const float* tile = shared + k.block_k * k.block_m;
    NIMBLE_UNROLL
    for (int kk = 0; kk < k.block_k; ++kk) {
      const int c = c0 + kk;
      float b[4];
      for (int v = 0; v < k.vec; ++v) {
        if (k.staged) {
          b[v] = tile[kk * k.block_n + col0 + v];
        } else {
          b[v] = regs.column[v] >= 0 && channel_in(a, c)
                     ? a.x[regs.column[v] + static_cast<long long>(c) * a.pixels]
                     : 0.0f;
        }
      }
      for (int i = 0; i < k.rows(); ++i) {
        const float w = k.staged ? shared[kk * k.block_m + row0 - t.block_y * k.block_m + i]
                                 : weight_at(a, row0 + i, c);
        for (int v = 0; v < k.vec; ++v) regs.acc[i * k.vec + v] += w * b[v];
      }
    }
  }

  NIMBLE_HD static void finish(const Knobs& k, const Args& a, const Thread& t,
                               const Registers& regs) {
    const int j = first_column(k, t);
    if (j >= a.columns) return;
    // The thread's columns are neighbours in memory when they are in one image.
    const int count = min_i(k.vec, a.columns - j);
    const bool together = j % a.pixels + count <= a.pixels;
    const long long base = column_offset(a, j, a.m);
    for (int i = 0; i < k.rows(); ++i) {
      const int row = first_row(k, t) + i;
      if (row >= a.m) break;
      const float bias = k.bias ? a.bias[row] : 0.0f;
      const long long row_offset = static_cast<long long>(row) * a.pixels;
      if (together) {
        const long long at = base + row_offset;
        store_results(a.y + at, k.residual ? a.residual + at : nullptr, regs.acc + i * k.vec, count,
                      k.vec, bias, k.activation, a.lo, a.hi);
        continue;
      }
      for (int v = 0; v < count; ++v) {
        const long long at = column_offset(a, j + v, a.m) + row_offset;
        store_results(a.y + at, k.residual ? a.residual + at : nullptr, regs.acc + i * k.vec + v, 1,
                      1, bias, k.activation, a.lo, a.hi);
      }
    }
  }
};

}  // namespace NIMBLE_BODY_NAMESPACE

template <>
struct BodyOf<PointwiseKnobs> {
  using type = PointwiseGemmKernel;
};

#ifdef NIMBLE_DEVICE_CODE
extern "C" __global__ void __launch_bounds__(NIMBLE_THREADS)
    nimble_pointwise_gemm(const PointwiseArgs args) {
  constexpr PointwiseKnobs knobs{NIMBLE_KNOBS};
  __shared__ float shared[knobs.shared_floats() > 0 ? knobs.shared_floats() : 1];
  run_block<PointwiseGemmKernel>(knobs, args, shared);
}
#endif

}  // namespace nimble_cuda

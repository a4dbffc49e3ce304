#pragma once
// The CPU check of nimble's CUDA kernel bodies: a family's body, built as host C++, run over
// its whole grid phase by phase (host_grid.h) on random small problems the family supports,
// each with a random launchable config of its space and a random epilogue (every activation
// the bodies have, silu and hardswish included), compared with ATen.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <limits>
#include <random>
#include <string>
#include <vector>

#include "csrc/kernels/cuda/host_grid.h"
#include "csrc/kernels/cuda/nvrtc_specs.h"
#include "csrc/kernels/kernel_measurer.h"
#include "tests/cpp/kernels/random_convs.h"

namespace nimble::kernels::cuda {

inline int pick(std::mt19937_64& rng, int lo, int hi) {
  return std::uniform_int_distribution<int>(lo, hi)(rng);
}

// A convolution of `c` to `k` channels on a 12x12 image (size-preserving padding), with bias.
inline TunableOp square_conv(int64_t c, int64_t k, int64_t groups, int64_t r, int64_t stride,
                             bool channels_last = false) {
  TunableOp op;
  op.n = 1;
  op.c = c;
  op.k = k;
  op.groups = groups;
  op.h = op.w = 12;
  op.r = op.s = r;
  op.stride = {stride, stride};
  op.padding = {r / 2, r / 2};
  op.bias = true;
  return with_aten_layout(op, channels_last);
}

// Random small problems of each family (on the CPU: the check runs there), dense NCHW.
inline TunableOp random_depthwise(std::mt19937_64& rng) {
  TunableOp op;
  op.n = pick(rng, 1, 2);
  op.c = op.k = op.groups = pick(rng, 1, 6);
  op.r = 2 * pick(rng, 0, 3) + 1;
  op.s = pick(rng, 0, 3) == 0 ? pick(rng, 1, 7) : op.r;
  op.stride = {pick(rng, 1, 2), pick(rng, 1, 2)};
  op.dilation = {pick(rng, 0, 4) == 0 ? 2 : 1, pick(rng, 0, 4) == 0 ? 2 : 1};
  op.padding = {pick(rng, 0, op.r / 2 + 1), pick(rng, 0, op.s / 2 + 1)};
  op.h = (op.r - 1) * op.dilation[0] + pick(rng, 1, 20);
  op.w = (op.s - 1) * op.dilation[1] + pick(rng, 1, 40);
  op.bias = pick(rng, 0, 1) == 1;
  return with_aten_layout(op, false);
}

inline TunableOp random_pointwise(std::mt19937_64& rng) {
  TunableOp op;
  op.n = pick(rng, 1, 3);
  op.c = pick(rng, 1, 40);
  op.k = pick(rng, 1, 70);
  op.r = op.s = 1;
  op.h = pick(rng, 1, 9);
  op.w = pick(rng, 1, 9);
  op.bias = pick(rng, 0, 1) == 1;
  if (pick(rng, 0, 3) == 0) {  // a linear layer: addmm's operands seen as [n, c, 1, 1]
    op.kind = TunableOp::Kind::kLinear;
    op.h = op.w = 1;
    op.bias = true;
    op.input_strides = {op.c, 1, 1, 1};
    op.weight_strides = {op.c, 1, 1, 1};
    op.out_sizes = {op.n, op.k, 1, 1};
    op.out_strides = {op.k, 1, 1, 1};
    return op;
  }
  return with_aten_layout(op, false);
}

inline TunableOp random_direct3x3(std::mt19937_64& rng) {
  TunableOp op;
  op.n = pick(rng, 1, 2);
  op.c = pick(rng, 1, 12);
  op.k = pick(rng, 1, 20);
  op.r = op.s = 3;
  const int stride = pick(rng, 1, 2);
  op.stride = {stride, stride};
  op.padding = {pick(rng, 0, 2), pick(rng, 0, 2)};
  op.h = pick(rng, 3, 14);
  op.w = pick(rng, 3, 24);
  op.bias = pick(rng, 0, 1) == 1;
  return with_aten_layout(op, false);
}

// What one family's check saw.
struct HostCheck {
  int checked = 0;
  int wrong = 0;
  std::string first_wrong;  // the problem, config and difference of the first wrong result
};

// `problems` random (problem, config) pairs of family `Spec`, its body run on the CPU.
template <class Spec>
HostCheck check_on_host(TunableOp (*random_problem)(std::mt19937_64&), int problems,
                        uint64_t seed) {
  // ATen's reference on tiny tensors: one thread, not a team spinning on a shared machine.
  at::set_num_threads(1);
  std::mt19937_64 rng(seed);
  HostCheck out;
  for (int i = 0; i < problems; ++i) {
    TunableOp op = random_problem(rng);
    op.epilogue.residual = pick(rng, 0, 2) == 0;
    const auto configs = launchable_configs<Spec>(op);
    const std::vector<int64_t>& tuned =
        configs.at(pick(rng, 0, static_cast<int>(configs.size()) - 1));
    typename Spec::Knobs k = knobs_for<Spec>(op, tuned);
    k.activation = pick(rng, nimble_cuda::kActNone, nimble_cuda::kActHardswish);
    // Hardtanh's bounds as relu6 would have them, or others.
    op.epilogue.lo = pick(rng, 0, 1) == 0 ? 0.0 : -0.5;
    op.epilogue.hi = pick(rng, 0, 1) == 0 ? 6.0 : 0.7;

    const auto operands = op.random_operands(seed * 1000 + i);
    at::Tensor reference = op.aten(operands);  // residual added, no activation yet
    switch (k.activation) {
      case nimble_cuda::kActRelu:
        reference = at::relu(reference);
        break;
      case nimble_cuda::kActHardtanh:
        reference = at::hardtanh(reference, op.epilogue.lo, op.epilogue.hi);
        break;
      case nimble_cuda::kActSilu:
        reference = at::silu(reference);
        break;
      case nimble_cuda::kActHardswish:
        reference = at::hardswish(reference);
        break;
      default:
        break;
    }
    // NaN wherever the kernel fails to write.
    at::Tensor y = op.empty_output().fill_(std::numeric_limits<float>::quiet_NaN());
    OperandPointers p = operand_pointers(op, operands, y);
    nimble_cuda::run_grid_on_host<typename Spec::Kernel>(k, Spec::args(op, p), Spec::grid(op, k));
    const std::string wrong = compare_results(y, reference);
    ++out.checked;
    if (wrong.empty()) continue;
    if (out.wrong++ == 0) {
      out.first_wrong = op.signature() + " activation " + std::to_string(k.activation) + " knobs";
      for (const int f : knob_fields(k)) out.first_wrong += " " + std::to_string(f);
      out.first_wrong += ": " + wrong;
    }
  }
  return out;
}

}  // namespace nimble::kernels::cuda

#pragma once
// Random 2-D convolution problems for property tests: odd sizes, strides, paddings,
// dilations, groups (depthwise included), with and without bias, input contiguous or
// channels_last, with and without an epilogue. The output layout is what ATen gives on such
// operands.
#include <ATen/ATen.h>

#include <random>

#include "csrc/kernels/tunable_op.h"

namespace nimble::kernels {

// `op` with its operands' strides (input contiguous or channels_last) and ATen's output layout.
inline TunableOp with_aten_layout(TunableOp op, bool channels_last) {
  const auto fmt = channels_last ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::Contiguous;
  op.input_strides = at::empty({op.n, op.c, op.h, op.w}).contiguous(fmt).strides().vec();
  op.weight_strides = at::empty({op.k, op.c / op.groups, op.r, op.s}).strides().vec();
  op.out_sizes = {op.n, op.k, 1, 1};  // placeholder for random_operands; set from ATen below
  op.out_strides = {op.k, 1, 1, 1};
  const at::Tensor out = op.aten(op.random_operands(0));
  op.out_sizes = out.sizes().vec();
  op.out_strides = out.strides().vec();
  return op;
}

inline TunableOp random_conv(std::mt19937_64& rng) {
  const auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  TunableOp op;
  op.n = pick(1, 2);
  const int kind = pick(0, 2);  // plain, depthwise, grouped
  op.groups = 1;
  op.c = pick(1, 12);
  op.k = pick(1, 12);
  if (kind == 1) {
    op.groups = op.c;
    op.k = op.c;
  } else if (kind == 2) {
    op.groups = pick(1, 3);
    op.c = op.groups * pick(1, 4);
    op.k = op.groups * pick(1, 4);
  }
  op.r = pick(1, 5);
  op.s = pick(1, 5);
  op.stride = {pick(1, 3), pick(1, 3)};
  op.dilation = {pick(1, 2), pick(1, 2)};
  op.padding = {pick(0, 2), pick(0, 2)};
  // Often the shape Winograd F(2x2, 3x3) handles, which uniform picks would rarely give.
  if (pick(0, 3) == 0) {
    op.r = op.s = 3;
    op.stride = {1, 1};
    op.dilation = {1, 1};
  }
  op.h = (op.r - 1) * op.dilation[0] + 1 + pick(0, 20);
  op.w = (op.s - 1) * op.dilation[1] + 1 + pick(0, 70);
  op.bias = pick(0, 1) == 1;
  op = with_aten_layout(op, pick(0, 3) == 0);
  // Half the problems carry an epilogue: a residual add, an activation, or both.
  op.epilogue.residual = pick(0, 3) == 0;
  const int activation = pick(0, 3);
  if (activation == 1) op.epilogue.activation = Activation::kRelu;
  if (activation == 2) {
    op.epilogue.activation = Activation::kClamp;
    op.epilogue.lo = -0.5;
    op.epilogue.hi = 1.5;
  }
  return op;
}

}  // namespace nimble::kernels

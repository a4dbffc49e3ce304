#pragma once
// Inference pass for the CPU: each 2-d convolution (batch norms already folded into it)
// becomes one `nimble::convolution_prepacked` call (kernels/cpu/prepacked_convolution.h):
// oneDNN with a weight packed once, and with the ops that followed it fused as post-ops
// where nothing else reads what they replace: a residual add (alpha 1, same shape), then
// one activation (relu, hardtanh/relu6, silu, hardswish, gelu, sigmoid, tanh, leaky_relu,
// hardsigmoid). The fused op sits where the last op it replaces was and returns that op's
// result, so every later reader is unchanged.
//
// Layouts: lowered convolutions hand back channels_last. One whose result only other
// lowered convolutions read keeps it so (no conversion between them); any other result is
// converted to the layout the model gave it.
#include <ATen/core/Tensor.h>

#include <functional>
#include <vector>

#include "csrc/program/folded_batchnorm.h"
#include "csrc/program/recorded_op.h"

namespace nimble {

struct CpuLoweringCallbacks {
  // Whether a tensor lives on the storage of a program output.
  std::function<bool(const at::Tensor&)> is_output;
  // Readers of `from` (an in-place op's returned alias) now read `to`.
  std::function<void(const at::Tensor& from, const at::Tensor& to)> redirect;
};

// Rewrites `ops` in place; returns how many convolutions were lowered. `folds` say which
// convolution weights are folded batch norms (and so which tensors they derive from).
int lower_convolutions_for_cpu(std::vector<RecordedOp>& ops,
                               const std::vector<FoldedBatchNorm>& folds,
                               const CpuLoweringCallbacks& callbacks);

}  // namespace nimble

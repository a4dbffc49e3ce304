#pragma once
// Inference pass for the CPU: each 2-d convolution (batch norms already folded into it)
// becomes one `nimble::convolution_prepacked` call (kernels/cpu/torch_ops/prepacked_convolution.h),
// and each linear layer with a constant weight one `nimble::linear_prepacked` call
// (linear_lowering.h): weights packed once, with the ops that followed fused as post-ops
// where nothing else reads what they replace (epilogue_fusion.h): a residual add, then one
// activation. The fused op sits where the last op it replaces was and returns that op's
// result, so every later reader is unchanged.
//
// First, ShuffleNet's channel shuffles (with the concatenation before them) become one op
// each (channel_shuffle_fusion.h), which the layout plan can keep channels_last.
//
// Layouts: lowered convolutions hand back channels_last, kept so where readers gain from it
// (cpu_layout_plan.h); any other result is converted to the layout the model gave it. Last,
// the poolings, concatenations and batch norms left reading channels_last become nimble's
// kernels (channels_last_ops.h).
#include <ATen/core/Tensor.h>

#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "csrc/program/folded_batchnorm.h"
#include "csrc/program/recorded_op.h"
#include "csrc/program/tuned_convolutions.h"

namespace nimble {

struct CpuLoweringCallbacks {
  // Whether a tensor lives on the storage of a program output.
  std::function<bool(const at::Tensor&)> is_output;
  // Whether a tensor lives on the storage of a program input (never a weight to pack).
  std::function<bool(const at::Tensor&)> is_input;
  // Readers of `from` (an in-place op's returned alias) now read `to`.
  std::function<void(const at::Tensor& from, const at::Tensor& to)> redirect;
  // Kernels chosen by tuning, by shape; a convolution without one gets the rule's.
  const TunedConvolutions* tuned = nullptr;
  // Trace positions of ops to leave as ATen's: not lowered, fused, planned channels_last or
  // given a channels-last kernel (BuildOptions::keep_aten_ops).
  const std::set<int>* keep_aten = nullptr;

  bool keeps_aten(const RecordedOp& op) const {
    return keep_aten && keep_aten->count(op.trace_position) > 0;
  }
};

// Rewrites `ops` in place; returns how many ops were lowered (convolutions, linear layers,
// and the ops channels_last_ops.h replaced): zero when `ops` is unchanged. `folds`
// say which convolution weights are folded batch norms (and so which tensors they derive from).
int lower_for_cpu_inference(std::vector<RecordedOp>& ops, const std::vector<FoldedBatchNorm>& folds,
                            const CpuLoweringCallbacks& callbacks);

}  // namespace nimble

#pragma once
// The epilogues the tuned-kernel slot may fuse into its ops (kernels/tunable_op.h), found once,
// on the recorded ops as the other passes left them: after each ATen convolution or addmm, an
// in-place residual add (alpha 1, of the result's layout), then relu or hardtanh, in place, or
// functional (a functionalized graph's) where it reads the result alone, the result is no
// program output and no residual was added. Only ops no other op can tell from the fused
// kernel: nothing reads the result between them. Narrower than the CPU lowering's fusion
// (epilogue_fusion.h): the slot's kernels add the residual and clamp as they store, and see
// through no view. Whether the built program still allows an epilogue (an `.out` buffer, where
// its residual lives, the order the dependencies give) the slot checks when it takes it.
#include <ATen/core/Tensor.h>

#include <functional>
#include <vector>

#include "csrc/program/recorded_op.h"
#include "csrc/program/trace_pass_results.h"

namespace nimble {

// By op, ascending; `noops` are the ops the program leaves out, `is_output` tells a tensor on
// a program output's storage.
std::vector<TraceEpilogue> find_slot_epilogues(
    const std::vector<RecordedOp>& ops, const std::vector<NoopOp>& noops,
    const std::function<bool(const at::Tensor&)>& is_output);

}  // namespace nimble

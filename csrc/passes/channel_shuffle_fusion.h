#pragma once
// First step of the CPU lowering (cpu_lowering.h): ShuffleNet's channel shuffle, recorded as
// four ops (view to [n, groups, c / groups, h, w], transpose(1, 2), clone to contiguous,
// view back to [n, c, h, w]) and usually fed by a concatenation along channels, becomes one
// `nimble::channel_shuffle(tensors, groups)` (kernels/cpu/torch_ops/nhwc_tensor_ops.h): the
// concatenation and the shuffle in one pass, and an op the layout plan can keep
// channels_last (cpu_layout_plan.h), where the four ATen ops forced NCHW between the blocks
// (on shufflenet_v2 at 64x64, 0.19 of 0.55 ms went to those copies and views).
#include <vector>

#include "csrc/passes/cpu_lowering.h"

namespace nimble {

// Rewrites `ops` in place; returns how many shuffles it fused.
int fuse_channel_shuffles(std::vector<RecordedOp>& ops, const CpuLoweringCallbacks& callbacks);

}  // namespace nimble

#pragma once
// Layouts planned across the lowered convolutions of a trace (cpu_lowering.h) and the
// poolings between them: a value one of them produces stays channels_last (a new tensor of
// that layout replaces it) where a lowered convolution or a pooling reads it; any other
// reader, and a program output, gets the model's layout back from a conversion (`clone`)
// right after the producer, which returns the original tensor, so those readers are
// unchanged. Poolings are 15x faster in channels_last (3x3 max pooling of 64 channels on
// 32x32 pixels: 350 us contiguous, 23 us channels_last).
#include <unordered_map>
#include <vector>

#include "csrc/passes/cpu_lowering.h"
#include "csrc/passes/fused_convolution.h"
#include "csrc/passes/trace_access.h"

namespace nimble {

// Rewrites `convs` (what they read and return, `keep_kernel_layout`) and the poolings of
// `ops` that read planned values; returns the conversions to insert, by the index of the op
// they follow.
std::unordered_map<size_t, std::vector<RecordedOp>> plan_cpu_layouts(
    std::vector<RecordedOp>& ops, std::vector<FusedConvolution>& convs, const TraceAccess& access,
    const CpuLoweringCallbacks& callbacks);

}  // namespace nimble

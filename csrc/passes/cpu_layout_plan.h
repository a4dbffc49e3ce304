#pragma once
// Layouts planned across the lowered convolutions of a trace (cpu_lowering.h) and the ops
// between them: a value one of them produces stays channels_last (a new tensor of that layout
// replaces it) where a reader gains from it: a lowered convolution, a pooling, concatenation
// or inference batch norm (channels_last_ops.h gives those nimble's kernels), or an
// elementwise op whose result goes on to one of them. Those layout-free ops then read the
// planned value and their results are planned in turn. Any other reader, and a program
// output, gets the model's layout back from a conversion (`clone`) right after the producer,
// which returns the original tensor, so those readers are unchanged. A value written in place
// is planned only where every reader takes it channels_last: the conversion would not see the
// write.
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

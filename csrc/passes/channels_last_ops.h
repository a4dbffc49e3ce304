#pragma once
// The last step of the CPU lowering (cpu_lowering.h): ATen ops the layout plan left reading
// channels_last values become nimble's channels-last kernels
// (kernels/cpu/torch_ops/nhwc_tensor_ops.h): max pooling whose indices nothing reads, average
// pooling, concatenation along channels (of pieces of split values too), the channel shuffle, the
// mean over pixels, squeeze-excitation's channel-wise product, and the inference batch norm, with
// the activation that follows it fused where nothing else reads the batch norm's result (densenet's
// blocks read every concatenation through a batch norm and a ReLU).
#include <vector>

#include "csrc/passes/cpu_lowering.h"

namespace nimble {

// Whether `op` is of a kind this pass gives a channels-last kernel (the layout plan keeps
// values channels_last for them); the pass still checks each op's arguments.
bool has_channels_last_kernel(const RecordedOp& op);

// Rewrites `ops` (the lowered trace) in place; returns how many ops it replaced.
int lower_channels_last_ops(std::vector<RecordedOp>& ops, const CpuLoweringCallbacks& callbacks);

}  // namespace nimble

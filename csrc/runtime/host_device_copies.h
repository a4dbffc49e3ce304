#pragma once
// A copy between host and device cannot be part of a CUDA graph: from pageable memory
// CUDA synchronizes, which a stream being captured refuses with a raw error ("operation not
// permitted when stream is capturing"), and a copy that could be captured would replay the
// host bytes of capture time. The CUDA backend refuses such a program before it captures,
// naming the op. Torch-free of CUDA, so that the check runs (and is tested) on any machine.
#include "csrc/program/program.h"

namespace nimble {

// Whether op `index` of `program` copies data between a CPU tensor and an accelerator
// tensor (`_to_copy` to or from the device, `copy_` across devices, ...).
bool copies_between_host_and_device(const Program& program, int index);

// Throws UnsupportedOp (errors.h) naming the first op that copies between host and device.
void refuse_host_device_copies(const Program& program);

}  // namespace nimble

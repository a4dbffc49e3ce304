#pragma once
// The kernels a tuning database chose for a CPU program's convolutions, which the CPU lowering
// (passes/cpu_lowering.h) gives them: a build option (program_builder.h).
#include <map>
#include <string>

namespace nimble {

// What a tuning database chose for each convolution shape (PrepackedConvolution::shape_key;
// slot/lowering_choices.h): the kernel, threads and kernel parameters as a TunedConvolution
// spec ("nimble_gemm threads=1 gemm.tile_rows=4", kernels/cpu/torch_ops/tuned_convolution.h).
// A thread count found best for a layer timed alone can make whole replays slower (docs/cpu.md):
// the caller keeps a choice only where the replay runs it faster (replay/lowered_tuning.py).
using TunedConvolutions = std::map<std::string, std::string>;

}  // namespace nimble

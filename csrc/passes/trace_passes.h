#pragma once
// The pass stage of prepare: after the capture recorded a trace into a ProgramBuilder and
// before `finish` builds its program, the recorded ops are rewritten as the build options ask,
// in this order: eval-mode batch norms folded into the convolutions before them
// (batchnorm_folding.h), a CPU program's convolutions and linear layers lowered to prepacked
// calls (cpu_lowering.h), copies and aliases no reader can tell from their input found
// (noop_elimination.h); last, on what is left, the epilogues the tuned-kernel slot may fuse
// (slot_epilogues.h). Readers of what a pass removed read what replaces it.
#include "csrc/program/program_builder.h"
#include "csrc/program/trace_pass_results.h"

namespace nimble {

// Rewrites `builder`'s recorded ops; returns what ProgramBuilder::finish takes besides them.
TracePassResults run_trace_passes(ProgramBuilder& builder, const BuildOptions& options);

}  // namespace nimble

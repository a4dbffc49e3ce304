#pragma once
// prepare's pipeline after the hand-over: the stages C++ runs on a recorded trace, in order.
// The whole pipeline, capture included, is listed in nimble/replay/pipeline.py (Python, since
// the capture can only be Python), whose `hand_over` is the one place a trace goes to C++: it
// fills a ProgramBuilder (nimble/replay/build_replay.py) and calls
// `ProgramBuilder.finish(BuildOptions)`, bound to `build_replay` below.
//
//   stage                 in -> out                                  where
//   2. passes             recorded ops -> recorded ops,              run_trace_passes
//                         TracePassResults                           (passes/trace_passes.h)
//   3. program            recorded ops -> BuiltProgram               ProgramBuilder::finish
//   4. memory plan        BuiltProgram -> BuiltProgram (buffers      ProgramBuilder::finish
//                         sharing storage)                           (program/memory_plan.h)
//   5. stream plan        Program -> StreamPlan                      runtime/stream_plan.h
//   6. executor           Program, ProgramState, StreamPlan ->       make_executor
//                         Executor                                   (runtime/executor.h)
//
// Stages 5 and 6 run inside the Replay, which owns the program, its state and the executor:
// it plans the streams and makes the executor again whenever the stream count, the kernels
// or a moved parameter ask for it (Replay::set_executor_options, set_kernels).
#include <memory>

#include "csrc/program/build_options.h"
#include "csrc/program/program_builder.h"
#include "csrc/runtime/executor.h"
#include "csrc/runtime/replay.h"

namespace nimble {

// The executor's part of `options`.
ExecutorOptions executor_options(const BuildOptions& options);

// Stages 2 to 6 on the trace `recorded` holds: the replay prepare returns.
std::shared_ptr<Replay> build_replay(ProgramBuilder& recorded, const BuildOptions& options);

}  // namespace nimble

#include "csrc/pipeline/replay_pipeline.h"

#include <utility>

#include "csrc/passes/trace_passes.h"

namespace nimble {

ExecutorOptions executor_options(const BuildOptions& options) {
  ExecutorOptions executor;
  executor.streams = options.streams;
  executor.cores = options.cores;
  // The private pool is the single-stream replay's memory plan.
  executor.memory_pool = options.plan_memory;
  executor.graph_twin = options.graph_twin;
  return executor;
}

std::shared_ptr<Replay> build_replay(ProgramBuilder& recorded, const BuildOptions& options) {
  TracePassResults passes = run_trace_passes(recorded, options);
  BuiltProgram built = recorded.finish(options, std::move(passes));  // program -> memory plan
  return std::make_shared<Replay>(std::move(built),
                                  executor_options(options));  // stream plan -> executor
}

}  // namespace nimble

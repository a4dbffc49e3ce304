#include "csrc/runtime/executor.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <thread>

#include "csrc/errors.h"
#include "csrc/runtime/cpu/cpu_executor.h"
#include "csrc/runtime/cpu/cpu_graph_executor.h"
#include "csrc/runtime/stream_plan.h"
#ifdef NIMBLE_WITH_CUDA
#include "csrc/runtime/cuda/cuda_graph_executor.h"
#endif

namespace nimble {

c10::MempoolId_t new_graph_pool(const Program& program) {
#ifdef NIMBLE_WITH_CUDA
  if (program_device(program).is_cuda()) return at::cuda::graph_pool_handle();
#else
  (void)program;
#endif
  return {0, 0};
}

std::unique_ptr<Executor> make_executor(const Program& program, ProgramState& state,
                                        const ExecutorOptions& options) {
  if (!options.stress_delays_us.empty() && options.stress_delays_us.size() != program.ops.size()) {
    throw BadInput("expected one stress delay per op (" + std::to_string(program.ops.size()) +
                   "), got " + std::to_string(options.stress_delays_us.size()));
  }
  if (program_device(program).is_cuda()) {
#ifdef NIMBLE_WITH_CUDA
    return std::make_unique<CudaGraphExecutor>(program, state,
                                               plan_graph_streams(program, options.streams),
                                               options.graph_pool, options.stress_delays_us);
#else
    throw std::invalid_argument(
        "the program uses CUDA tensors but nimble was built without its CUDA backend "
        "(rebuild with torch's CUDA build and nvcc on PATH, and without NIMBLE_CUDA=0)");
#endif
  }
  if (options.graph_twin) {
    if (!options.stress_delays_us.empty())
      throw BadInput(
          "the CPU twin of the CUDA graph runs its ops in order: stress delays would "
          "test nothing there");
    return std::make_unique<CpuGraphExecutor>(program, state,
                                              plan_graph_streams(program, options.streams));
  }
  const int cores = options.cores > 0
                        ? options.cores
                        : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  StreamPlan plan =
      plan_streams(program, options.streams,
                   [cores](const scheduling::Dag&, const scheduling::StreamAssignment& assignment) {
                     return scheduling::default_physical_streams(assignment, cores);
                   });
  return std::make_unique<CpuExecutor>(program, state, std::move(plan), cores, options.memory_pool,
                                       options.stress_delays_us);
}

}  // namespace nimble

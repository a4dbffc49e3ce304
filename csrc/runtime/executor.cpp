#include "runtime/executor.h"

#include "runtime/cpu_executor.h"
#ifdef NIMBLE_WITH_CUDA
#include "runtime/cuda_graph_executor.h"
#endif

#include <algorithm>
#include <stdexcept>
#include <thread>

namespace nimble {

namespace {

bool uses_cuda(const Program& program) {
  for (const c10::IValue& value : program.values) {
    if (value.isTensor() && value.toTensor().defined() && value.toTensor().is_cuda()) return true;
  }
  return false;
}

}  // namespace

std::unique_ptr<Executor> make_executor(Program& program, const ExecutorOptions& options) {
  if (uses_cuda(program)) {
#ifdef NIMBLE_WITH_CUDA
    return std::make_unique<CudaGraphExecutor>(program);
#else
    throw std::invalid_argument(
        "the program uses CUDA tensors but nimble was built without its CUDA backend "
        "(rebuild with torch's CUDA build and nvcc on PATH, and without NIMBLE_CUDA=0)");
#endif
  }
  const int cores = options.cores > 0
                        ? options.cores
                        : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  scheduling::Dag dag;
  dag.num_nodes = static_cast<int>(program.ops.size());
  dag.edges = program.dependencies;
  const scheduling::StreamAssignment assignment = scheduling::assign_streams(dag);
  const int streams = options.streams > 0 ? options.streams
                                          : scheduling::default_physical_streams(assignment, cores);
  scheduling::PhysicalSchedule schedule =
      scheduling::fold_streams(dag, assignment, std::max(1, streams));
  ScheduleInfo info;
  info.logical_streams = assignment.num_logical_streams;
  info.logical_syncs = static_cast<int>(assignment.logical_syncs.size());
  info.logical_stream = assignment.logical_stream;
  info.physical_streams = schedule.num_streams;
  info.physical_syncs = static_cast<int>(schedule.syncs.size());
  info.physical_stream = schedule.stream;
  return std::make_unique<CpuExecutor>(program, std::move(schedule), std::move(info), cores,
                                       options.memory_pool);
}

}  // namespace nimble

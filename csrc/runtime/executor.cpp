#include "runtime/executor.h"

#include "runtime/cpu_executor.h"
#ifdef NIMBLE_WITH_CUDA
#include "runtime/cuda_graph_executor.h"
#endif

#include <stdexcept>

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
  (void)options;
  return std::make_unique<CpuExecutor>();
}

}  // namespace nimble

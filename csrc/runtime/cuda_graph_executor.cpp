#include "runtime/cuda_graph_executor.h"

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <chrono>

#include "runtime/op_call.h"

namespace nimble {

namespace {

void run_ops(Program& program, std::vector<c10::IValue>& stack) {
  for (const OpNode& op : program.ops) call_op(op, program.values, stack);
}

c10::Device program_device(const Program& program) {
  for (const c10::IValue& value : program.values) {
    if (value.isTensor() && value.toTensor().is_cuda()) return value.toTensor().device();
  }
  throw std::invalid_argument("the CUDA graph backend needs a program with CUDA tensors");
}

}  // namespace

CudaGraphExecutor::CudaGraphExecutor(Program& program) {
  info_.logical_stream.assign(program.ops.size(), 0);
  info_.physical_stream.assign(program.ops.size(), 0);
  const c10::cuda::CUDAGuard device_guard(program_device(program));
  const c10::cuda::CUDAStream side = c10::cuda::getStreamFromPool();
  side.stream();
  {
    const c10::cuda::CUDAStreamGuard on_side(side);
    run_ops(program, stack_);  // warm-up
    side.synchronize();
    graph_ = std::make_unique<at::cuda::CUDAGraph>();
    graph_->capture_begin();
    run_ops(program, stack_);
    graph_->capture_end();
  }
  side.synchronize();
  stack_.clear();
}

void CudaGraphExecutor::run(Program& /*program*/) { graph_->replay(); }

std::vector<OpTiming> CudaGraphExecutor::run_timed(Program& program) {
  using Clock = std::chrono::steady_clock;
  std::vector<OpTiming> timings;
  const auto stream = c10::cuda::getCurrentCUDAStream();
  stream.synchronize();
  const auto origin = Clock::now();
  auto since = [&](Clock::time_point t) {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(t - origin).count();
  };
  for (size_t i = 0; i < program.ops.size(); ++i) {
    const OpNode& op = program.ops[i];
    push_args(op, program.values, stack_);
    const auto start = Clock::now();
    op.handle.redispatchBoxed(op.keys, &stack_);
    stream.synchronize();
    const auto end = Clock::now();
    keep_results(op, program.values, stack_, op.release);
    timings.push_back({static_cast<int>(i), 0, since(start), since(end)});
  }
  return timings;
}

}  // namespace nimble

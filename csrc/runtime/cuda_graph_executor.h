#pragma once
// CUDA backend: the program's ops are captured once into one CUDA graph; a replay is one
// graph launch on the current stream. Built only when torch has CUDA (NIMBLE_WITH_CUDA).
#include <ATen/cuda/CUDAGraph.h>

#include <memory>

#include "runtime/executor.h"

namespace nimble {

class CudaGraphExecutor final : public Executor {
 public:
  // Warms the ops up on a side stream (lazy cuBLAS/cuDNN state must exist before
  // capture), then captures them. Transient values then live in the graph's private pool
  // at fixed addresses, which is why every output of this backend is reused by the next
  // replay.
  explicit CudaGraphExecutor(Program& program);
  void run(Program& program) override;
  // Runs the ops one by one, outside the graph, timing each with device syncs.
  std::vector<OpTiming> run_timed(Program& program) override;
  std::string backend() const override { return "cuda-graph"; }
  int num_streams() const override { return 1; }
  bool reuses_outputs() const override { return true; }
  const ScheduleInfo& schedule() const override { return info_; }

 private:
  ScheduleInfo info_;  // one stream, in trace order
  std::unique_ptr<at::cuda::CUDAGraph> graph_;
  std::vector<c10::IValue> stack_;
};

}  // namespace nimble

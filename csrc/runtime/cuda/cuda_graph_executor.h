#pragma once
// CUDA backend: the stream plan captured once into one CUDA graph. Each physical stream
// of the plan is a stream of torch's pool (cuda_handles.h); a cross-stream edge is an event
// recorded on the producer's stream after the producer and waited for by the consumer's
// stream before the consumer; the side streams fork from the capturing stream and join
// back into it before the capture ends. A replay is one graph launch on the caller's
// current stream (after Replay's input copies). Built only when torch has CUDA.
#include <ATen/cuda/CUDAGraph.h>

#include <memory>
#include <vector>

#include "csrc/runtime/cuda/cuda_handles.h"
#include "csrc/runtime/executor.h"
#include "csrc/runtime/stream_plan.h"

namespace nimble {

class CudaGraphExecutor final : public Executor {
 public:
  // Warms the ops up on the executor's streams (cuBLAS/cuDNN handles and workspaces are
  // made per stream, lazily; they must exist before capture), then captures them.
  // Transient values then live in the graph's private pool at fixed addresses, which is
  // why every output of this backend is reused by the next replay.
  // The capture allocates from `pool` (ExecutorOptions::graph_pool).
  // `stress_delays_us`: empty, or per op a spinning kernel before it (see ExecutorOptions).
  CudaGraphExecutor(const Program& program, ProgramState& state, StreamPlan plan,
                    c10::MempoolId_t pool = {0, 0}, std::vector<int> stress_delays_us = {});
  ~CudaGraphExecutor() override;
  CudaGraphExecutor(const CudaGraphExecutor&) = delete;
  CudaGraphExecutor& operator=(const CudaGraphExecutor&) = delete;

  void run() override;
  // Issues the ops outside the graph on the same streams, each between two timing
  // events; times are device times since the replay's start, one row per stream.
  std::vector<OpTiming> run_timed() override;
  std::string backend() const override { return "cuda-graph"; }
  int num_streams() const override { return plan_.num_streams(); }
  const ScheduleInfo& schedule() const override { return plan_.info; }
  bool reuses_outputs() const override { return true; }
  bool bakes_scalars() const override { return true; }

 private:
  struct OpEvents {
    cuda::OwnedEvent start{true};
    cuda::OwnedEvent end{true};
  };
  // Issues every op once on the executor's streams, ordered after the work already on
  // `origin` and joined back into it. With `timing`, records each op's events there.
  void issue(cudaStream_t origin, std::vector<OpEvents>* timing);
  // Ops of the program that touch CPU tensors only (Adam's step counters beside CUDA
  // parameters): a capture runs them once, on the host, so run() calls them before each
  // launch. Refuses a program whose CUDA ops read what such an op computes from state
  // that changes between replays (the graph would keep the value of capture time).
  void find_host_ops();
  void run_host_ops();
  // After a failed issue: values of the half-run replay must not live on.
  void drop_transients();

  const Program& program_;
  ProgramState& state_;
  c10::Device device_;
  StreamPlan plan_;
  std::vector<int64_t> stress_delay_cycles_;    // per op, or empty
  std::vector<c10::cuda::CUDAStream> streams_;  // one per physical stream; 0 captures
  std::vector<cuda::OwnedEvent> events_;        // one per event of the plan
  cuda::OwnedEvent fork_;
  std::vector<cuda::OwnedEvent> joins_;  // per stream, joined back into the origin
  // Per op: transient slots it reads, so that with several streams their memory is not
  // handed to the allocating stream's next request before this op has read it.
  std::vector<std::vector<int>> transient_reads_;
  std::vector<c10::IValue> stack_;
  std::vector<int> host_ops_;  // in op order
  std::unique_ptr<at::cuda::CUDAGraph> graph_;
};

}  // namespace nimble

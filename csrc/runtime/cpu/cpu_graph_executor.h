#pragma once
// The CPU twin of the CUDA graph backend: a CPU program run with a CUDA graph's semantics,
// so that every defect of those semantics shows on a machine without a GPU (tests select
// it with ExecutorOptions::graph_twin). Like CudaGraphExecutor it warms the program up and
// then records it once, both under a StateSnapshot (building it changes no parameter,
// buffer, optimizer state, input or generator). Every replay then calls each op with the
// arguments recorded then (tensors by identity, scalars as they were: baked in), and writes
// each op's results into the tensors recorded for them: outputs and scratch values live
// at fixed addresses that the next replay overwrites, as in a graph's private pool. A
// tensor argument whose memory moved since the recording (a graph would read the old
// address) is an error. Ops run on the calling thread in the plan's issue order, the order
// the CUDA graph is captured in: the twin checks semantics (and that the issue order keeps
// every dependency), not concurrency.
#include <vector>

#include "csrc/runtime/executor.h"
#include "csrc/runtime/stream_plan.h"

namespace nimble {

class CpuGraphExecutor final : public Executor {
 public:
  CpuGraphExecutor(const Program& program, ProgramState& state, StreamPlan plan);
  CpuGraphExecutor(const CpuGraphExecutor&) = delete;
  CpuGraphExecutor& operator=(const CpuGraphExecutor&) = delete;

  void run() override;
  std::vector<OpTiming> run_timed() override;
  std::string backend() const override { return "cpu-graph"; }
  int num_streams() const override { return plan_.num_streams(); }
  const ScheduleInfo& schedule() const override { return plan_.info; }
  bool reuses_outputs() const override { return true; }
  bool bakes_scalars() const override { return true; }

 private:
  // One op as recorded: its boxed arguments, where each tensor among them lived, and the
  // values it produced that the program keeps (in OpNode::outputs order).
  struct RecordedCall {
    std::vector<c10::IValue> arguments;
    std::vector<std::pair<at::Tensor, const void*>> addresses;
    std::vector<at::Tensor> results;
  };
  // Runs every op once through the shared op call; with `recording`, keeps each call.
  void run_once(std::vector<RecordedCall>* recording);
  void replay_op(size_t i);
  void check_addresses(size_t i) const;
  void write_results(size_t i);

  const Program& program_;
  ProgramState& state_;
  StreamPlan plan_;
  std::vector<RecordedCall> calls_;
  std::vector<c10::IValue> stack_;
};

}  // namespace nimble

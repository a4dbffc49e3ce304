#pragma once
// CPU backend, threads as streams: each physical stream is a worker thread running its
// op list in order (stream 0 runs on the calling thread); a dependency that crosses
// streams is an event the consumer waits for. With one stream, ops run inline.
#include <algorithm>
#include <deque>
#include <exception>
#include <memory>
#include <thread>
#include <vector>

#include "csrc/runtime/cpu/direct_calls.h"
#include "csrc/runtime/cpu/replay_arena.h"
#include "csrc/runtime/cpu/stream_event.h"
#include "csrc/runtime/executor.h"
#include "csrc/runtime/stream_plan.h"

namespace nimble {

class CpuExecutor final : public Executor {
 public:
  // `plan` must cover the program's ops; `cores` is what the streams' kernels share.
  // With one stream and `memory_pool`, replays allocate from a ReplayArena.
  // `stress_delays_us`: empty, or per op a sleep before it (see ExecutorOptions).
  CpuExecutor(const Program& program, ProgramState& state, StreamPlan plan, int cores,
              bool memory_pool, std::vector<int> stress_delays_us = {});
  ~CpuExecutor() override;
  CpuExecutor(const CpuExecutor&) = delete;
  CpuExecutor& operator=(const CpuExecutor&) = delete;

  void run() override;
  std::vector<OpTiming> run_timed() override;
  std::string backend() const override { return "cpu"; }
  int num_streams() const override { return plan_.num_streams(); }
  const ScheduleInfo& schedule() const override { return plan_.info; }
  std::optional<PoolStats> pool_stats() const override;
  bool shares_work() const override { return shared_work_; }
  bool pool_owns(const void* ptr) const override { return arena_ && arena_->owns(ptr); }

 private:
  struct Stream {
    std::vector<c10::IValue> stack;
    std::vector<OpTiming>* timings = nullptr;
  };

  void run_stream(int stream, uint64_t epoch);
  // One op, with its result kept and the values it read last dropped (timed when timed_).
  void call_direct(const DirectCall& direct, int op, int stream, const std::vector<int>& release);
  void call_boxed(const OpNode& op, const OpState& op_state, int index, int stream,
                  const std::vector<int>& release);
  void worker(int stream);
  void replay(bool timed, std::vector<OpTiming>* timings);

  const Program& program_;
  ProgramState& state_;
  StreamPlan plan_;
  std::vector<int> stress_delays_us_;
  // Measured on googlenet and inception_v3 (2 cores): a fixed equal share per stream beats
  // resizing each kernel's team to the streams running at that moment, because every
  // stream thread that opens OpenMP regions gets its own spinning team.
  int threads_per_stream() const { return std::max(1, cores_ / plan_.num_streams()); }
  int cores_ = 1;
  // Whether replays split nimble's kernels through their helper threads
  // (threads/work_sharing.h), the stream's thread claiming pieces with them, and run
  // ATen's ops on the stream's thread alone: where the program has kernels of nimble's.
  // Then no op waits at an OpenMP barrier for a thread that an idle or busy core holds up,
  // and OpenMP's threads never spin beside the helpers (docs/cpu.md, "nimble's kernels").
  bool shared_work_ = false;
  std::vector<Stream> streams_;
  // Per op: its unboxed call, or null (runtime/cpu/direct_calls.h).
  std::vector<std::unique_ptr<const DirectCall>> direct_;
  std::unique_ptr<ReplayArena> arena_;
  std::deque<StreamEvent> events_;
  std::deque<StreamEvent> stream_done_;
  StreamEvent start_;
  EventWaitQueue queue_;
  uint64_t epoch_ = 0;
  bool stopping_ = false;
  std::vector<std::exception_ptr> errors_;
  bool timed_ = false;
  int64_t origin_ns_ = 0;
  std::vector<std::thread> workers_;
};

}  // namespace nimble

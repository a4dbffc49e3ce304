#pragma once
// The runtime interface: an Executor runs every op of a Program once, on the program's
// state (its slot values, bound kernels, replaced arguments). Backends (CPU
// threads-as-streams, CUDA graphs) differ in how; the Replay around them owns the program,
// the state, inputs, outputs and locking, and outlives its executor.
#include <c10/core/Allocator.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "csrc/program/program.h"
#include "csrc/program/program_state.h"

namespace nimble {

// How the program's ops are spread over streams (see csrc/scheduling/ and
// runtime/stream_plan.h).
struct ScheduleInfo {
  int logical_streams = 1;
  int logical_syncs = 0;            // |E_MEG| - |M|
  std::vector<int> logical_stream;  // per op
  int physical_streams = 1;
  int physical_syncs = 0;
  std::vector<int> physical_stream;  // per op
};

struct OpTiming {
  int op = 0;
  int stream = 0;
  int64_t start_ns = 0;  // since the start of the run
  int64_t end_ns = 0;
  int64_t release_ns = 0;  // time spent freeing the values this op read last
};

// A replay's private memory pool, as `fast.memory["pool"]` reports it.
struct PoolStats {
  bool planned = false;
  int64_t block_bytes = 0;   // the pool's memory, held between replays
  int requests = 0;          // allocations recorded inside ops
  int planned_requests = 0;  // of those, served from the block
  int buffers_moved = 0;     // buffer groups living in the block
  int served_last = 0;       // last replay: requests served from the block
  int fallbacks_last = 0;    // last replay: requests unlike the recording, or whose
                             // planned bytes were still held, served elsewhere
};

class Executor {
 public:
  virtual ~Executor() = default;
  virtual void run() = 0;
  // Same as run, recording when each op started and ended.
  virtual std::vector<OpTiming> run_timed() = 0;
  virtual std::string backend() const = 0;
  virtual int num_streams() const = 0;
  virtual const ScheduleInfo& schedule() const = 0;
  // Whether every output lives in memory the next replay overwrites (true for a graph
  // with a private pool), so that callers who keep outputs need copies. Such an executor
  // also keeps the state's output values in place from one replay to the next.
  virtual bool reuses_outputs() const { return false; }
  // Whether scalar arguments are fixed when the executor is built (a graph bakes them into
  // its kernels' parameters), so that new values need the executor built again.
  virtual bool bakes_scalars() const { return false; }
  // CPU: whether replays split nimble's kernels through their helper threads, the caller
  // claiming pieces with them, and run ATen's ops on the caller (cpu_executor.h).
  virtual bool shares_work() const { return false; }
  // The replay's private memory pool, if the backend keeps one.
  virtual std::optional<PoolStats> pool_stats() const { return std::nullopt; }
  // Whether `ptr` points into that pool (its bytes are then counted once, as the pool).
  virtual bool pool_owns(const void* /*ptr*/) const { return false; }
};

struct ExecutorOptions {
  // Physical streams (CPU worker threads, CUDA streams); 0 = the backend's default: on
  // the CPU as many as cores and logical streams allow, on CUDA the DAG's width (at
  // most kMaxDefaultCudaStreams).
  int streams = 1;
  int cores = 0;  // cores to plan for; 0 = what the machine has
  // A single-stream CPU replay allocates from a private pool planned from its first
  // replay (see runtime/cpu/replay_arena.h).
  bool memory_pool = true;
  // Tests: per op, microseconds to hold its stream before it runs (a sleep on a CPU
  // stream, a spinning kernel on a CUDA stream, captured with the graph). Delays that
  // reorder the streams' progress expose any order the schedule fails to enforce.
  std::vector<int> stress_delays_us;
  // Tests: run a CPU program with a CUDA graph's semantics (runtime/cpu/cpu_graph_executor.h),
  // so that what a graph would get wrong shows without a GPU.
  bool graph_twin = false;
  // CUDA: the memory pool every capture of one Replay allocates from (an at::cuda::MempoolId_t,
  // set by the Replay, not by users): a re-capture (a moved parameter, new scalars) reuses the
  // memory of the graph it replaces instead of stranding a private pool per capture. {0, 0}: a
  // pool of the graph's own.
  c10::MempoolId_t graph_pool{0, 0};
};

// A memory pool for the CUDA graphs of one replay of `program` (torch's graph_pool_handle);
// {0, 0} for programs that are not on CUDA.
c10::MempoolId_t new_graph_pool(const Program& program);

// Measured on googlenet on an H100: 2 streams gained 1.29x over one, 4 1.57x, 8 1.65x.
inline constexpr int kMaxDefaultCudaStreams = 8;

// The backend for the program's device: CUDA graphs for CUDA programs (when built with
// CUDA), threads-as-streams on the CPU. It runs `program` on `state`; both must outlive it.
std::unique_ptr<Executor> make_executor(const Program& program, ProgramState& state,
                                        const ExecutorOptions& options);

}  // namespace nimble

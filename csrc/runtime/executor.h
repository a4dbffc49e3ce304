#pragma once
// The runtime interface: an Executor runs every op of a Program once. Backends (CPU
// threads-as-streams, CUDA graphs) differ in how; the Replay around them owns inputs,
// outputs and locking.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "program/program.h"
#include "runtime/replay_arena.h"

namespace nimble {

// How the program's ops are spread over streams (see csrc/scheduling/).
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

class Executor {
 public:
  virtual ~Executor() = default;
  virtual void run(Program& program) = 0;
  // Same as run, recording when each op started and ended.
  virtual std::vector<OpTiming> run_timed(Program& program) = 0;
  virtual std::string backend() const = 0;
  virtual int num_streams() const = 0;
  virtual const ScheduleInfo& schedule() const = 0;
  // Whether every output lives in memory the next replay overwrites (true for a graph
  // with a private pool), so that callers who keep outputs need copies.
  virtual bool reuses_outputs() const { return false; }
  // The private memory pool of the replay, if it has one.
  virtual const ReplayArena* arena() const { return nullptr; }
};

struct ExecutorOptions {
  int streams = 1;  // physical streams (CPU worker threads); 0 = from cores and DAG width
  int cores = 0;    // cores to plan for; 0 = what the machine has
  // A single-stream CPU replay allocates from a private pool planned from its first
  // replay (see runtime/replay_arena.h).
  bool memory_pool = true;
};

// The backend for the program's device: CUDA graphs for CUDA programs (when built with
// CUDA), threads-as-streams on the CPU.
std::unique_ptr<Executor> make_executor(Program& program, const ExecutorOptions& options);

}  // namespace nimble

#pragma once
// The runtime interface: an Executor runs every op of a Program once. Backends (CPU
// threads-as-streams, CUDA graphs) differ in how; the Replay around them owns inputs,
// outputs and locking.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "program/program.h"

namespace nimble {

struct OpTiming {
  int op = 0;
  int stream = 0;
  int64_t start_ns = 0;  // since the start of the run
  int64_t end_ns = 0;
};

class Executor {
 public:
  virtual ~Executor() = default;
  virtual void run(Program& program) = 0;
  // Same as run, recording when each op started and ended.
  virtual std::vector<OpTiming> run_timed(Program& program) = 0;
  virtual std::string backend() const = 0;
  virtual int num_streams() const = 0;
};

}  // namespace nimble

#pragma once
// CPU backend: runs the program's ops on the calling thread, in trace order.
#include "runtime/executor.h"

namespace nimble {

class CpuExecutor final : public Executor {
 public:
  void run(Program& program) override;
  std::vector<OpTiming> run_timed(Program& program) override;
  std::string backend() const override { return "cpu"; }
  int num_streams() const override { return 1; }

 private:
  std::vector<c10::IValue> stack_;
};

}  // namespace nimble

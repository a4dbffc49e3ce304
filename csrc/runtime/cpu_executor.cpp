#include "runtime/cpu_executor.h"

#include <chrono>

#include "runtime/op_call.h"

namespace nimble {

void CpuExecutor::run(Program& program) {
  for (const OpNode& op : program.ops) call_op(op, program.values, stack_);
}

std::vector<OpTiming> CpuExecutor::run_timed(Program& program) {
  using Clock = std::chrono::steady_clock;
  std::vector<OpTiming> timings;
  timings.reserve(program.ops.size());
  const auto origin = Clock::now();
  auto since_origin = [&](Clock::time_point t) {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(t - origin).count();
  };
  for (size_t i = 0; i < program.ops.size(); ++i) {
    const OpNode& op = program.ops[i];
    push_args(op, program.values, stack_);
    const auto start = Clock::now();
    op.handle.redispatchBoxed(op.keys, &stack_);
    const auto end = Clock::now();
    keep_results(op, program.values, stack_);
    timings.push_back({static_cast<int>(i), 0, since_origin(start), since_origin(end)});
  }
  return timings;
}

}  // namespace nimble

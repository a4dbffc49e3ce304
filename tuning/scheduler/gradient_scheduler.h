#pragma once
// Ansor's gradient-based task scheduler (TVM auto_scheduler.TaskScheduler, objective = the
// weighted sum of task latencies): after one warm-up slot per task, the next slot goes to the
// task whose latency is expected to fall fastest,
//   grad_i = w_i * (alpha * backward_i + (1 - alpha) * forward_i),
// backward_i = the task's latency change over its last `backward_window` slots, forward_i the
// optimistic next-slot change min(best - best/slots, beta * flops / best group GFLOPS) - best,
// with an epsilon of random picks.
#include <random>

#include "tuning/scheduler/task_scheduler.h"

namespace nimble::tuning {

struct GradientSchedulerOptions {
  double alpha = 0.2;
  double beta = 2.0;
  int backward_window = 3;
  double eps_random = 0.05;
};

class GradientScheduler : public TaskScheduler {
 public:
  GradientScheduler(GradientSchedulerOptions options, uint64_t seed)
      : options_(options), rng_(seed) {}
  std::string name() const override { return "gradient"; }
  std::optional<size_t> choose(const SchedulerView& view) override;
  // The gradient of one task (negative: the latency is expected to fall); exposed for tests.
  double gradient(const SchedulerView& view, size_t task) const;

 private:
  GradientSchedulerOptions options_;
  std::mt19937_64 rng_;
};

}  // namespace nimble::tuning

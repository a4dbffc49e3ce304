#pragma once
// Ansor's gradient-based task scheduler (TVM auto_scheduler.TaskScheduler, objective = the
// weighted sum of task latencies): after one warm-up round per task, the next round goes to the
// task whose latency is expected to fall fastest,
//   grad_i = w_i * (alpha * backward_i + (1 - alpha) * forward_i),
// backward_i = the task's latency change over its last `backward_window` rounds, forward_i the
// optimistic next-round change min(best - best/rounds, beta * flops / best group GFLOPS) - best,
// with an epsilon of random picks (the paper's; TVM's code has none). A round is one batch of
// the task's search (TVM: `continue_search_one_round(num_measures_per_round)`, the warm-up
// round too), not a slot's worth of seconds: a time slot gave a cheap task several batches per
// decision and made the warm-up round most of the budget.
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
  bool one_batch_slots() const override { return true; }
  // The gradient of one task (negative: the latency is expected to fall); exposed for tests.
  double gradient(const SchedulerView& view, size_t task) const;

 private:
  GradientSchedulerOptions options_;
  std::mt19937_64 rng_;
};

}  // namespace nimble::tuning

#pragma once
// AutoTVM's order: tune task 0 until it is done (its trial budget is spent or it stops
// improving), then task 1, and so on.
#include "tuning/scheduler/task_scheduler.h"

namespace nimble::tuning {

class SequentialScheduler : public TaskScheduler {
 public:
  // trials_per_task <= 0: a task is only left when it finishes (early stopping).
  explicit SequentialScheduler(long trials_per_task) : trials_per_task_(trials_per_task) {}
  std::string name() const override { return "sequential"; }
  std::optional<size_t> choose(const SchedulerView& view) override;

 private:
  long trials_per_task_;
};

}  // namespace nimble::tuning

#pragma once
// Every live task in turn, one slot each.
#include "tuning/scheduler/task_scheduler.h"

namespace nimble::tuning {

class RoundRobinScheduler : public TaskScheduler {
 public:
  std::string name() const override { return "round-robin"; }
  std::optional<size_t> choose(const SchedulerView& view) override;

 private:
  size_t next_ = 0;
};

}  // namespace nimble::tuning

#pragma once
// Slots in proportion to each task's share of the model's FLOPs (flops x weight): the static
// allocation a scheduler can make knowing only the model, before any measurement.
#include "tuning/scheduler/task_scheduler.h"

namespace nimble::tuning {

class FlopLinearScheduler : public TaskScheduler {
 public:
  std::string name() const override { return "flop-linear"; }
  std::optional<size_t> choose(const SchedulerView& view) override;
};

}  // namespace nimble::tuning

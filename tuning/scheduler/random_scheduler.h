#pragma once
// A live task drawn uniformly at random for every slot.
#include <random>

#include "tuning/scheduler/task_scheduler.h"

namespace nimble::tuning {

class RandomScheduler : public TaskScheduler {
 public:
  explicit RandomScheduler(uint64_t seed) : rng_(seed) {}
  std::string name() const override { return "random"; }
  std::optional<size_t> choose(const SchedulerView& view) override;

 private:
  std::mt19937_64 rng_;
};

}  // namespace nimble::tuning

#include "tuning/scheduler/random_scheduler.h"

namespace nimble::tuning {

std::optional<size_t> RandomScheduler::choose(const SchedulerView& view) {
  const auto live = live_tasks(view);
  if (live.empty()) return std::nullopt;
  return live[std::uniform_int_distribution<size_t>(0, live.size() - 1)(rng_)];
}

}  // namespace nimble::tuning

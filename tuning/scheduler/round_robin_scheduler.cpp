#include "tuning/scheduler/round_robin_scheduler.h"

namespace nimble::tuning {

std::optional<size_t> RoundRobinScheduler::choose(const SchedulerView& view) {
  const size_t n = view.tasks.size();
  for (size_t k = 0; k < n; ++k) {
    const size_t i = (next_ + k) % n;
    if (!view.tasks[i].finished) {
      next_ = i + 1;
      return i;
    }
  }
  return std::nullopt;
}

}  // namespace nimble::tuning

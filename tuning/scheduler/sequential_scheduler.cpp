#include "tuning/scheduler/sequential_scheduler.h"

namespace nimble::tuning {

std::optional<size_t> SequentialScheduler::choose(const SchedulerView& view) {
  for (size_t i = 0; i < view.tasks.size(); ++i) {
    const TaskProgress& t = view.tasks[i];
    if (t.finished) continue;
    if (trials_per_task_ > 0 && t.trials >= trials_per_task_) continue;
    return i;
  }
  return std::nullopt;
}

}  // namespace nimble::tuning

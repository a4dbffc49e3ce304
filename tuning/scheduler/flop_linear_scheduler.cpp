#include "tuning/scheduler/flop_linear_scheduler.h"

#include <limits>

namespace nimble::tuning {

std::optional<size_t> FlopLinearScheduler::choose(const SchedulerView& view) {
  std::optional<size_t> pick;
  double lowest = std::numeric_limits<double>::infinity();
  for (const size_t i : live_tasks(view)) {
    const TaskProgress& t = view.tasks[i];
    // Slots received per unit of FLOP share: the most under-served task goes next.
    const double share = t.flops * t.weight;
    const double served = (static_cast<double>(t.slots) + 1.0) / (share > 0 ? share : 1e-30);
    if (served < lowest) {
      lowest = served;
      pick = i;
    }
  }
  return pick;
}

}  // namespace nimble::tuning

#include "tuning/scheduler/gradient_scheduler.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace nimble::tuning {

double GradientScheduler::gradient(const SchedulerView& view, size_t task) const {
  const TaskProgress& t = view.tasks[task];
  const double best = t.best_seconds;
  const std::vector<double>& history = *t.best_seconds_per_slot;
  const long count = t.slots;
  double backward = 0;
  if (count - 1 < static_cast<long>(history.size()) && count - 1 - options_.backward_window >= 0)
    backward = (history[count - 1] - history[count - 1 - options_.backward_window]) /
               options_.backward_window;
  const double next_1 = best - best / static_cast<double>(std::max<long>(count, 1));
  double next_2 = options_.beta * 1e30;
  // Tasks of a group (same operator kind) share what the fastest of them achieves.
  long group_size = 0;
  double group_gflops = 0;
  for (const auto& other : view.tasks) {
    if (t.group.empty() || other.group != t.group) continue;
    ++group_size;
    if (other.best_seconds > 0 && std::isfinite(other.best_seconds))
      group_gflops = std::max(group_gflops, other.flops / other.best_seconds);
  }
  if (group_size > 1 && group_gflops > 0) next_2 = options_.beta * t.flops / group_gflops;
  const double forward = std::min(next_1, next_2) - best;
  return t.weight * (options_.alpha * backward + (1 - options_.alpha) * forward);
}

std::optional<size_t> GradientScheduler::choose(const SchedulerView& view) {
  const auto live = live_tasks(view);
  if (live.empty()) return std::nullopt;
  // Warm-up: every task gets one slot before gradients mean anything.
  for (const size_t i : live)
    if (view.tasks[i].slots == 0 || !std::isfinite(view.tasks[i].best_seconds)) return i;
  if (std::uniform_real_distribution<double>(0, 1)(rng_) < options_.eps_random)
    return live[std::uniform_int_distribution<size_t>(0, live.size() - 1)(rng_)];
  std::vector<double> grads;
  for (const size_t i : live) grads.push_back(gradient(view, i));
  const auto [lo, hi] = std::minmax_element(grads.begin(), grads.end());
  if (*lo == *hi) return live[std::uniform_int_distribution<size_t>(0, live.size() - 1)(rng_)];
  return live[static_cast<size_t>(lo - grads.begin())];
}

}  // namespace nimble::tuning

#include "tuning/scheduler/dynatune_scheduler.h"

#include <algorithm>
#include <cmath>

namespace nimble::tuning {

double DynaTuneScheduler::predicted_reduction_ms(const SchedulerView& view, size_t task) const {
  if (task >= beliefs_.size() || !beliefs_[task].valid) return 0.0;
  const TaskProgress& t = view.tasks[task];
  const BeliefPrediction& b = beliefs_[task];
  const double predicted_gflops = (b.best + b.expected_improvement) * view.peak_gflops;
  if (predicted_gflops <= 0) return 0.0;
  const double predicted_seconds = std::min(t.best_seconds, t.flops / (predicted_gflops * 1e9));
  return t.weight * (t.best_seconds - predicted_seconds) * 1e3;
}

std::optional<double> DynaTuneScheduler::expected_gain_ms(const SchedulerView& view,
                                                          size_t task) const {
  if (task >= beliefs_.size() || !beliefs_[task].valid) return std::nullopt;
  return predicted_reduction_ms(view, task);
}

std::optional<double> DynaTuneScheduler::first_slot_reduction(const SchedulerView& view) const {
  std::optional<double> largest;
  for (const TaskProgress& t : view.tasks) {
    if (t.slots == 0 || !(t.baseline_seconds > 0) || !std::isfinite(t.baseline_seconds) ||
        t.best_seconds_per_slot == nullptr || t.best_seconds_per_slot->empty())
      continue;
    const double share = 1 - t.best_seconds_per_slot->front() / t.baseline_seconds;
    largest = std::max(largest.value_or(0.0), std::clamp(share, 0.0, 1.0));
  }
  return largest;
}

double DynaTuneScheduler::upper_confidence_bound(const SchedulerView& view, size_t task) const {
  const TaskProgress& t = view.tasks[task];
  const double round = static_cast<double>(std::max<long>(view.slot, 1));
  const double initial_ms = std::max(view.initial_model_seconds * 1e3, 1e-12);
  // The reward's range: no slot removes more than the task's latency at stake now.
  const double range =
      options_.bonus_scaled_by_stake ? t.weight * t.best_seconds * 1e3 / initial_ms : 1.0;
  if (t.slots == 0) {
    const std::optional<double> share =
        options_.finite_untried_bound ? first_slot_reduction(view) : std::nullopt;
    if (!share) return std::numeric_limits<double>::infinity();
    return t.weight * t.best_seconds * 1e3 * *share / initial_ms +
           range * std::sqrt(options_.c * std::log(round));
  }
  const double predicted = predicted_reduction_ms(view, task) / initial_ms;
  if (options_.no_bonus_when_only_cold_left && t.only_cold_left) return predicted;
  return predicted + range * std::sqrt(options_.c * std::log(round) / static_cast<double>(t.slots));
}

std::optional<size_t> DynaTuneScheduler::choose(const SchedulerView& view) {
  std::optional<size_t> pick;
  double best = -std::numeric_limits<double>::infinity();
  const std::vector<size_t> live = live_tasks(view);
  // The warm-up round: every untuned task's bound is infinite, and the paper leaves their order
  // open. Index order put a model's heaviest task wherever the program has it; taking the most
  // latency at stake first makes the model's latency fall fastest while the round lasts.
  const bool untried_unbounded = !options_.finite_untried_bound || !first_slot_reduction(view);
  for (const size_t i : live) {
    const TaskProgress& t = view.tasks[i];
    if (untried_unbounded && t.slots == 0 && t.weight * t.best_seconds > best) {
      best = t.weight * t.best_seconds;
      pick = i;
    }
  }
  if (pick) return pick;
  for (const size_t i : live) {
    const double u = upper_confidence_bound(view, i);
    if (u > best) {
      best = u;
      pick = i;
    }
  }
  return pick;
}

void DynaTuneScheduler::observe(size_t task, const SchedulerView& view) {
  if (beliefs_.size() < view.tasks.size()) beliefs_.resize(view.tasks.size());
  if (chains_.size() < view.tasks.size()) chains_.resize(view.tasks.size());
  const TaskProgress& t = view.tasks[task];
  std::vector<double> normalized(*t.best_gflops_history);
  for (double& v : normalized) v /= view.peak_gflops;
  beliefs_[task] = predict_belief(
      normalized, static_cast<int>(std::max<long>(t.last_slot_trials, 1)), options_.belief, rng_,
      options_.belief.warm_steps > 0 ? &chains_[task] : nullptr);
}

bool DynaTuneScheduler::slot_ends_when_flat(size_t task, const SchedulerView& view) const {
  return options_.warm_up_ends_when_flat && view.tasks[task].slots == 0;
}

}  // namespace nimble::tuning

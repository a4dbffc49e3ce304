#pragma once
// DynaTune (Zhang et al., ICLR 2021): tuning time is cut into fixed slots and each slot goes to
// the task with the highest upper confidence bound on the model-latency reduction one more slot
// would bring,
//   u_k = w_k * (latency_k now - latency_k predicted) / L_0 + sqrt(C * ln t / c_k),
// where the prediction is the current best GFLOPS plus the expected improvement of the task's
// Bayesian belief model (belief_model.h). Tasks never tuned come first (u = gamma = infinity),
// the one with the most latency at stake (occurrences x current latency) first among them.
// The reduction is a share of the model's initial latency L_0 (the paper's is in ms), so that
// C means the same for a 5 ms model as for a 50 ms one: in ms, a constant set on simulated
// models of tens of ms explored so much on resnet18's 10 ms that DynaTune was round-robin.
#include <cmath>
#include <limits>
#include <random>

#include "tuning/belief/belief_model.h"
#include "tuning/scheduler/task_scheduler.h"

namespace nimble::tuning {

struct DynaTuneOptions {
  // Exploration constant, rewards being shares of the initial model latency and the bonus
  // scaled by each task's stake (below). Chosen on the lowered traces of resnet18 and
  // mobilenet_v2, seeds 0-4, and checked on seeds 5-9 and on googlenet and shufflenet_v2
  // (docs/numbers.md, "Schedulers on real kernels"); 3e-5 before the scaling.
  double c = 0.01;
  // A warm-up slot ends at its first batch that does not improve its task's best. A first
  // slot only has to take a task's easy early gains and start its curve for the belief; on a
  // model of many small tasks a full slot each made the warm-up round most of the time to
  // 99% (chosen on mnasnet0_5 and mobilenet_v3_small, docs/numbers.md "Warm-up slots").
  bool warm_up_ends_when_flat = true;
  // An untried task's bound: the paper's gamma, infinite, makes the warm-up a full round over
  // every task before any belief is used; on a budget that holds about one round (a real
  // model's 15-30 tasks, a third of what finishing them takes) the bandit never decides. Once
  // one task has been tried, an untried one's bound is instead optimistic and finite: its
  // latency at stake times the largest reduction any task's first slot achieved (a share of
  // its start), plus the bonus of a task tried once (docs/tuning.md, "DynaTune").
  bool finite_untried_bound = true;
  // The exploration bonus times the reward's range, the task's latency at stake (weight x
  // current latency, a share of the initial model latency), as Hoeffding's bound for rewards in
  // [0, range] has it. Unscaled, a bonus of 1% of the model went to a task with 0.3% at stake
  // as much as to one with 20%: on flat beliefs DynaTune became round-robin over tiny tasks.
  bool bonus_scaled_by_stake = true;
  // No exploration bonus for a task whose search has only cold candidates left
  // (TaskProgress::only_cold_left): its UCB is what its belief predicts. The bonus is scaled by
  // the task's stake, so a task whose best is far ahead of the rest of its space (resnet18's
  // 512-channel convolutions once oneDNN was found) drew slot after slot of cold candidates:
  // DynaTune's cold share was 24% there (docs/numbers.md, "Schedulers on real kernels").
  bool no_bonus_when_only_cold_left = true;
  BeliefOptions belief;
};

class DynaTuneScheduler : public TaskScheduler {
 public:
  DynaTuneScheduler(DynaTuneOptions options, uint64_t seed) : options_(options), rng_(seed) {}
  std::string name() const override { return "dynatune"; }
  std::optional<size_t> choose(const SchedulerView& view) override;
  void observe(size_t task, const SchedulerView& view) override;
  bool slot_ends_when_flat(size_t task, const SchedulerView& view) const override;
  std::optional<double> expected_gain_ms(const SchedulerView& view, size_t task) const override;

  // Predicted weighted latency reduction (ms) of one more slot of `task`, from its belief.
  double predicted_reduction_ms(const SchedulerView& view, size_t task) const;
  double upper_confidence_bound(const SchedulerView& view, size_t task) const;
  // The largest share of its start's latency any tried task's first slot removed; nothing
  // before a task with a known start has been tried.
  std::optional<double> first_slot_reduction(const SchedulerView& view) const;
  const std::vector<BeliefPrediction>& beliefs() const { return beliefs_; }

 private:
  DynaTuneOptions options_;
  std::mt19937_64 rng_;
  std::vector<BeliefPrediction> beliefs_;  // rested arms: refreshed only when a task is tuned
  std::vector<BeliefChain> chains_;        // each task's last fit, where its next one starts
};

}  // namespace nimble::tuning

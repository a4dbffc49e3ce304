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
  // Exploration constant, rewards being shares of the initial model latency. Chosen on the
  // simulator's seeds 0-9 and checked on ten other seeds and on real models
  // (docs/numbers.md, "The tuner on the simulator").
  double c = 3e-5;
  // A warm-up slot ends at its first batch that does not improve its task's best. A first
  // slot only has to take a task's easy early gains and start its curve for the belief; on a
  // model of many small tasks a full slot each made the warm-up round most of the time to
  // 99% (chosen on mnasnet0_5 and mobilenet_v3_small, docs/numbers.md "Warm-up slots").
  bool warm_up_ends_when_flat = true;
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
  const std::vector<BeliefPrediction>& beliefs() const { return beliefs_; }

 private:
  DynaTuneOptions options_;
  std::mt19937_64 rng_;
  std::vector<BeliefPrediction> beliefs_;  // rested arms: refreshed only when a task is tuned
};

}  // namespace nimble::tuning

#pragma once
// Times candidates of a synthetic landscape the way a real measurer would cost: a build, then
// timed repeats, each repeat at least `min_repeat_seconds` long (AutoTVM's min_repeat_ms) and
// noisy. The tuning time a candidate consumed is simulated, so runs are fast and reproducible.
#include <memory>
#include <random>

#include "tuning/measure/measurer.h"
#include "tuning/simulator/synthetic_landscape.h"

namespace nimble::tuning {

class SimulatedMeasurer : public Measurer {
 public:
  // With `batch_keyed_noise`, a batch's noise is drawn from a stream seeded by the seed and the
  // batch's configs rather than from one stream across batches: the timings of a batch then
  // do not depend on what this measurer timed before, so any worker, or a retry, times it
  // the same.
  SimulatedMeasurer(std::shared_ptr<const SyntheticLandscape> landscape, uint64_t seed,
                    double min_repeat_seconds = 0.05, bool batch_keyed_noise = false)
      : landscape_(std::move(landscape)),
        seed_(seed),
        rng_(seed),
        min_repeat_seconds_(min_repeat_seconds),
        batch_keyed_noise_(batch_keyed_noise) {}
  std::vector<MeasureResult> measure(const std::vector<Config>& batch,
                                     const RepeatPolicy& repeats) override;
  const SyntheticLandscape& landscape() const { return *landscape_; }

 private:
  std::shared_ptr<const SyntheticLandscape> landscape_;
  uint64_t seed_;
  std::mt19937_64 rng_;
  double min_repeat_seconds_;
  bool batch_keyed_noise_;
  double timeout_cost_seconds_ = 4.0;  // AutoTVM's default runner timeout
};

}  // namespace nimble::tuning

#include "tuning/simulator/simulated_measurer.h"

#include <algorithm>
#include <cmath>

namespace nimble::tuning {

std::vector<MeasureResult> SimulatedMeasurer::measure(const std::vector<Config>& batch,
                                                      const RepeatPolicy& repeats) {
  if (batch_keyed_noise_) {
    uint64_t key = seed_;
    for (const Config& c : batch) key = key * 1000003ULL ^ ConfigHash {}(c);
    rng_.seed(key);
  }
  const LandscapeSpec& spec = landscape_->spec();
  std::normal_distribution<double> normal(0, spec.noise);
  std::uniform_real_distribution<double> uniform(0, 1);
  std::vector<MeasureResult> out(batch.size());
  for (size_t i = 0; i < batch.size(); ++i) {
    MeasureResult& r = out[i];
    const LandscapeTruth truth = landscape_->evaluate(batch[i]);
    r.cost_seconds = spec.compile_seconds;
    switch (truth.error) {
      case MeasureError::kCompile:
        r.error = truth.error;
        r.message = "simulated compile error";
        continue;
      case MeasureError::kRuntime:
        r.error = truth.error;
        r.message = "simulated launch failure: tile exceeds shared memory";
        r.cost_seconds += min_repeat_seconds_;
        continue;
      case MeasureError::kTimeout:
        r.error = truth.error;
        r.message = "simulated timeout";
        r.cost_seconds += timeout_cost_seconds_;  // the runner waits out its time limit
        continue;
      case MeasureError::kNone:
        break;
    }
    time_with_policy(
        repeats,
        [&] {
          double t = truth.seconds * std::exp(normal(rng_));
          if (uniform(rng_) < 0.02) t *= 1.3;  // an occasional disturbed run
          // A repeat runs the kernel often enough to last at least min_repeat_seconds (AutoTVM's
          // min_repeat_ms), once when a single run is longer.
          const double cost = std::max(min_repeat_seconds_, t);
          r.cost_seconds += cost;
          return TimedRepeat{t, cost};
        },
        r);
  }
  return out;
}

}  // namespace nimble::tuning

#pragma once
// Small tasks with known landscapes for the tuner's tests.
#include <cmath>
#include <functional>
#include <memory>
#include <random>

#include "tuning/task/task.h"

namespace nimble::tuning::testing {

// Times configs with a closed-form latency; configs for which `fails` holds fail to compile.
class FormulaMeasurer : public Measurer {
 public:
  using Latency = std::function<double(const Config&)>;
  using Fails = std::function<bool(const Config&)>;
  FormulaMeasurer(Latency latency, Fails fails, double noise, uint64_t seed)
      : latency_(std::move(latency)), fails_(std::move(fails)), noise_(noise), rng_(seed) {}
  std::vector<MeasureResult> measure(const std::vector<Config>& batch,
                                     const RepeatPolicy& repeats) override {
    std::vector<MeasureResult> out(batch.size());
    std::normal_distribution<double> normal(0, noise_);
    for (size_t i = 0; i < batch.size(); ++i) {
      ++measured_;
      out[i].cost_seconds = 1.0;
      if (fails_ && fails_(batch[i])) {
        out[i].error = MeasureError::kCompile;
        out[i].message = "test failure";
        continue;
      }
      const double t = latency_(batch[i]);
      time_with_policy(
          repeats,
          [&] {
            out[i].cost_seconds += 0.1;
            return t * std::exp(normal(rng_));
          },
          out[i]);
    }
    return out;
  }
  long measured() const { return measured_; }

 private:
  Latency latency_;
  Fails fails_;
  double noise_;
  std::mt19937_64 rng_;
  long measured_ = 0;
};

// Two power-of-two knobs and a categorical one; the optimum is x=16, y=4, mode=fast.
inline Task bowl_task(const std::string& name, double flops, double weight, uint64_t seed,
                      double noise = 0.02) {
  Task t;
  t.name = name;
  t.signature = "test/" + name;
  t.space.add_knob(Knob::power_of_two_range("x", 1, 64));
  t.space.add_knob(Knob::power_of_two_range("y", 1, 64));
  t.space.add_knob(Knob::categorical("mode", {"slow", "fast", "medium"}));
  t.space.add_product_at_most({"x", "y"}, 1024);
  t.flops = flops;
  t.weight = weight;
  const double best_seconds = flops / 100e9;  // 100 GFLOPS at the optimum
  t.baseline_seconds = 5 * best_seconds;
  t.measurer = std::make_shared<FormulaMeasurer>(
      [best_seconds](const Config& c) {
        const double dx = c[0] - 4.0;
        const double dy = c[1] - 2.0;
        const double mode = c[2] == 1 ? 1.0 : (c[2] == 2 ? 1.5 : 3.0);
        return best_seconds * mode * (1 + 0.3 * dx * dx + 0.3 * dy * dy);
      },
      [](const Config& c) { return c[0] == 6 && c[1] == 0; }, noise, seed);
  return t;
}

}  // namespace nimble::tuning::testing

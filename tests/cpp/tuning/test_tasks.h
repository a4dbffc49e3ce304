#pragma once
// Small tasks with known landscapes for the tuner's tests.
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "tuning/task/task.h"
#include "tuning/tuner/model_tuner.h"

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
            return TimedRepeat{t * std::exp(normal(rng_)), 0.1};
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

// A fresh database path of this process for one test (`suite` keeps suites apart).
inline std::string temp_db(const std::string& suite, const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("nimble_" + suite + "_" + std::to_string(::getpid()) + "_" + name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return (dir / "tuning.db").string();
}

// A quick, reproducible tuner: small annealing, no search time charged, no survey stop.
inline TunerOptions small_options(long budget_trials) {
  TunerOptions o;
  o.slot_seconds = 20;
  o.budget_trials = budget_trials;
  o.charge_search_time = false;
  o.survey.stop_on_rate = false;
  o.search.annealing.chains = 16;
  o.search.annealing.steps = 10;
  return o;
}

inline std::vector<Task> three_tasks() {
  return {bowl_task("a", 1e9, 1, 1), bowl_task("b", 4e9, 2, 2), bowl_task("c", 2e8, 3, 3)};
}

}  // namespace nimble::tuning::testing

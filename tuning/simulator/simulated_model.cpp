#include "tuning/simulator/simulated_model.h"

#include <cmath>
#include <memory>
#include <random>
#include <stdexcept>

#include "tuning/simulator/simulated_measurer.h"
#include "tuning/simulator/synthetic_landscape.h"

namespace nimble::tuning {

std::vector<Task> make_simulated_model(const SimulatedModelOptions& options) {
  std::mt19937_64 rng(options.seed * 1000003ULL + 7);
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<Task> tasks;
  for (int i = 0; i < options.tasks; ++i) {
    LandscapeSpec spec;
    spec.name = "sim" + std::to_string(i);
    spec.flops = 2e7 * std::pow(100.0, u(rng));  // 2e7 .. 2e9 FLOPs
    spec.ceiling_fraction = 0.1 + 0.6 * u(rng);
    spec.noise = 0.02 + 0.08 * u(rng);
    spec.compile_seconds = 0.3 + 0.9 * u(rng);
    spec.compile_failure_rate = 0.02 + 0.06 * u(rng);
    // Jumps are occasional: about half of the tasks have a hidden faster region.
    const double jump = 1.2 + 0.6 * u(rng);
    spec.jump_factor = u(rng) < 0.5 ? jump : 1.0;
    spec.seed = options.seed * 131 + static_cast<uint64_t>(i);
    auto landscape = std::make_shared<const SyntheticLandscape>(spec, options.peak_gflops);
    Task t;
    t.name = spec.name;
    t.signature = "simulated/seed" + std::to_string(options.seed) + "/task" + std::to_string(i);
    t.group = i % 3 == 0 ? "conv" : (i % 3 == 1 ? "dense" : "depthwise");
    t.space = landscape->space();
    t.flops = spec.flops;
    t.weight = 1 + std::floor(4 * u(rng));
    // The untuned kernel is 3-10x slower than the best schedule.
    t.baseline_seconds = landscape->optimum_seconds() * (3 + 7 * u(rng));
    t.measurer = std::make_shared<SimulatedMeasurer>(
        landscape, options.noise_seed * 1000033ULL + options.seed * 977 + static_cast<uint64_t>(i),
        0.05, options.batch_keyed_noise);
    tasks.push_back(std::move(t));
  }
  return tasks;
}

namespace {

SimulatedModelOptions with_batch_keyed_noise(SimulatedModelOptions options) {
  options.batch_keyed_noise = true;
  return options;
}

}  // namespace

SimulatedModelMeasurer::SimulatedModelMeasurer(const SimulatedModelOptions& options)
    : tasks_(make_simulated_model(with_batch_keyed_noise(options))) {
  for (size_t i = 0; i < tasks_.size(); ++i) by_signature_[tasks_[i].signature] = i;
}

SimulatedModelMeasurer::SimulatedModelMeasurer(uint64_t seed, int tasks, double peak_gflops)
    : SimulatedModelMeasurer([&] {
        SimulatedModelOptions o;
        o.seed = seed;
        o.tasks = tasks;
        o.peak_gflops = peak_gflops;
        return o;
      }()) {}

std::vector<std::string> SimulatedModelMeasurer::signatures() const {
  std::vector<std::string> out;
  for (const Task& t : tasks_) out.push_back(t.signature);
  return out;
}

std::vector<MeasureResult> SimulatedModelMeasurer::measure(const std::string& signature,
                                                           const std::vector<Config>& configs,
                                                           const RepeatSettings& repeats) {
  const auto it = by_signature_.find(signature);
  if (it == by_signature_.end())
    throw std::invalid_argument("no simulated task with signature '" + signature + "'");
  return tasks_[it->second].measurer->measure(configs, *make_repeat_policy(repeats));
}

}  // namespace nimble::tuning

#include "tuning/simulator/simulation.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <thread>

namespace nimble::tuning {
namespace {

// Median of the defined values (a ratio of two "never reached" times is undefined).
double median(std::vector<double> v) {
  v.erase(std::remove_if(v.begin(), v.end(), [](double x) { return std::isnan(x); }), v.end());
  if (v.empty()) return std::nan("");
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

}  // namespace

SimulationOptions default_simulation_options() {
  SimulationOptions o;
  o.tuner.charge_search_time = false;
  o.tuner.slot_seconds = 20;
  // AutoTVM-like per-task tails: a task is finished after 200 trials without improvement.
  o.tuner.early_stop_trials = 200;
  o.tuner.device = "simulated";
  // Compared runs spend the same budget; the survey stop is opt-in here.
  o.tuner.survey.stop_on_rate = false;
  return o;
}

TuningReport run_simulation(const SimulationOptions& options, TuningDatabase* database,
                            const ProgressCallback& progress, MeasurePool* pool) {
  SimulationOptions o = options;
  o.model.peak_gflops = o.tuner.peak_gflops;
  if (o.tuner.budget_trials == 0 && !std::isfinite(o.tuner.budget_seconds))
    o.tuner.budget_trials = o.trials_per_task * o.model.tasks;
  if (o.scheduler_options.sequential_trials_per_task == 0)
    o.scheduler_options.sequential_trials_per_task = o.trials_per_task;
  if (o.scheduler_options.seed == 0) o.scheduler_options.seed = o.model.seed * 31 + 5;
  if (o.tuner.seed == 0) o.tuner.seed = o.model.seed + 1;
  auto scheduler = make_scheduler(o.scheduler, o.scheduler_options);
  ModelTuner tuner(make_simulated_model(o.model), o.tuner, database);
  return tuner.run(*scheduler, progress, pool);
}

Comparison compare_schedulers(const std::vector<std::string>& schedulers,
                              const std::vector<uint64_t>& seeds, const SimulationOptions& base,
                              int threads) {
  Comparison out;
  for (const auto seed : seeds)
    for (const auto& name : schedulers) out.runs.push_back({name, seed, {}, 0, 0});
  std::atomic<size_t> next{0};
  const auto work = [&] {
    for (size_t i = next++; i < out.runs.size(); i = next++) {
      SimulationOptions o = base;
      o.scheduler = out.runs[i].scheduler;
      o.model.seed = out.runs[i].seed;
      out.runs[i].report = run_simulation(o);
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < std::max(1, threads); ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();

  // Reference per seed: the best final latency any scheduler reached on that model.
  std::map<uint64_t, double> reference;
  for (const auto& r : out.runs) {
    auto [it, inserted] = reference.emplace(r.seed, r.report.final_model_seconds);
    if (!inserted) it->second = std::min(it->second, r.report.final_model_seconds);
  }
  std::map<uint64_t, double> sequential_99;
  for (auto& r : out.runs) {
    r.time_to_95 = time_to_reach(r.report.curve, reference[r.seed] / 0.95);
    r.time_to_99 = time_to_reach(r.report.curve, reference[r.seed] / 0.99);
    if (r.scheduler == "sequential") sequential_99[r.seed] = r.time_to_99;
  }
  for (const auto& name : schedulers) {
    std::vector<double> t95, t99, final_ms, speedup, overhead, per_slot, cold;
    for (const auto& r : out.runs) {
      if (r.scheduler != name) continue;
      t95.push_back(r.time_to_95);
      t99.push_back(r.time_to_99);
      final_ms.push_back(r.report.final_model_seconds * 1e3);
      if (sequential_99.count(r.seed)) speedup.push_back(sequential_99[r.seed] / r.time_to_99);
      const double slots = static_cast<double>(std::max<long>(r.report.slots, 1));
      // Over the tuning time, as the command line reports it: slots that end early (their
      // task finished) count for what they took, not for their nominal length.
      overhead.push_back(r.report.scheduler_wall_seconds / std::max(r.report.tuning_seconds, 1e-9));
      per_slot.push_back(r.report.scheduler_wall_seconds / slots * 1e3);
      cold.push_back(r.report.cold_time_share);
    }
    out.rows.push_back({name, median(t95), median(t99), median(final_ms), median(speedup),
                        median(overhead), median(per_slot), median(cold)});
  }
  return out;
}

std::string comparison_table(const Comparison& c) {
  std::string out =
      "| scheduler | time to 95% (s) | time to 99% (s) | final latency (ms) | speedup to 99% vs "
      "sequential | scheduler overhead (% of tuning time) | scheduler ms/slot | cold time share |\n"
      "|---|---|---|---|---|---|---|---|\n";
  char line[256];
  for (const auto& r : c.rows) {
    std::snprintf(line, sizeof line,
                  "| %s | %.0f | %.0f | %.3f | %.2fx | %.3f%% | %.2f | %.1f%% |\n",
                  r.scheduler.c_str(), r.median_time_to_95, r.median_time_to_99, r.median_final_ms,
                  r.median_speedup_vs_sequential, 100 * r.median_overhead_share,
                  r.median_scheduler_ms_per_slot, 100 * r.median_cold_time_share);
    out += line;
  }
  return out;
}

}  // namespace nimble::tuning

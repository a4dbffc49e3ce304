#pragma once
// Tuning runs on simulated models: one scheduler on one model, or every scheduler on the same
// models side by side (the benchmark behind `python -m nimble tune --simulate --compare`).
#include <string>
#include <vector>

#include "tuning/database/tuning_database.h"
#include "tuning/scheduler/scheduler_factory.h"
#include "tuning/simulator/simulated_model.h"
#include "tuning/tuner/model_tuner.h"

namespace nimble::tuning {

struct SimulationOptions {
  std::string scheduler = "dynatune";
  SimulatedModelOptions model;
  TunerOptions tuner;
  SchedulerOptions scheduler_options;
  // Trial budget per task when tuner.budget_trials is 0; also the sequential scheduler's
  // per-task share, as an AutoTVM user would set n_trial.
  long trials_per_task = 400;
};

// Simulations default to what makes runs comparable and reproducible: measurement time only.
SimulationOptions default_simulation_options();

// `pool`: measure there (e.g. on workers holding a SimulatedModelMeasurer of the same model)
// instead of in this process.
TuningReport run_simulation(const SimulationOptions& options, TuningDatabase* database = nullptr,
                            const ProgressCallback& progress = {}, MeasurePool* pool = nullptr);

struct ComparisonRun {
  std::string scheduler;
  uint64_t seed = 0;
  TuningReport report;
  double time_to_95 = 0;  // tuning seconds until 95% of the seed's best final latency
  double time_to_99 = 0;
};

struct ComparisonRow {
  std::string scheduler;
  double median_time_to_95 = 0;
  double median_time_to_99 = 0;
  double median_final_ms = 0;
  double median_speedup_vs_sequential = 0;  // sequential's time to 99% / this one's, per seed
  double median_overhead_share = 0;         // scheduler wall time / tuning time
  double median_scheduler_ms_per_slot = 0;
  double median_cold_time_share = 0;
};

struct Comparison {
  std::vector<ComparisonRow> rows;
  std::vector<ComparisonRun> runs;
};

// Every scheduler on the model of every seed; `threads` runs go in parallel.
Comparison compare_schedulers(const std::vector<std::string>& schedulers,
                              const std::vector<uint64_t>& seeds, const SimulationOptions& base,
                              int threads = 1);

std::string comparison_table(const Comparison& comparison);  // Markdown

}  // namespace nimble::tuning

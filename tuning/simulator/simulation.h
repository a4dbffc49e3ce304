#pragma once
// Tuning runs on simulated models: one scheduler on one model, or every scheduler on the same
// models side by side (the benchmark behind `python -m nimble tune --simulate --compare`).
#include <memory>
#include <string>
#include <vector>

#include "tuning/database/tuning_database.h"
#include "tuning/scheduler/scheduler_factory.h"
#include "tuning/simulator/simulated_model.h"
#include "tuning/simulator/trace.h"
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
  // Replay this recorded model instead of a synthetic one; model.seed then seeds only the
  // measurement noise (and the search and scheduler), model.tasks is ignored.
  std::shared_ptr<const Trace> trace;
};

// What finishing every task of the trace takes: the tuning time of a run with no budget, the
// sequential scheduler, noise seed 0 and `options`' search, until every task reached its early
// stop or used up its space ("all tasks finished"). A property of the trace and the search, the
// same for every seed and scheduler of a comparison.
double trace_finishing_seconds(const Trace& trace, const SimulationOptions& options);

// The budget a comparison on a trace gets unless told otherwise: a quarter of finishing every
// task (trace_finishing_seconds), so that it is at most a third of what finishing takes any
// run, whatever its scheduler and seed (issue 44's "budgets that run out"): finishing varies by
// up to a quarter between seeds and schedulers (search order, and what the tasks teach each
// other), and on the four lowered traces every run's finishing is 3.3-4.5x this budget
// (docs/numbers.md). A third of measuring every recorded configuration, the rule before, was
// 0.35-0.41 of finishing on resnet18's lowered trace; it stays as a cap, for spaces of a few
// configurations where finishing takes longer than measuring each once.
double default_trace_budget_seconds(const Trace& trace, const SimulationOptions& options);

// The slot a run on a trace gets when its options give none (slot_seconds <= 0): what one batch
// of the search costs on the trace's median task (batch_size candidates at the evaluator's
// minimum repeats, each at its task's mean recorded cost). DynaTune's slots are a fixed number
// of trials (its L); a batch is the least a search can be given, and a budget of a third of the
// trace holds about three batches a task, so any longer slot makes the round every scheduler
// gives each task before it can compare them take most of the budget. Every scheduler of a
// comparison gets the same slot.
double default_trace_slot_seconds(const Trace& trace, const SimulationOptions& options);

// Simulations default to what makes runs comparable and reproducible: measurement time only.
SimulationOptions default_simulation_options();

// `pool`: measure there (e.g. on workers holding a SimulatedModelMeasurer of the same model)
// instead of in this process.
// `remeasured`: on a trace, filled with the run's curve at recorded (noise-free) latencies: after
// every measured batch, each task at the recorded median of its best configuration so far.
TuningReport run_simulation(const SimulationOptions& options, TuningDatabase* database = nullptr,
                            const ProgressCallback& progress = {}, MeasurePool* pool = nullptr,
                            std::vector<CurvePoint>* remeasured = nullptr);

struct ComparisonRun {
  std::string scheduler;
  uint64_t seed = 0;
  TuningReport report;
  double time_to_95 = 0;  // tuning seconds until 95% of the reference latency
  double time_to_99 = 0;
  // On a trace: the run's curve and final latency re-measured (see run_simulation), on which
  // the times to 95%/99% are taken.
  std::vector<CurvePoint> remeasured_curve;
  double remeasured_final_seconds = 0;
};

struct ComparisonRow {
  std::string scheduler;
  double median_time_to_95 = 0;
  double median_time_to_99 = 0;
  double median_final_ms = 0;
  double median_speedup_vs_sequential = 0;  // sequential's time to 99% / this one's, per seed
  double median_overhead_share = 0;         // scheduler CPU time / tuning time
  double median_scheduler_ms_per_slot = 0;
  double median_cold_time_share = 0;
  // Spread over seeds: the fastest and the slowest seed (infinity: some seed never got there).
  double min_time_to_95 = 0, max_time_to_95 = 0;
  double min_time_to_99 = 0, max_time_to_99 = 0;
  int unfinished_runs = 0;  // runs that stopped with tasks unfinished (a budget ran out)
};

struct Comparison {
  std::vector<ComparisonRow> rows;
  std::vector<ComparisonRun> runs;
  // The latency runs are scored against: on a synthetic model each seed's best final latency;
  // on a trace the best re-measured final latency of any run, the same for every seed (a
  // lucky noise draw must not set a bar that no run really reached).
  double trace_reference_seconds = 0;
  // On a trace: the best re-measured final of this comparison's own runs (the reference unless
  // one was given).
  double own_reference_seconds = 0;
  double budget_seconds = 0;  // on a trace: the budget the runs had
  double slot_seconds = 0;    // the slot they had
};

// Every scheduler on the model of every seed; `threads` runs go in parallel.
// `reference_seconds` (> 0, on a trace): score against it instead of the best of these runs, so
// that variants compared on one seed set share one bar: the best of one call's runs moves with
// the variant (a variant whose best run is worse gets an easier bar).
Comparison compare_schedulers(const std::vector<std::string>& schedulers,
                              const std::vector<uint64_t>& seeds, const SimulationOptions& base,
                              int threads = 1, double reference_seconds = 0);

std::string comparison_table(const Comparison& comparison);  // Markdown

}  // namespace nimble::tuning

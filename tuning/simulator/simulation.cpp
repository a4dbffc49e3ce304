#include "tuning/simulator/simulation.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <thread>

#include "tuning/simulator/trace_measurer.h"

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

double smallest(const std::vector<double>& v) {
  return v.empty() ? std::nan("") : *std::min_element(v.begin(), v.end());
}

double largest(const std::vector<double>& v) {
  return v.empty() ? std::nan("") : *std::max_element(v.begin(), v.end());
}

// A measure callback that keeps, after every batch, the model's latency with each task at the
// recorded median of its search's best configuration: the tuner's curve without its noise.
MeasureCallback remeasure_into(const Trace& trace, std::shared_ptr<const TraceTruth> truth,
                               std::vector<double>& latencies) {
  auto index = std::make_shared<std::map<std::string, size_t>>();
  auto weights = std::make_shared<std::vector<double>>();
  auto current = std::make_shared<std::vector<double>>();
  for (size_t i = 0; i < trace.tasks.size(); ++i) {
    (*index)[trace.tasks[i].signature] = i;
    weights->push_back(trace.tasks[i].weight);
    current->push_back(truth->task_seconds(i, {}));
  }
  return [index, weights, truth, current, &latencies](const MeasuredBatch& batch) {
    const size_t k = index->at(batch.task.signature);
    if (batch.search.has_best()) (*current)[k] = truth->task_seconds(k, batch.search.best_config());
    double total = 0;
    for (size_t i = 0; i < current->size(); ++i) total += (*weights)[i] * (*current)[i];
    latencies.push_back(total);
  };
}

int minimum_repeats(const SimulationOptions& options) {
  return std::max(1, options.tuner.adaptive_evaluator ? options.tuner.evaluator.min_repeats
                                                      : options.tuner.fixed_repeats);
}

}  // namespace

double trace_finishing_seconds(const Trace& trace, const SimulationOptions& options) {
  SimulationOptions o = options;
  o.trace = std::make_shared<const Trace>(trace);
  o.scheduler = "sequential";
  o.model.seed = 0;
  o.tuner.seed = 0;
  o.scheduler_options.seed = 0;
  o.tuner.budget_trials = 0;
  // Finishing at the evaluator's precision, without the repeats' cost limit: the budget stays
  // a property of the trace, so that a run with any limit is compared on the same budget.
  o.tuner.repeat_cost_slot_share = 0;
  // Finite, so that run_simulation does not ask for the default; more than any task can use.
  o.tuner.budget_seconds = 1e3 * exhaustive_seconds(trace, minimum_repeats(options)) + 1;
  // Sequential's per-task trial cap would end a task before its early stop.
  o.scheduler_options.sequential_trials_per_task = std::numeric_limits<long>::max() / 2;
  return run_simulation(o).tuning_seconds;
}

double default_trace_budget_seconds(const Trace& trace, const SimulationOptions& options) {
  // Where finishing takes longer than measuring everything once (spaces of a few configs at
  // many repeats), a third of the latter, so that runs still cannot measure every config.
  return std::min(trace_finishing_seconds(trace, options) / 4,
                  exhaustive_seconds(trace, minimum_repeats(options)) / 3);
}

double default_trace_slot_seconds(const Trace& trace, const SimulationOptions& options) {
  std::vector<double> batch;
  for (const TraceTask& t : trace.tasks)
    batch.push_back(task_exhaustive_seconds(t, minimum_repeats(options)) /
                    static_cast<double>(std::max<size_t>(t.points.size(), 1)) *
                    std::max(1, options.tuner.search.batch_size));
  const double slot = median(batch);
  return std::isfinite(slot) && slot > 0 ? slot : options.tuner.slot_seconds;
}

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
                            const ProgressCallback& progress, MeasurePool* pool,
                            std::vector<CurvePoint>* remeasured) {
  SimulationOptions o = options;
  o.model.peak_gflops = o.tuner.peak_gflops;
  if (o.trace) o.model.tasks = static_cast<int>(o.trace->tasks.size());
  if (o.trace && o.tuner.budget_trials == 0 && !std::isfinite(o.tuner.budget_seconds))
    o.tuner.budget_seconds = default_trace_budget_seconds(*o.trace, o);
  if (o.trace && !(o.tuner.slot_seconds > 0))
    o.tuner.slot_seconds = default_trace_slot_seconds(*o.trace, o);
  if (o.tuner.budget_trials == 0 && !std::isfinite(o.tuner.budget_seconds))
    o.tuner.budget_trials = o.trials_per_task * o.model.tasks;
  if (o.scheduler_options.sequential_trials_per_task == 0)
    o.scheduler_options.sequential_trials_per_task = o.trials_per_task;
  if (o.scheduler_options.seed == 0) o.scheduler_options.seed = o.model.seed * 31 + 5;
  if (o.tuner.seed == 0) o.tuner.seed = o.model.seed + 1;
  auto scheduler = make_scheduler(o.scheduler, o.scheduler_options);
  if (!o.trace) {
    ModelTuner tuner(make_simulated_model(o.model), o.tuner, database);
    return tuner.run(*scheduler, progress, pool);
  }
  std::vector<MeasureCallback> callbacks =
      default_measure_callbacks(database, o.tuner.run, o.tuner.device);
  const auto truth = std::make_shared<const TraceTruth>(*o.trace);
  std::vector<double> latencies;
  callbacks.push_back(remeasure_into(*o.trace, truth, latencies));
  ModelTuner tuner(make_trace_model(o.trace, o.model.seed), o.tuner, database, callbacks);
  TuningReport report = tuner.run(*scheduler, progress, pool);
  if (remeasured) {
    // The tuner adds a curve point after every batch, right after the callbacks ran.
    remeasured->assign(report.curve.begin(), report.curve.end());
    (*remeasured)[0].model_seconds = truth->baseline_model_seconds();
    for (size_t i = 1; i < remeasured->size() && i - 1 < latencies.size(); ++i)
      (*remeasured)[i].model_seconds = latencies[i - 1];
  }
  return report;
}

Comparison compare_schedulers(const std::vector<std::string>& schedulers,
                              const std::vector<uint64_t>& seeds, const SimulationOptions& base,
                              int threads, double reference_seconds) {
  Comparison out;
  for (const auto seed : seeds)
    for (const auto& name : schedulers) out.runs.push_back({name, seed, {}, 0, 0, {}, 0});
  // One budget for every run, worked out once (it costs a run of its own).
  SimulationOptions common = base;
  if (base.trace && base.tuner.budget_trials == 0 && !std::isfinite(base.tuner.budget_seconds))
    common.tuner.budget_seconds = default_trace_budget_seconds(*base.trace, base);
  std::atomic<size_t> next{0};
  const auto work = [&] {
    for (size_t i = next++; i < out.runs.size(); i = next++) {
      SimulationOptions o = common;
      o.scheduler = out.runs[i].scheduler;
      o.model.seed = out.runs[i].seed;
      out.runs[i].report = run_simulation(o, nullptr, {}, nullptr, &out.runs[i].remeasured_curve);
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < std::max(1, threads); ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();

  // Reference per seed: the best final latency any scheduler reached on that model. On a trace
  // every seed tunes one model: the best of all runs, each re-measured without noise (a lucky
  // noise draw must not set a bar no run really reached).
  std::map<uint64_t, double> reference;
  if (base.trace) {
    double best = std::numeric_limits<double>::infinity();
    for (auto& r : out.runs) {
      r.remeasured_final_seconds = r.remeasured_curve.back().model_seconds;
      best = std::min(best, r.remeasured_final_seconds);
    }
    out.own_reference_seconds = best;
    if (reference_seconds > 0) best = reference_seconds;
    for (const auto seed : seeds) reference[seed] = best;
    out.trace_reference_seconds = best;
    const TunerOptions& t = common.tuner;
    out.budget_seconds = t.budget_seconds;
    out.slot_seconds =
        t.slot_seconds > 0 ? t.slot_seconds : default_trace_slot_seconds(*base.trace, base);
  }
  for (const auto& r : out.runs) {
    if (base.trace) break;
    auto [it, inserted] = reference.emplace(r.seed, r.report.final_model_seconds);
    if (!inserted) it->second = std::min(it->second, r.report.final_model_seconds);
  }
  std::map<uint64_t, double> sequential_99;
  for (auto& r : out.runs) {
    const auto& curve = base.trace ? r.remeasured_curve : r.report.curve;
    r.time_to_95 = time_to_reach(curve, reference[r.seed] / 0.95);
    r.time_to_99 = time_to_reach(curve, reference[r.seed] / 0.99);
    if (r.scheduler == "sequential") sequential_99[r.seed] = r.time_to_99;
  }
  for (const auto& name : schedulers) {
    std::vector<double> t95, t99, final_ms, speedup, overhead, per_slot, cold;
    int unfinished = 0;
    for (const auto& r : out.runs) {
      if (r.scheduler != name) continue;
      unfinished += r.report.stop_reason != "all-tasks-finished";
      t95.push_back(r.time_to_95);
      t99.push_back(r.time_to_99);
      final_ms.push_back((base.trace ? r.remeasured_final_seconds : r.report.final_model_seconds) *
                         1e3);
      if (sequential_99.count(r.seed)) speedup.push_back(sequential_99[r.seed] / r.time_to_99);
      const double slots = static_cast<double>(std::max<long>(r.report.slots, 1));
      // Over the tuning time, as the command line reports it: slots that end early (their
      // task finished) count for what they took, not for their nominal length.
      // The scheduler's CPU time: real time of its code, not inflated by other programs.
      overhead.push_back(r.report.scheduler_cpu_seconds / std::max(r.report.tuning_seconds, 1e-9));
      per_slot.push_back(r.report.scheduler_cpu_seconds / slots * 1e3);
      cold.push_back(r.report.cold_time_share);
    }
    out.rows.push_back({name, median(t95), median(t99), median(final_ms), median(speedup),
                        median(overhead), median(per_slot), median(cold), smallest(t95),
                        largest(t95), smallest(t99), largest(t99), unfinished});
  }
  return out;
}

std::string comparison_table(const Comparison& c) {
  std::string out =
      "| scheduler | time to 95% (s) [spread] | time to 99% (s) [spread] | final latency (ms) | "
      "speedup to 99% vs sequential | scheduler overhead (% of tuning time) | scheduler ms/slot "
      "| cold time share | runs cut by the budget |\n"
      "|---|---|---|---|---|---|---|---|---|\n";
  const auto runs_of = [&](const std::string& name) {
    return std::count_if(c.runs.begin(), c.runs.end(),
                         [&](const ComparisonRun& r) { return r.scheduler == name; });
  };
  char line[384];
  for (const auto& r : c.rows) {
    std::snprintf(line, sizeof line,
                  "| %s | %.0f [%.0f-%.0f] | %.0f [%.0f-%.0f] | %.3f | %.2fx | %.3f%% | %.2f | "
                  "%.1f%% | %d/%ld |\n",
                  r.scheduler.c_str(), r.median_time_to_95, r.min_time_to_95, r.max_time_to_95,
                  r.median_time_to_99, r.min_time_to_99, r.max_time_to_99, r.median_final_ms,
                  r.median_speedup_vs_sequential, 100 * r.median_overhead_share,
                  r.median_scheduler_ms_per_slot, 100 * r.median_cold_time_share, r.unfinished_runs,
                  static_cast<long>(runs_of(r.scheduler)));
    out += line;
  }
  return out;
}

}  // namespace nimble::tuning

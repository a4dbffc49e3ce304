#include "tuning/tuner/tuning_run.h"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <limits>

namespace nimble::tuning {

double TuningRun::since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double TuningRun::task_seconds(const Task& task, const TaskTuner& tuner) {
  return std::min(task.baseline_seconds, tuner.has_best()
                                             ? tuner.best_seconds()
                                             : std::numeric_limits<double>::infinity());
}

TuningRun::TuningRun(const std::vector<Task>& tasks, const TunerOptions& options,
                     std::string scheduler)
    : tasks_(tasks),
      options_(options),
      progress_view_(tasks.size()),
      seconds_per_slot_(tasks.size()),
      finished_(tasks.size(), false),
      slots_(tasks.size(), 0),
      last_slot_trials_(tasks.size(), 0),
      had_slot_(tasks.size(), false),
      survey_(options.survey),
      task_in_flight_(tasks.size(), 0) {
  moves_ = std::make_unique<MoveMemory>(options.search.transfer);
  for (size_t i = 0; i < tasks.size(); ++i)
    tuners_.push_back(std::make_unique<TaskTuner>(
        tasks[i], options.search, options.seed * 7919 + 17 * i + 1, moves_.get(), i));
  report_.scheduler = std::move(scheduler);
  report_.slot_seconds = options.slot_seconds;
}

void TuningRun::resume_from(const TuningDatabase& database) {
  for (size_t i = 0; i < tasks_.size(); ++i) {
    std::vector<Config> configs;
    std::vector<MeasureResult> results;
    for (auto& r : database.records(tasks_[i].signature, options_.device)) {
      if (!tasks_[i].space.valid(r.config)) continue;
      configs.push_back(std::move(r.config));
      results.push_back(std::move(r.result));
    }
    if (!configs.empty()) tuners_[i]->record(configs, results);
  }
}

void TuningRun::start() {
  for (size_t i = 0; i < tasks_.size(); ++i) {
    finished_[i] = is_done(i);
    const ColdStats& c = tuners_[i]->cold_stats();
    resumed_.cold_seconds += c.cold_seconds;
    resumed_.failed_seconds += c.failed_seconds;
    resumed_.total_seconds += c.total_seconds;
    for (size_t s = 0; s < kCandidateSources; ++s) resumed_.by_source[s] += c.by_source[s];
  }
  report_.initial_model_seconds = model_seconds();
  report_.curve.push_back({0, 0, report_.initial_model_seconds});
}

void TuningRun::stop(std::string reason) {
  if (report_.stop_reason.empty()) report_.stop_reason = std::move(reason);
}

double TuningRun::thread_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

std::optional<size_t> TuningRun::choose(TaskScheduler& scheduler, bool skip_busy) {
  const SchedulerView view = refreshed_view(skip_busy);
  const auto start = Clock::now();
  const double cpu = thread_cpu_seconds();
  const std::optional<size_t> chosen = scheduler.choose(view);
  report_.scheduler_cpu_seconds += thread_cpu_seconds() - cpu;
  report_.scheduler_wall_seconds += since(start);
  return chosen;
}

bool TuningRun::budget_committed() const {
  return now_ >= options_.budget_seconds ||
         (options_.budget_trials > 0 &&
          report_.trials + in_flight_trials_ >= options_.budget_trials);
}

void TuningRun::observe(TaskScheduler& scheduler, size_t k) {
  const SchedulerView view = refreshed_view();
  const auto start = Clock::now();
  const double cpu = thread_cpu_seconds();
  scheduler.observe(k, view);
  report_.scheduler_cpu_seconds += thread_cpu_seconds() - cpu;
  report_.scheduler_wall_seconds += since(start);
  if (options_.charge_search_time) now_ += since(start);
}

ProgressEvent TuningRun::progress_event(size_t k, const TaskScheduler& scheduler) {
  ProgressEvent e{report_.slots,
                  tasks_[k].name,
                  tuners_[k]->trials(),
                  report_.trials,
                  now_,
                  model_seconds(),
                  task_seconds(tasks_[k], *tuners_[k]),
                  tasks_[k].baseline_seconds,
                  {}};
  const SchedulerView view = refreshed_view();
  for (const size_t i : live_tasks(view))
    if (const std::optional<double> gain = scheduler.expected_gain_ms(view, i))
      e.expected_gain_ms.emplace_back(tasks_[i].name, *gain);
  return e;
}

void TuningRun::end_epoch_if_complete(size_t k) {
  had_slot_[k] = true;
  for (size_t i = 0; i < tasks_.size(); ++i)
    if (!had_slot_[i] && !finished_[i]) return;
  std::fill(had_slot_.begin(), had_slot_.end(), false);
  const double latency = model_seconds();
  report_.epochs.push_back({now_, report_.trials, latency});
  if (auto reason = survey_.after_epoch(latency, now_)) stop(*reason);
}

TuningReport TuningRun::finish() {
  report_.tuning_seconds = now_;
  report_.final_model_seconds = model_seconds();
  double cold = 0, failed = 0, total = 0;
  for (size_t i = 0; i < tasks_.size(); ++i) {
    const TaskTuner& t = *tuners_[i];
    TaskSummary s;
    s.name = tasks_[i].name;
    s.signature = tasks_[i].signature;
    s.trials = t.trials();
    s.failures = t.failures();
    s.slots = slots_[i];
    s.best_seconds = t.has_best() ? t.best_seconds() : std::numeric_limits<double>::infinity();
    s.baseline_seconds = tasks_[i].baseline_seconds;
    s.best_config = t.has_best() ? tasks_[i].space.describe(t.best_config()) : "";
    s.finished = finished_[i];
    s.cold = t.cold_stats();
    cold += s.cold.cold_seconds;
    failed += s.cold.failed_seconds;
    total += s.cold.total_seconds;
    for (size_t k = 0; k < kCandidateSources; ++k) report_.by_source[k] += s.cold.by_source[k];
    report_.tasks.push_back(std::move(s));
  }
  // This run's cost, without the records it resumed from.
  report_.measure_seconds = total - resumed_.total_seconds;
  report_.cold_seconds = cold - resumed_.cold_seconds;
  report_.failed_seconds = failed - resumed_.failed_seconds;
  for (size_t k = 0; k < kCandidateSources; ++k) report_.by_source[k] -= resumed_.by_source[k];
  // Shares of this run's measurement time, as the seconds above (a run resumed from a database
  // printed the shares of every record of its tasks, the earlier runs' included).
  const double measured = report_.measure_seconds;
  report_.cold_time_share = measured > 0 ? report_.cold_seconds / measured : 0;
  report_.failed_time_share = measured > 0 ? report_.failed_seconds / measured : 0;
  return std::move(report_);
}

RepeatSettings TuningRun::repeat_settings(size_t k) const {
  RepeatSettings r;
  r.adaptive = options_.adaptive_evaluator;
  r.evaluator = options_.evaluator;
  if (options_.repeat_cost_slot_share > 0)
    r.evaluator.max_repeat_cost_seconds =
        std::min(r.evaluator.max_repeat_cost_seconds,
                 options_.repeat_cost_slot_share * options_.slot_seconds);
  r.best_seconds = task_seconds(tasks_[k], *tuners_[k]);
  r.fixed_repeats = options_.fixed_repeats;
  return r;
}

bool TuningRun::is_done(size_t i) const {
  const TaskTuner& t = *tuners_[i];
  long early_stop = options_.early_stop_trials;
  const long own = tasks_[i].early_stop_trials;
  if (own > 0 && (early_stop <= 0 || own < early_stop)) early_stop = own;
  return t.exhausted() || t.all_cold() ||
         (early_stop > 0 && t.trials_since_improvement() >= early_stop);
}

double TuningRun::model_seconds() const {
  double total = 0;
  for (size_t i = 0; i < tasks_.size(); ++i)
    total += tasks_[i].weight * task_seconds(tasks_[i], *tuners_[i]);
  return total;
}

SchedulerView TuningRun::refreshed_view(bool skip_busy) {
  for (size_t i = 0; i < tasks_.size(); ++i) {
    TaskProgress& p = progress_view_[i];
    p.name = tasks_[i].name;
    p.group = tasks_[i].group;
    p.flops = tasks_[i].flops;
    p.weight = tasks_[i].weight;
    p.best_seconds = task_seconds(tasks_[i], *tuners_[i]);
    p.baseline_seconds = tasks_[i].baseline_seconds;
    p.trials = tuners_[i]->trials();
    p.measure_seconds = tuners_[i]->cold_stats().total_seconds;
    p.slots = slots_[i];
    p.last_slot_trials = last_slot_trials_[i];
    p.finished = finished_[i] || (skip_busy && task_in_flight_[i] > 0);
    p.only_cold_left = tuners_[i]->only_cold_left();
    p.best_gflops_history = &tuners_[i]->best_gflops_history();
    p.best_seconds_per_slot = &seconds_per_slot_[i];
  }
  return {progress_view_, report_.slots, options_.peak_gflops, model_seconds(),
          report_.initial_model_seconds};
}

}  // namespace nimble::tuning

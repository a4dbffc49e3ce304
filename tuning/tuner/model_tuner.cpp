#include "tuning/tuner/model_tuner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <optional>

namespace nimble::tuning {
namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// A task's latency per occurrence: the tuned kernel when it beats the baseline kernel.
double task_seconds(const Task& task, const TaskTuner& tuner) {
  return std::min(task.baseline_seconds, tuner.has_best()
                                             ? tuner.best_seconds()
                                             : std::numeric_limits<double>::infinity());
}

// One ModelTuner::run: the tasks' searches, the tuning clock, the per-task bookkeeping the
// scheduler sees, and the report being filled. Each public method is one step of the run.
class TuningRun {
 public:
  // One search per task, seeded from the tuner's seed and the task's index.
  TuningRun(const std::vector<Task>& tasks, const TunerOptions& options, std::string scheduler)
      : tasks_(tasks),
        options_(options),
        progress_view_(tasks.size()),
        seconds_per_slot_(tasks.size()),
        finished_(tasks.size(), false),
        slots_(tasks.size(), 0),
        last_slot_trials_(tasks.size(), 0),
        had_slot_(tasks.size(), false),
        survey_(options.survey) {
    for (size_t i = 0; i < tasks.size(); ++i)
      tuners_.push_back(
          std::make_unique<TaskTuner>(tasks[i], options.search, options.seed * 7919 + 17 * i + 1));
    report_.scheduler = std::move(scheduler);
    report_.slot_seconds = options.slot_seconds;
  }

  // Hands the database's records of each task to its search, which then never measures those
  // configs again and starts from their bests. Records of another knob space are skipped.
  void resume_from(const TuningDatabase& database) {
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

  // Marks tasks that resumed finished, and puts the starting model latency at time zero.
  void start() {
    for (size_t i = 0; i < tasks_.size(); ++i) finished_[i] = is_done(i);
    report_.initial_model_seconds = model_seconds();
    report_.curve.push_back({0, 0, report_.initial_model_seconds});
  }

  bool stopped() const { return !report_.stop_reason.empty(); }
  void stop(std::string reason) { report_.stop_reason = std::move(reason); }

  bool budget_spent() const {
    return now_ >= options_.budget_seconds ||
           (options_.budget_trials > 0 && report_.trials >= options_.budget_trials);
  }

  // The scheduler's task for the next slot; nothing once it sees no live task to tune.
  std::optional<size_t> choose(TaskScheduler& scheduler) {
    const SchedulerView view = refreshed_view();
    const auto start = Clock::now();
    const std::optional<size_t> chosen = scheduler.choose(view);
    report_.scheduler_wall_seconds += since(start);
    return chosen;
  }

  // Task k's slot: measured batches until the slot's time is used up, the task finishes or
  // the budget is spent. Every batch reaches every callback once, in measurement order.
  void tune_slot(size_t k, const std::vector<MeasureCallback>& callbacks) {
    const double slot_start = now_;
    long slot_trials = 0;
    while (now_ - slot_start < options_.slot_seconds && !finished_[k] && !budget_spent()) {
      const std::vector<Config> batch = propose(k);
      if (batch.empty()) {
        finished_[k] = true;
        break;
      }
      const std::vector<MeasureResult> results = measure(k, batch);
      for (const MeasureCallback& callback : callbacks)
        callback({tasks_[k], *tuners_[k], batch, results});
      report_.trials += static_cast<long>(batch.size());
      slot_trials += static_cast<long>(batch.size());
      report_.curve.push_back({now_, report_.trials, model_seconds()});
      if (is_done(k)) finished_[k] = true;
    }
    ++report_.slots;
    ++slots_[k];
    last_slot_trials_[k] = slot_trials;
    seconds_per_slot_[k].push_back(task_seconds(tasks_[k], *tuners_[k]));
  }

  // Shows the scheduler the state after task k's slot (DynaTune refits its belief here).
  void observe(TaskScheduler& scheduler, size_t k) {
    const SchedulerView view = refreshed_view();
    const auto start = Clock::now();
    scheduler.observe(k, view);
    report_.scheduler_wall_seconds += since(start);
    if (options_.charge_search_time) now_ += since(start);
  }

  ProgressEvent progress_event(size_t k) const {
    return {report_.slots,  tasks_[k].name, tuners_[k]->trials(),
            report_.trials, now_,           model_seconds()};
  }

  // An epoch ends once every live task has had a slot since the last one ended; then the
  // model latency is re-estimated and the survey stop may end the run.
  void end_epoch_if_complete(size_t k) {
    had_slot_[k] = true;
    for (size_t i = 0; i < tasks_.size(); ++i)
      if (!had_slot_[i] && !finished_[i]) return;
    std::fill(had_slot_.begin(), had_slot_.end(), false);
    const double latency = model_seconds();
    report_.epochs.push_back({now_, report_.trials, latency});
    if (auto reason = survey_.after_epoch(latency, now_)) stop(*reason);
  }

  // The report with the final latency and a summary per task.
  TuningReport finish() {
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
      report_.tasks.push_back(std::move(s));
    }
    report_.cold_time_share = total > 0 ? cold / total : 0;
    report_.failed_time_share = total > 0 ? failed / total : 0;
    return std::move(report_);
  }

 private:
  // Up to a batch of new configs for task k, fewer when the trial budget is nearly spent;
  // the search time is charged to the tuning clock when the options say so.
  std::vector<Config> propose(size_t k) {
    int count = options_.search.batch_size;
    if (options_.budget_trials > 0)
      count = static_cast<int>(std::min<long>(count, options_.budget_trials - report_.trials));
    const auto start = Clock::now();
    std::vector<Config> batch = tuners_[k]->propose(count);
    const double seconds = since(start);
    report_.search_wall_seconds += seconds;
    if (options_.charge_search_time) now_ += seconds;
    return batch;
  }

  // One result per config of the batch, and the tuning clock advanced by what they cost. A
  // measurer that throws is broken, but the tuner keeps going: the whole batch failed.
  std::vector<MeasureResult> measure(size_t k, const std::vector<Config>& batch) {
    std::vector<MeasureResult> results;
    const auto start = Clock::now();
    try {
      if (options_.adaptive_evaluator)
        results = tasks_[k].measurer->measure(
            batch, AdaptiveEvaluator(options_.evaluator, tuners_[k]->best_seconds()));
      else
        results = tasks_[k].measurer->measure(batch, FixedRepeats(options_.fixed_repeats));
    } catch (const std::exception&) {
      results.clear();
    }
    if (results.size() != batch.size()) {
      const double wall = since(start);
      results.assign(batch.size(), MeasureResult{});
      for (auto& r : results) {
        r.error = MeasureError::kRuntime;
        r.message = "measurer failed for the whole batch";
        r.cost_seconds = wall / static_cast<double>(batch.size());
      }
    }
    for (const auto& r : results) {
      now_ += r.cost_seconds;
      report_.repeats += static_cast<long>(r.seconds.size());
      report_.cut_short += r.cut_short ? 1 : 0;
    }
    return results;
  }

  // A task is done when its space is used up, everything left is cold, or it stopped
  // improving for long enough.
  bool is_done(size_t i) const {
    const TaskTuner& t = *tuners_[i];
    return t.exhausted() || t.all_cold() ||
           (options_.early_stop_trials > 0 &&
            t.trials_since_improvement() >= options_.early_stop_trials);
  }

  // Estimated model latency: every task's best (or baseline) times its occurrences.
  double model_seconds() const {
    double total = 0;
    for (size_t i = 0; i < tasks_.size(); ++i)
      total += tasks_[i].weight * task_seconds(tasks_[i], *tuners_[i]);
    return total;
  }

  // What every scheduler call sees, brought up to date with the searches.
  SchedulerView refreshed_view() {
    for (size_t i = 0; i < tasks_.size(); ++i) {
      TaskProgress& p = progress_view_[i];
      p.name = tasks_[i].name;
      p.group = tasks_[i].group;
      p.flops = tasks_[i].flops;
      p.weight = tasks_[i].weight;
      p.best_seconds = task_seconds(tasks_[i], *tuners_[i]);
      p.trials = tuners_[i]->trials();
      p.slots = slots_[i];
      p.last_slot_trials = last_slot_trials_[i];
      p.finished = finished_[i];
      p.best_gflops_history = &tuners_[i]->best_gflops_history();
      p.best_seconds_per_slot = &seconds_per_slot_[i];
    }
    return {progress_view_, report_.slots, options_.peak_gflops, model_seconds(),
            report_.initial_model_seconds};
  }

  const std::vector<Task>& tasks_;
  const TunerOptions& options_;
  std::vector<std::unique_ptr<TaskTuner>> tuners_;
  std::vector<TaskProgress> progress_view_;
  std::vector<std::vector<double>> seconds_per_slot_;
  std::vector<bool> finished_;
  std::vector<long> slots_;
  std::vector<long> last_slot_trials_;
  std::vector<bool> had_slot_;  // since the current epoch began
  SurveyStop survey_;
  double now_ = 0;  // tuning time: measurement cost, plus search time when charged
  TuningReport report_;
};

}  // namespace

ModelTuner::ModelTuner(std::vector<Task> tasks, TunerOptions options, TuningDatabase* database)
    : ModelTuner(std::move(tasks), options, database,
                 default_measure_callbacks(database, options.run, options.device)) {}

ModelTuner::ModelTuner(std::vector<Task> tasks, TunerOptions options, TuningDatabase* database,
                       std::vector<MeasureCallback> callbacks)
    : tasks_(std::move(tasks)),
      options_(std::move(options)),
      database_(database),
      measure_callbacks_(std::move(callbacks)) {}

TuningReport ModelTuner::run(TaskScheduler& scheduler, const ProgressCallback& progress) {
  TuningRun run(tasks_, options_, scheduler.name());
  if (database_ && options_.resume) run.resume_from(*database_);
  run.start();
  while (!run.stopped()) {
    if (run.budget_spent()) {
      run.stop("budget");
      break;
    }
    const std::optional<size_t> task = run.choose(scheduler);
    if (!task) {
      run.stop("all-tasks-finished");
      break;
    }
    run.tune_slot(*task, measure_callbacks_);
    run.observe(scheduler, *task);
    if (progress) progress(run.progress_event(*task));
    run.end_epoch_if_complete(*task);
  }
  return run.finish();
}

}  // namespace nimble::tuning

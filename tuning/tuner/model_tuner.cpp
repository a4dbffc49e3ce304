#include "tuning/tuner/model_tuner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>

namespace nimble::tuning {
namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// A task's latency per occurrence: the tuned kernel when it beats the baseline kernel.
double task_seconds(const Task& task, const TaskTuner& tuner) {
  return std::min(task.baseline_seconds, tuner.has_best()
                                             ? tuner.best_seconds()
                                             : std::numeric_limits<double>::infinity());
}

}  // namespace

ModelTuner::ModelTuner(std::vector<Task> tasks, TunerOptions options, TuningDatabase* database)
    : tasks_(std::move(tasks)), options_(std::move(options)), database_(database) {}

TuningReport ModelTuner::run(TaskScheduler& scheduler, const ProgressCallback& progress) {
  const size_t n = tasks_.size();
  std::vector<std::unique_ptr<TaskTuner>> tuners;
  for (size_t i = 0; i < n; ++i)
    tuners.push_back(
        std::make_unique<TaskTuner>(tasks_[i], options_.search, options_.seed * 7919 + 17 * i + 1));
  if (database_ && options_.resume) {
    for (size_t i = 0; i < n; ++i) {
      std::vector<Config> configs;
      std::vector<MeasureResult> results;
      for (auto& r : database_->records(tasks_[i].signature, options_.device)) {
        if (!tasks_[i].space.valid(r.config)) continue;  // a record of another knob space
        configs.push_back(std::move(r.config));
        results.push_back(std::move(r.result));
      }
      if (!configs.empty()) tuners[i]->record(configs, results);
    }
  }

  TuningReport report;
  report.scheduler = scheduler.name();
  report.slot_seconds = options_.slot_seconds;
  std::vector<TaskProgress> progress_view(n);
  std::vector<std::vector<double>> seconds_per_slot(n);
  std::vector<bool> finished(n, false);
  std::vector<long> slots(n, 0);
  std::vector<long> last_slot_trials(n, 0);

  const auto model_seconds = [&] {
    double total = 0;
    for (size_t i = 0; i < n; ++i) total += tasks_[i].weight * task_seconds(tasks_[i], *tuners[i]);
    return total;
  };
  const auto refresh = [&] {
    for (size_t i = 0; i < n; ++i) {
      TaskProgress& p = progress_view[i];
      p.name = tasks_[i].name;
      p.group = tasks_[i].group;
      p.flops = tasks_[i].flops;
      p.weight = tasks_[i].weight;
      p.best_seconds = task_seconds(tasks_[i], *tuners[i]);
      p.trials = tuners[i]->trials();
      p.slots = slots[i];
      p.last_slot_trials = last_slot_trials[i];
      p.finished = finished[i];
      p.best_gflops_history = &tuners[i]->best_gflops_history();
      p.best_seconds_per_slot = &seconds_per_slot[i];
    }
  };
  const auto is_done = [&](size_t i) {
    const TaskTuner& t = *tuners[i];
    return t.exhausted() || (options_.early_stop_trials > 0 &&
                             t.trials_since_improvement() >= options_.early_stop_trials);
  };
  for (size_t i = 0; i < n; ++i) finished[i] = is_done(i);

  report.initial_model_seconds = model_seconds();
  double now = 0;
  report.curve.push_back({0, 0, report.initial_model_seconds});
  SurveyStop survey(options_.survey);
  std::vector<bool> had_slot(n, false);
  const auto budget_spent = [&] {
    return now >= options_.budget_seconds ||
           (options_.budget_trials > 0 && report.trials >= options_.budget_trials);
  };

  while (report.stop_reason.empty()) {
    if (budget_spent()) {
      report.stop_reason = "budget";
      break;
    }
    refresh();
    const SchedulerView view{progress_view, report.slots, options_.peak_gflops, model_seconds(),
                             report.initial_model_seconds};
    const auto choose_start = Clock::now();
    const std::optional<size_t> chosen = scheduler.choose(view);
    report.scheduler_wall_seconds += since(choose_start);
    if (!chosen) {
      report.stop_reason = "all-tasks-finished";
      break;
    }
    const size_t k = *chosen;
    const Task& task = tasks_[k];
    TaskTuner& tuner = *tuners[k];
    const double slot_start = now;
    long slot_trials = 0;
    while (now - slot_start < options_.slot_seconds && !finished[k] && !budget_spent()) {
      int count = options_.search.batch_size;
      if (options_.budget_trials > 0)
        count = static_cast<int>(std::min<long>(count, options_.budget_trials - report.trials));
      const auto search_start = Clock::now();
      const std::vector<Config> batch = tuner.propose(count);
      const double search_seconds = since(search_start);
      report.search_wall_seconds += search_seconds;
      if (options_.charge_search_time) now += search_seconds;
      if (batch.empty()) {
        finished[k] = true;
        break;
      }
      std::vector<MeasureResult> results;
      const auto measure_start = Clock::now();
      try {
        if (options_.adaptive_evaluator)
          results = task.measurer->measure(
              batch, AdaptiveEvaluator(options_.evaluator, tuner.best_seconds()));
        else
          results = task.measurer->measure(batch, FixedRepeats(options_.fixed_repeats));
      } catch (const std::exception& e) {
        // A measurer that throws is broken, but the tuner keeps going: the batch failed.
        results.clear();
      }
      if (results.size() != batch.size()) {
        const double wall = since(measure_start);
        results.assign(batch.size(), MeasureResult{});
        for (auto& r : results) {
          r.error = MeasureError::kRuntime;
          r.message = "measurer failed for the whole batch";
          r.cost_seconds = wall / static_cast<double>(batch.size());
        }
      }
      for (const auto& r : results) {
        now += r.cost_seconds;
        report.repeats += static_cast<long>(r.seconds.size());
        report.cut_short += r.cut_short ? 1 : 0;
      }
      tuner.record(batch, results);
      if (database_) {
        std::vector<DatabaseRecord> rows;
        const double stamp = unix_now();
        for (size_t i = 0; i < batch.size(); ++i)
          rows.push_back(
              {options_.run, task.signature, options_.device, batch[i], results[i], stamp});
        database_->append(rows);
      }
      report.trials += static_cast<long>(batch.size());
      slot_trials += static_cast<long>(batch.size());
      report.curve.push_back({now, report.trials, model_seconds()});
      if (is_done(k)) finished[k] = true;
    }
    ++report.slots;
    ++slots[k];
    last_slot_trials[k] = slot_trials;
    seconds_per_slot[k].push_back(task_seconds(task, tuner));
    refresh();
    const SchedulerView after{progress_view, report.slots, options_.peak_gflops, model_seconds(),
                              report.initial_model_seconds};
    const auto observe_start = Clock::now();
    scheduler.observe(k, after);
    report.scheduler_wall_seconds += since(observe_start);
    if (options_.charge_search_time) now += since(observe_start);

    if (progress)
      progress({report.slots, task.name, tuner.trials(), report.trials, now, model_seconds()});
    // An epoch ends once every live task has had a slot since the last one ended.
    had_slot[k] = true;
    bool epoch_done = true;
    for (size_t i = 0; i < n; ++i) epoch_done = epoch_done && (had_slot[i] || finished[i]);
    if (epoch_done) {
      std::fill(had_slot.begin(), had_slot.end(), false);
      const double latency = model_seconds();
      report.epochs.push_back({now, report.trials, latency});
      if (auto stop = survey.after_epoch(latency, now)) report.stop_reason = *stop;
    }
  }

  report.tuning_seconds = now;
  report.final_model_seconds = model_seconds();
  double cold = 0, failed = 0, total = 0;
  for (size_t i = 0; i < n; ++i) {
    const TaskTuner& t = *tuners[i];
    TaskSummary s;
    s.name = tasks_[i].name;
    s.signature = tasks_[i].signature;
    s.trials = t.trials();
    s.failures = t.failures();
    s.slots = slots[i];
    s.best_seconds = t.has_best() ? t.best_seconds() : std::numeric_limits<double>::infinity();
    s.baseline_seconds = tasks_[i].baseline_seconds;
    s.best_config = t.has_best() ? tasks_[i].space.describe(t.best_config()) : "";
    s.finished = finished[i];
    s.cold = t.cold_stats();
    cold += s.cold.cold_seconds;
    failed += s.cold.failed_seconds;
    total += s.cold.total_seconds;
    report.tasks.push_back(std::move(s));
  }
  report.cold_time_share = total > 0 ? cold / total : 0;
  report.failed_time_share = total > 0 ? failed / total : 0;
  return report;
}

}  // namespace nimble::tuning

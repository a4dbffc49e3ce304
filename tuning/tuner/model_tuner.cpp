#include "tuning/tuner/model_tuner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

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

// A scheduler's slot: batches of one task up to a slot's worth of tuning time. Several
// slots are open at once when several batches are in flight.
struct Slot {
  size_t task = 0;
  long id = 0;
  int in_flight = 0;
  long trials = 0;
  double used = 0;              // measurement time of its batches that came back
  bool no_more = false;         // its task had nothing left to propose, or its search went flat
  bool ends_when_flat = false;  // at its first batch that does not improve the task's best
};
struct InFlight {
  size_t task = 0;
  long slot = 0;
  std::vector<Config> configs;
};

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
        task_in_flight_(tasks.size(), 0),
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
    for (size_t i = 0; i < tasks_.size(); ++i) {
      finished_[i] = is_done(i);
      const ColdStats& c = tuners_[i]->cold_stats();
      resumed_.cold_seconds += c.cold_seconds;
      resumed_.failed_seconds += c.failed_seconds;
      resumed_.total_seconds += c.total_seconds;
    }
    report_.initial_model_seconds = model_seconds();
    report_.curve.push_back({0, 0, report_.initial_model_seconds});
  }

  bool stopped() const { return !report_.stop_reason.empty(); }
  // The first reason stays: batches still in flight when a run stops come back and close
  // their slots (and maybe an epoch) afterwards.
  void stop(std::string reason) {
    if (report_.stop_reason.empty()) report_.stop_reason = std::move(reason);
  }

  // The scheduler's task for the next slot; nothing once it sees no live task to tune. With
  // `skip_busy`, tasks with a batch in flight look finished to it.
  std::optional<size_t> choose(TaskScheduler& scheduler, bool skip_busy) {
    const SchedulerView view = refreshed_view(skip_busy);
    const auto start = Clock::now();
    const std::optional<size_t> chosen = scheduler.choose(view);
    report_.scheduler_wall_seconds += since(start);
    return chosen;
  }

  // Whether no more batches may be submitted: the tuning time is spent, or the trial budget
  // is taken up by measured and in-flight trials.
  bool budget_committed() const {
    return now_ >= options_.budget_seconds ||
           (options_.budget_trials > 0 &&
            report_.trials + in_flight_trials_ >= options_.budget_trials);
  }

  bool in_flight() const { return !in_flight_.empty(); }

  // The first open slot whose batches have all come back and that will submit no more; the
  // run closes slots in the order they were opened.
  std::optional<size_t> closable_slot() const {
    for (size_t s = 0; s < open_slots_.size(); ++s)
      if (open_slots_[s].in_flight == 0 && !wants_more(open_slots_[s])) return s;
    return std::nullopt;
  }

  // Closes an open slot: its task's bookkeeping for the scheduler. Returns the task.
  size_t close_slot(size_t s) {
    const size_t k = open_slots_[s].task;
    ++report_.slots;
    ++slots_[k];
    last_slot_trials_[k] = open_slots_[s].trials;
    seconds_per_slot_[k].push_back(task_seconds(tasks_[k], *tuners_[k]));
    open_slots_.erase(open_slots_.begin() + static_cast<std::ptrdiff_t>(s));
    return k;
  }

  // Whether a batch could be submitted now: the pool has room, the run goes on, and the last
  // submission did not find every live task's candidates in flight.
  bool may_submit(MeasurePool& pool) {
    return !stopped() && !waiting_for_results_ &&
           static_cast<int>(in_flight_.size()) < pool.capacity();
  }

  // One batch for an open slot whose task is idle and wants more, or else for a new slot. The
  // scheduler chooses among the live tasks with no batch in flight, so that with several
  // workers each task's search still learns from one batch before proposing the next; only
  // when every live task is being measured does a task get a second batch in flight.
  // Submits nothing when the budget is committed (the run stops), no task is live, or the
  // chosen task has nothing left to propose (it is finished, or the rest of its space is in
  // flight: then the run waits for results first).
  void submit(TaskScheduler& scheduler, MeasurePool& pool) {
    Slot* slot = nullptr;
    for (Slot& s : open_slots_)
      if (!slot && s.in_flight == 0 && wants_more(s)) slot = &s;
    if (!slot) {
      if (budget_committed()) {
        stop("budget");
        return;
      }
      std::optional<size_t> task = choose(scheduler, /*skip_busy=*/true);
      if (!task && !in_flight_.empty()) task = choose(scheduler, /*skip_busy=*/false);
      if (!task) {
        if (in_flight_.empty()) stop("all-tasks-finished");
        waiting_for_results_ = true;
        return;
      }
      for (Slot& s : open_slots_)
        if (!slot && s.task == *task && wants_more(s)) slot = &s;
      if (!slot) {
        slot = &open_slots_.emplace_back(Slot{*task, next_slot_id_++});
        slot->ends_when_flat = scheduler.slot_ends_when_flat(*task, refreshed_view());
      }
    }
    const size_t k = slot->task;
    const double before = now_;
    std::vector<Config> batch = propose(k);
    slot->used += now_ - before;  // search time, when charged
    if (batch.empty()) {
      slot->no_more = true;
      if (tuners_[k]->has_pending()) {
        // Wait for results before asking again; a slot that got no batch is not a slot.
        waiting_for_results_ = true;
        if (slot->trials == 0 && slot->in_flight == 0)
          open_slots_.erase(open_slots_.begin() + (slot - open_slots_.data()));
      } else {
        finished_[k] = true;
      }
      return;
    }
    MeasureRequest request;
    request.ticket = next_ticket_++;
    request.task = k;
    request.configs = batch;
    request.repeats = repeat_settings(k);
    in_flight_trials_ += static_cast<long>(batch.size());
    ++slot->in_flight;
    ++task_in_flight_[k];
    in_flight_.emplace(request.ticket, InFlight{k, slot->id, std::move(batch)});
    pool.submit(std::move(request));
  }

  // The next completed batch: settled with its search, handed to every callback, counted.
  void take(MeasurePool& pool, const std::vector<MeasureCallback>& callbacks) {
    MeasuredRequest done = pool.take();
    const auto it = in_flight_.find(done.ticket);
    if (it == in_flight_.end())
      throw std::logic_error("measure pool returned an unknown ticket " +
                             std::to_string(done.ticket));
    const InFlight batch = std::move(it->second);
    in_flight_.erase(it);
    waiting_for_results_ = false;
    const size_t k = batch.task;
    const auto n = static_cast<long>(batch.configs.size());
    in_flight_trials_ -= n;
    --task_in_flight_[k];
    const std::vector<MeasureResult> results = account(std::move(done), batch.configs.size());
    tuners_[k]->settle(batch.configs);
    const double best_before = tuners_[k]->best_seconds();  // infinite until a config succeeds
    for (const MeasureCallback& callback : callbacks)
      callback({tasks_[k], *tuners_[k], batch.configs, results});
    const bool improved = tuners_[k]->best_seconds() < best_before;
    report_.trials += n;
    report_.curve.push_back({now_, report_.trials, model_seconds()});
    if (is_done(k)) finished_[k] = true;
    for (Slot& slot : open_slots_) {
      if (slot.id != batch.slot) continue;
      --slot.in_flight;
      if (slot.ends_when_flat && !improved) slot.no_more = true;
      slot.trials += n;
      for (const MeasureResult& r : results) slot.used += r.cost_seconds;
    }
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
    // This run's cost, without the records it resumed from.
    report_.measure_seconds = total - resumed_.total_seconds;
    report_.cold_seconds = cold - resumed_.cold_seconds;
    report_.failed_seconds = failed - resumed_.failed_seconds;
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
      count = static_cast<int>(
          std::min<long>(count, options_.budget_trials - report_.trials - in_flight_trials_));
    const auto start = Clock::now();
    std::vector<Config> batch = tuners_[k]->propose(count);
    const double seconds = since(start);
    report_.search_wall_seconds += seconds;
    if (options_.charge_search_time) now_ += seconds;
    return batch;
  }

  // What a finished request's results cost: the tuning clock advances by each candidate's
  // cost. A request without one result per config (a measurer that threw, a worker lost twice)
  // failed as a whole; its wall time is shared among its configs.
  std::vector<MeasureResult> account(MeasuredRequest done, size_t configs) {
    std::vector<MeasureResult> results = std::move(done.results);
    if (results.size() != configs) {
      results.assign(configs, MeasureResult{});
      for (auto& r : results) {
        r.error = MeasureError::kRuntime;
        r.message = "measurer failed for the whole batch";
        r.cost_seconds = done.wall_seconds / static_cast<double>(configs);
      }
    }
    for (const auto& r : results) {
      now_ += r.cost_seconds;
      report_.repeats += static_cast<long>(r.seconds.size());
      report_.cut_short += r.cut_short ? 1 : 0;
    }
    return results;
  }

  // How task k's next batch is repeated: against the faster of its best so far and its
  // baseline kernel, as the tuner is set. A candidate clearly slower than the baseline can
  // never be bound, so it needs no precise timing even before the task has a best.
  RepeatSettings repeat_settings(size_t k) const {
    RepeatSettings r;
    r.adaptive = options_.adaptive_evaluator;
    r.evaluator = options_.evaluator;
    r.best_seconds = task_seconds(tasks_[k], *tuners_[k]);
    r.fixed_repeats = options_.fixed_repeats;
    return r;
  }

  // A slot submits batches while its task is live, the budget allows and its time is not
  // used up.
  bool wants_more(const Slot& slot) const {
    return !slot.no_more && !finished_[slot.task] && !budget_committed() &&
           slot.used < options_.slot_seconds;
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
  SchedulerView refreshed_view(bool skip_busy = false) {
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
      p.finished = finished_[i] || (skip_busy && task_in_flight_[i] > 0);
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
  std::vector<Slot> open_slots_;  // in the order they were opened
  long next_slot_id_ = 0;
  std::map<long, InFlight> in_flight_;  // by ticket
  long next_ticket_ = 0;
  long in_flight_trials_ = 0;
  bool waiting_for_results_ = false;
  ColdStats resumed_;                // what the records resumed from cost, all tasks together
  std::vector<int> task_in_flight_;  // batches in flight per task
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

TuningReport ModelTuner::run(TaskScheduler& scheduler, const ProgressCallback& progress,
                             MeasurePool* pool) {
  InlineMeasurePool in_process(tasks_);
  MeasurePool& measure = pool ? *pool : in_process;
  TuningRun run(tasks_, options_, scheduler.name());
  if (database_ && options_.resume) run.resume_from(*database_);
  run.start();
  for (;;) {
    if (const std::optional<size_t> slot = run.closable_slot()) {
      const size_t task = run.close_slot(*slot);
      run.observe(scheduler, task);
      if (progress) progress(run.progress_event(task));
      run.end_epoch_if_complete(task);
    } else if (run.may_submit(measure)) {
      run.submit(scheduler, measure);
    } else if (run.in_flight()) {
      run.take(measure, measure_callbacks_);
    } else {
      run.stop("no-workers");  // kept only when nothing else stopped it: the pool has no worker
      break;
    }
  }
  return run.finish();
}

}  // namespace nimble::tuning

#pragma once
// One ModelTuner::run: the tasks' searches, the tuning clock, the per-task bookkeeping the
// scheduler sees, and the report being filled. Each public method is one step of the run.
#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tuning/tuner/model_tuner.h"

namespace nimble::tuning {

class TuningRun {
 public:
  // One search per task, seeded from the tuner's seed and the task's index.
  TuningRun(const std::vector<Task>& tasks, const TunerOptions& options, std::string scheduler);

  // Hands the database's records of each task to its search, which then never measures those
  // configs again and starts from their bests. Records of another knob space are skipped.
  void resume_from(const TuningDatabase& database);

  // Marks tasks that resumed finished, and puts the starting model latency at time zero.
  void start();

  bool stopped() const { return !report_.stop_reason.empty(); }

  // The first reason stays: batches still in flight when a run stops come back and close
  // their slots (and maybe an epoch) afterwards.
  void stop(std::string reason);

  // The scheduler's task for the next slot; nothing once it sees no live task to tune. With
  // `skip_busy`, tasks with a batch in flight look finished to it.
  std::optional<size_t> choose(TaskScheduler& scheduler, bool skip_busy);

  // Whether no more batches may be submitted: the tuning time is spent, or the trial budget
  // is taken up by measured and in-flight trials.
  bool budget_committed() const;

  bool in_flight() const { return !in_flight_.empty(); }

  // The first open slot whose batches have all come back and that will submit no more; the
  // run closes slots in the order they were opened.
  std::optional<size_t> closable_slot() const;

  // Closes an open slot: its task's bookkeeping for the scheduler. Returns the task.
  size_t close_slot(size_t s);

  // Whether a batch could be submitted now: the pool has room, the run goes on, and the last
  // submission did not find every live task's candidates in flight.
  bool may_submit(MeasurePool& pool);

  // One batch for an open slot whose task is idle and wants more, or else for a new slot. The
  // scheduler chooses among the live tasks with no batch in flight, so that with several
  // workers each task's search still learns from one batch before proposing the next; only
  // when every live task is being measured does a task get a second batch in flight.
  // Submits nothing when the budget is committed (the run stops), no task is live, or the
  // chosen task has nothing left to propose (it is finished, or the rest of its space is in
  // flight: then the run waits for results first).
  void submit(TaskScheduler& scheduler, MeasurePool& pool);

  // The next completed batch: settled with its search, handed to every callback, counted.
  void take(MeasurePool& pool, const std::vector<MeasureCallback>& callbacks);

  // Shows the scheduler the state after task k's slot (DynaTune refits its belief here).
  void observe(TaskScheduler& scheduler, size_t k);

  // What a user is shown after task k's slot, with what `scheduler` expects of each task.
  ProgressEvent progress_event(size_t k, const TaskScheduler& scheduler);

  // An epoch ends once every live task has had a slot since the last one ended; then the
  // model latency is re-estimated and the survey stop may end the run.
  void end_epoch_if_complete(size_t k);

  // The report with the final latency and a summary per task.
  TuningReport finish();

 private:
  using Clock = std::chrono::steady_clock;

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
    bool one_batch = false;       // ends with its first batch (TaskScheduler::one_batch_slots)
  };
  struct InFlight {
    size_t task = 0;
    long slot = 0;
    std::vector<Config> configs;
  };

  static double since(Clock::time_point start);
  static double thread_cpu_seconds();
  // A task's latency per occurrence: the tuned kernel when it beats the baseline kernel.
  static double task_seconds(const Task& task, const TaskTuner& tuner);

  // Up to a batch of new configs for task k, fewer when the trial budget is nearly spent;
  // the search time is charged to the tuning clock when the options say so.
  std::vector<Config> propose(size_t k);

  // What a finished request's results cost: the tuning clock advances by each candidate's
  // cost. A request without one result per config (a measurer that threw, a worker lost twice)
  // failed as a whole; its wall time is shared among its configs.
  std::vector<MeasureResult> account(MeasuredRequest done, size_t configs);

  // How task k's next batch is repeated: against the faster of its best so far and its
  // baseline kernel, as the tuner is set. A candidate clearly slower than the baseline can
  // never be bound, so it needs no precise timing even before the task has a best.
  RepeatSettings repeat_settings(size_t k) const;

  // A slot submits batches while its task is live, the budget allows and its time is not
  // used up.
  bool wants_more(const Slot& slot) const;

  // A task is done when its space is used up, everything left is cold, or it stopped
  // improving for long enough.
  bool is_done(size_t i) const;

  // Estimated model latency: every task's best (or baseline) times its occurrences.
  double model_seconds() const;

  // What every scheduler call sees, brought up to date with the searches.
  SchedulerView refreshed_view(bool skip_busy = false);

  const std::vector<Task>& tasks_;
  const TunerOptions& options_;
  // What the tasks' one-knob moves did, shared by their tuners (before them: they point at it).
  std::unique_ptr<MoveMemory> moves_;
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

}  // namespace nimble::tuning

#pragma once
// Tunes all tasks of a model: a scheduler hands out fixed time slots, each slot runs the
// chosen task's search in measured batches, every measured batch goes to the measure callbacks
// (the search's cost model, the database), and the survey stop ends the run (goal, budget or
// fading improvement).
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "tuning/database/tuning_database.h"
#include "tuning/measure/adaptive_evaluator.h"
#include "tuning/measure/measure_pool.h"
#include "tuning/scheduler/task_scheduler.h"
#include "tuning/search/task_tuner.h"
#include "tuning/survey/survey_stop.h"
#include "tuning/task/task.h"
#include "tuning/tuner/measure_callback.h"
#include "tuning/tuner/tuning_report.h"

namespace nimble::tuning {

struct TunerOptions {
  double slot_seconds = 30;  // DynaTune's fixed slot length in tuning time
  double budget_seconds = std::numeric_limits<double>::infinity();
  long budget_trials = 0;        // 0: unlimited
  long early_stop_trials = 100;  // a task without improvement for this many trials is finished
  double peak_gflops = 1000;     // device peak, to normalize GFLOPS for the belief model
  std::string device = "cpu";
  std::string run = "run";
  bool resume = true;  // start from the database's records of the same tasks
  bool adaptive_evaluator = true;
  AdaptiveEvaluatorOptions evaluator;
  int fixed_repeats = 10;  // when the adaptive evaluator is off
  // A candidate's timed repeats stop once they cost this share of a slot (the evaluator's
  // max_repeat_cost_seconds; 0: no limit): a candidate whose spread never reaches the
  // evaluator's precision is otherwise timed max_repeats times whatever a repeat costs (on
  // shufflenet_v2's lowered trace a stem neighbour at 0.28 s a repeat took 4.5 s, 43% of a
  // 13.6 s budget on 6 of 10 seeds). At a slot, with the rule re-timed
  // (SearchOptions::retime_cut_short_rule), DynaTune's median final was better or level on 7 of
  // 8 lowered-trace rows at the same budget (shufflenet_v2 2-3% better); its cold share rose
  // over 15% there, as the freed time went to other tasks' first slots (docs/numbers.md,
  // session 16).
  double repeat_cost_slot_share = 1.0;
  // Real runs pay for search time too; simulations leave it out to stay reproducible.
  bool charge_search_time = true;
  SearchOptions search;
  SurveyStopOptions survey;
  uint64_t seed = 0;
};

struct ProgressEvent {
  long slot = 0;
  std::string task;
  long task_trials = 0;
  long trials = 0;
  double tuning_seconds = 0;
  double model_seconds = 0;       // estimated model latency with the best configs so far
  double task_seconds = 0;        // the slot's task per occurrence: its best so far
  double task_start_seconds = 0;  // the same with the task's starting (baseline) kernel
  // Per live task, the model-latency reduction (ms) the scheduler expects from one more slot
  // of it (TaskScheduler::expected_gain_ms); empty for schedulers without a belief.
  std::vector<std::pair<std::string, double>> expected_gain_ms;
};
using ProgressCallback = std::function<void(const ProgressEvent&)>;

class ModelTuner {
 public:
  // With a database, a run resumes from its records (see TunerOptions::resume) and writes
  // every measurement to it.
  ModelTuner(std::vector<Task> tasks, TunerOptions options, TuningDatabase* database = nullptr);
  // Runs `callbacks`, in order, on every measured batch instead of the defaults; `database` is
  // then only read, to resume from.
  ModelTuner(std::vector<Task> tasks, TunerOptions options, TuningDatabase* database,
             std::vector<MeasureCallback> callbacks);
  const std::vector<Task>& tasks() const { return tasks_; }
  // Measures in this process, one batch at a time, without a pool; with one, keeps up to its
  // capacity of batches in flight and takes them back in completion order. A run that stops
  // (budget, goal, improvement rate) still takes back and records every batch in flight.
  TuningReport run(TaskScheduler& scheduler, const ProgressCallback& progress = {},
                   MeasurePool* pool = nullptr);

 private:
  std::vector<Task> tasks_;
  TunerOptions options_;
  TuningDatabase* database_;  // not owned; may be null
  std::vector<MeasureCallback> measure_callbacks_;
};

}  // namespace nimble::tuning

#pragma once
// What a tuning run produced: the model-latency curve over tuning time, per-task summaries,
// why it stopped and what the scheduling cost.
#include <string>
#include <vector>

#include "tuning/search/task_tuner.h"

namespace nimble::tuning {

struct CurvePoint {
  double seconds = 0;  // tuning time (measurement time, plus search time if charged)
  long trials = 0;
  double model_seconds = 0;  // estimated model latency: sum of weight x best latency
};

struct TaskSummary {
  std::string name;
  std::string signature;
  long trials = 0;
  long failures = 0;
  long slots = 0;
  double best_seconds = 0;  // infinity when nothing valid was measured
  double baseline_seconds = 0;
  std::string best_config;  // knob=value list
  bool finished = false;
  ColdStats cold;
};

struct TuningReport {
  std::string scheduler;
  std::string stop_reason;         // "budget", "goal", "improvement-rate", "all-tasks-finished"
  std::vector<CurvePoint> curve;   // after every measured batch
  std::vector<CurvePoint> epochs;  // at the end of every survey epoch
  std::vector<TaskSummary> tasks;
  long slots = 0;
  long trials = 0;
  double tuning_seconds = 0;
  double slot_seconds = 0;
  double scheduler_wall_seconds = 0;  // real time spent in choose/observe, summed
  // CPU time of the thread running them: the scheduler's own cost, which other programs on a
  // loaded machine do not inflate as they do its wall time.
  double scheduler_cpu_seconds = 0;
  double search_wall_seconds = 0;  // real time spent proposing candidates
  double initial_model_seconds = 0;
  double final_model_seconds = 0;
  double cold_time_share = 0;  // share of measurement time spent on cold candidates
  double failed_time_share = 0;
  // Machine-seconds of measurement, all workers together, and the parts spent on cold and on
  // failing candidates (the rest went to hot ones).
  double measure_seconds = 0;
  double cold_seconds = 0;
  double failed_seconds = 0;
  // The same measurement time by where each candidate came from in its task's search (cold and
  // all), indexed by CandidateSource; sums to cold_seconds and measure_seconds.
  std::array<SourceSeconds, kCandidateSources> by_source{};
  long cut_short = 0;  // candidates the adaptive evaluator stopped early
  long repeats = 0;    // timed repeats, all candidates together
  // Timed repeats dropped as stalled by a preemption and timed again (StallRule; measured in
  // this process only), not in `repeats`.
  long stalled_samples = 0;
};

// First tuning time at which the curve's latency is at or below `latency` (infinity: never).
double time_to_reach(const std::vector<CurvePoint>& curve, double latency);
// The curve as CSV with a header line: seconds,trials,model_ms.
std::string curve_to_csv(const std::vector<CurvePoint>& curve);

}  // namespace nimble::tuning

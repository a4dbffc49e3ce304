#pragma once
// A recorded tuning landscape (docs/tuning.md, "Traces"): every configuration of every task of a
// real model, measured once on one machine, with its median time, its spread over repeats and
// what measuring it cost. Replaying it lets the real search and schedulers run against real
// landscapes, fast and reproducibly, without the machine that recorded it.
#include <map>
#include <string>
#include <vector>

#include "tuning/measure/measure_result.h"
#include "tuning/space/knob_space.h"

namespace nimble::tuning {

struct TracePoint {
  Config config;
  MeasureError error = MeasureError::kNone;
  std::string message;
  double seconds = 0;  // median of the recorded repeats
  double noise = 0;    // relative standard deviation of one repeat
  // A measurement with n repeats costs setup + n x repeat (build, correctness check, warm-up).
  double setup_seconds = 0;
  double repeat_seconds = 0;
};

struct TraceKnob {
  std::string name;
  std::string kind;  // "int", "pow2" or "choice"
  std::vector<int64_t> values;
  std::vector<std::string> labels;
  std::string parent;  // categorical knob this one is active under; empty: always active
  std::vector<std::string> parent_labels;
};

struct TraceTask {
  std::string name;
  std::string signature;
  std::string group;
  double flops = 0;
  double weight = 1;
  double baseline_seconds = 0;  // the untuned kernel; infinity when none
  std::vector<TraceKnob> knobs;
  std::vector<TracePoint> points;
  // The configuration that runs untuned (the lowering's rule), measured first; empty: none.
  Config start;
};

struct Trace {
  std::string model;
  std::string device;
  // Untimed warm-up calls in each recorded setup, each about one repeat: the lowered replay's
  // ContextMeasurer makes 2 (a trace header's "warm_ups", 2 for a "lowered" trace without it).
  // 0: the recording's measurer timed its first call, so it has no first-call cut to replay.
  int warm_ups = 0;
  std::vector<TraceTask> tasks;
};

// The task's knob space, restricted to the recorded configurations (a constraint): the search
// proposes only what the trace can answer. Throws std::invalid_argument naming what is wrong.
KnobSpace trace_space(const TraceTask& task);

// Trials without improvement after which a task of the trace is finished: a quarter of its
// recorded configurations, at least 16. A recorded space is all the search can reach; waiting
// the synthetic models' 200 flat trials in a space of 150 would only spend the budget on tails.
long trace_early_stop_trials(const TraceTask& task);

// Tuning seconds to measure every configuration of the task once with `repeats` repeats.
double task_exhaustive_seconds(const TraceTask& task, int repeats);

// The same over every task: what finishing every task can at most take.
double exhaustive_seconds(const Trace& trace, int repeats);

// What a trace says a tuned model runs at, without measurement noise: how runs are re-measured
// before they are scored against each other.
class TraceTruth {
 public:
  explicit TraceTruth(const Trace& trace);
  // The recorded median of the task's configuration, or the task's baseline when that is
  // faster or the configuration did not run.
  double task_seconds(size_t task, const Config& config) const;
  double baseline_model_seconds() const { return baseline_; }
  // Sum over tasks of weight x the fastest recorded configuration (or the baseline if faster).
  double optimum_model_seconds() const { return optimum_; }

 private:
  std::vector<double> baselines_;
  std::vector<std::map<Config, double>> recorded_;
  double baseline_ = 0;
  double optimum_ = 0;
};

}  // namespace nimble::tuning

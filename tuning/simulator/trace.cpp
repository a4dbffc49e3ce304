#include "tuning/simulator/trace.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace nimble::tuning {
namespace {

Knob make_knob(const TraceKnob& k) {
  const auto bad = [&](const std::string& why) {
    return std::invalid_argument("trace knob '" + k.name + "': " + why);
  };
  if (k.kind == "choice") {
    if (k.labels.empty()) throw bad("a choice knob needs labels");
    return Knob::categorical(k.name, k.labels);
  }
  if (k.values.empty()) throw bad("a numeric knob needs values");
  Knob knob = k.kind == "pow2" ? Knob::power_of_two_range(k.name, k.values.front(), k.values.back())
              : k.kind == "int"
                  ? Knob::integer_range(k.name, k.values.front(), k.values.back(),
                                        k.values.size() > 1 ? k.values[1] - k.values[0] : 1)
                  : throw bad("unknown kind '" + k.kind + "' (int, pow2 or choice)");
  // The search steps between neighbouring values: the rebuilt range must be the recorded one.
  for (int i = 0; i < knob.size(); ++i)
    if (knob.size() != static_cast<int>(k.values.size()) || knob.value(i) != k.values[i])
      throw bad("its values are not a contiguous " + k.kind + " range");
  return knob;
}

}  // namespace

KnobSpace trace_space(const TraceTask& task) {
  KnobSpace space;
  for (const TraceKnob& k : task.knobs) space.add_knob(make_knob(k));
  for (const TraceKnob& k : task.knobs)
    if (!k.parent.empty()) space.add_condition(k.name, k.parent, k.parent_labels);
  if (task.points.empty())
    throw std::invalid_argument("trace task '" + task.name + "' has no configuration");
  std::vector<Config> recorded;
  for (const TracePoint& p : task.points) {
    if (!space.valid(p.config))
      throw std::invalid_argument("trace task '" + task.name + "': configuration " +
                                  config_to_json(p.config) + " is not valid in its knob space");
    recorded.push_back(p.config);
  }
  space.restrict_to("recorded in the trace", recorded);
  if (!task.start.empty() && !space.valid(task.start))
    throw std::invalid_argument("trace task '" + task.name + "': its start " +
                                config_to_json(task.start) + " is not a recorded configuration");
  return space;
}

long trace_early_stop_trials(const TraceTask& task) {
  return std::max<long>(16, static_cast<long>(task.points.size()) / 4);
}

double task_exhaustive_seconds(const TraceTask& task, int repeats) {
  double total = 0;
  for (const TracePoint& p : task.points)
    total += p.setup_seconds + (p.error == MeasureError::kNone ? repeats * p.repeat_seconds : 0);
  return total;
}

double exhaustive_seconds(const Trace& trace, int repeats) {
  double total = 0;
  for (const TraceTask& t : trace.tasks) total += task_exhaustive_seconds(t, repeats);
  return total;
}

TraceTruth::TraceTruth(const Trace& trace) {
  for (const TraceTask& t : trace.tasks) {
    baselines_.push_back(t.baseline_seconds);
    recorded_.emplace_back();
    double best = t.baseline_seconds;
    for (const TracePoint& p : t.points) {
      if (p.error != MeasureError::kNone) continue;
      recorded_.back()[p.config] = p.seconds;
      best = std::min(best, p.seconds);
    }
    baseline_ += t.weight * t.baseline_seconds;
    optimum_ += t.weight * best;
  }
}

double TraceTruth::task_seconds(size_t task, const Config& config) const {
  const auto& recorded = recorded_.at(task);
  const auto it = recorded.find(config);
  return it == recorded.end() ? baselines_[task] : std::min(it->second, baselines_[task]);
}

}  // namespace nimble::tuning

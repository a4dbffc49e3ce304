#include "tuning/simulator/trace_measurer.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <stdexcept>

namespace nimble::tuning {

TraceMeasurer::TraceMeasurer(std::shared_ptr<const Trace> trace, size_t task, uint64_t seed)
    : trace_(std::move(trace)), task_(trace_->tasks.at(task)), seed_(seed) {
  for (size_t i = 0; i < task_.points.size(); ++i) index_.emplace(task_.points[i].config, i);
}

std::vector<MeasureResult> TraceMeasurer::measure(const std::vector<Config>& batch,
                                                  const RepeatPolicy& repeats) {
  std::vector<MeasureResult> out(batch.size());
  for (size_t i = 0; i < batch.size(); ++i) {
    MeasureResult& r = out[i];
    const auto it = index_.find(batch[i]);
    if (it == index_.end()) {
      // The space's constraint keeps the search inside the trace; a config from elsewhere (a
      // database of another run) is answered as a failure, not an exception.
      r.error = MeasureError::kCompile;
      r.message = "configuration " + config_to_json(batch[i]) + " is not in the trace";
      continue;
    }
    const TracePoint& p = task_.points[it->second];
    r.cost_seconds = p.setup_seconds;
    if (p.error != MeasureError::kNone) {
      r.error = p.error;
      r.message = p.message;
      continue;
    }
    const uint64_t before = measured_before_[batch[i]]++;
    std::mt19937_64 rng((seed_ * 1000003ULL ^ ConfigHash{}(batch[i])) +
                        before * 0x9e3779b97f4a7c15ULL);
    // The log-normal whose relative standard deviation is the recorded one: a spread of 3 (a
    // loaded machine's stalls) gives a wide, right-skewed tail, not a symmetric one.
    std::normal_distribution<double> normal(0, std::sqrt(std::log1p(p.noise * p.noise)));
    if (trace_->warm_ups > 0) {
      // ContextMeasurer's first-call cut: the first warm-up call (the draw the first timed
      // repeat would have had) already hopeless, it is the one sample, and neither the other
      // warm-ups nor a repeat are paid; at least that first call's cost stays.
      auto first_rng = rng;
      auto first_normal = normal;
      const double first = p.seconds * std::exp(first_normal(first_rng));
      if (repeats.slow_on_first_call(first)) {
        r.seconds = {first};
        r.cut_short = true;
        r.cost_seconds =
            std::max(p.setup_seconds - (trace_->warm_ups - 1) * p.repeat_seconds, p.repeat_seconds);
        continue;
      }
    }
    time_with_policy(
        repeats,
        [&] {
          r.cost_seconds += p.repeat_seconds;
          return TimedRepeat{p.seconds * std::exp(normal(rng)), p.repeat_seconds};
        },
        r);
  }
  return out;
}

std::vector<Task> make_trace_model(const std::shared_ptr<const Trace>& trace, uint64_t noise_seed) {
  if (!trace || trace->tasks.empty()) throw std::invalid_argument("the trace has no task");
  std::vector<Task> tasks;
  for (size_t i = 0; i < trace->tasks.size(); ++i) {
    const TraceTask& t = trace->tasks[i];
    Task task;
    task.name = t.name;
    task.signature = t.signature;
    task.group = t.group;
    task.space = trace_space(t);
    task.flops = t.flops;
    task.weight = t.weight;
    task.baseline_seconds = t.baseline_seconds;
    task.start = t.start;
    task.early_stop_trials = trace_early_stop_trials(t);
    task.measurer = std::make_shared<TraceMeasurer>(trace, i, noise_seed * 7919 + i);
    tasks.push_back(std::move(task));
  }
  return tasks;
}

}  // namespace nimble::tuning

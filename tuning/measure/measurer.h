#pragma once
// The one thing the tuner needs from a kernel: time a batch of configurations.
#include <chrono>
#include <type_traits>
#include <vector>

#include "tuning/measure/measure_result.h"
#include "tuning/space/config.h"

namespace nimble::tuning {

enum class RepeatDecision { kContinue, kEnough, kCutShort };

// Decides, after every timed repeat of one candidate, whether to time it again. The
// measurer owns the loop because only it knows how to re-run a built kernel cheaply.
// `repeats_cost_seconds`: the tuning time the candidate's timed repeats have cost so far (a
// repeat in a replay costs the whole replay, not the op's time in `seconds`).
class RepeatPolicy {
 public:
  virtual ~RepeatPolicy() = default;
  virtual RepeatDecision after_repeat(const std::vector<double>& seconds,
                                      double repeats_cost_seconds) const = 0;
  // Whether a candidate whose first, untimed warm-up call took `seconds` is already hopeless:
  // a measurer that warms up before timing may then record that call as the candidate's one
  // sample, cut short ("measured-slow"), and skip its other warm-ups and every timed repeat.
  virtual bool slow_on_first_call(double /*seconds*/) const { return false; }
};

class Measurer {
 public:
  virtual ~Measurer() = default;
  // One result per config, in order. Must not throw for a failing candidate: report it.
  virtual std::vector<MeasureResult> measure(const std::vector<Config>& batch,
                                             const RepeatPolicy& repeats) = 0;
};

// Timed repeats a loaded machine's scheduler stalled: a sample over `factor` x the median of
// the candidate's samples (once it has 3) timed a preemption, not the kernel (one call of an op
// in a replay: 0.16 ms, a preempted one 3.6-23 ms, whole time slices). Such samples are dropped
// and timed again, at most `max_dropped` a candidate (the cost stays charged). Off (factor 0)
// by default; the real measurers of single calls turn it on (ContextMeasurer).
struct StallRule {
  double factor = 0;
  int max_dropped = 0;
};

// Drops from `seconds` (at least 3) up to `limit` samples over `factor` x their median, the
// largest first; returns how many it dropped.
int drop_stalled(std::vector<double>& seconds, double factor, int limit);

// One timed repeat and what it cost (a simulated measurer's recorded cost).
struct TimedRepeat {
  double seconds = 0;
  double cost_seconds = 0;
};

// Runs `run_once` under `repeats` and fills seconds/cut_short (and stalled_samples, under
// `stalls`): the loop every measurer needs. `run_once` returns the repeat's time (its cost is
// then the wall time of the call) or a TimedRepeat.
template <typename RunOnce>
void time_with_policy(const RepeatPolicy& repeats, RunOnce&& run_once, MeasureResult& result,
                      const StallRule& stalls = {}) {
  double cost = 0;
  for (;;) {
    if constexpr (std::is_same_v<std::decay_t<decltype(run_once())>, TimedRepeat>) {
      const TimedRepeat r = run_once();
      result.seconds.push_back(r.seconds);
      cost += r.cost_seconds;
    } else {
      const auto begin = std::chrono::steady_clock::now();
      result.seconds.push_back(run_once());
      cost += std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
    }
    if (stalls.factor > 0 && result.seconds.size() >= 3 &&
        result.stalled_samples < stalls.max_dropped)
      result.stalled_samples +=
          drop_stalled(result.seconds, stalls.factor, stalls.max_dropped - result.stalled_samples);
    const RepeatDecision d = repeats.after_repeat(result.seconds, cost);
    if (d == RepeatDecision::kContinue) continue;
    result.cut_short = d == RepeatDecision::kCutShort;
    return;
  }
}

}  // namespace nimble::tuning

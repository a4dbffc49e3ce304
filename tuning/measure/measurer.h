#pragma once
// The one thing the tuner needs from a kernel: time a batch of configurations.
#include <vector>

#include "tuning/measure/measure_result.h"
#include "tuning/space/config.h"

namespace nimble::tuning {

enum class RepeatDecision { kContinue, kEnough, kCutShort };

// Decides, after every timed repeat of one candidate, whether to time it again. The
// measurer owns the loop because only it knows how to re-run a built kernel cheaply.
class RepeatPolicy {
 public:
  virtual ~RepeatPolicy() = default;
  virtual RepeatDecision after_repeat(const std::vector<double>& seconds) const = 0;
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

// Runs `run_once` under `repeats` and fills seconds/cut_short: the loop every measurer needs.
template <typename RunOnce>
void time_with_policy(const RepeatPolicy& repeats, RunOnce&& run_once, MeasureResult& result) {
  for (;;) {
    result.seconds.push_back(run_once());
    const RepeatDecision d = repeats.after_repeat(result.seconds);
    if (d == RepeatDecision::kContinue) continue;
    result.cut_short = d == RepeatDecision::kCutShort;
    return;
  }
}

}  // namespace nimble::tuning

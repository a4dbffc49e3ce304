#pragma once
// What timing one candidate produced; failures are data, not exceptions, so that a broken
// candidate never stops the tuner.
#include <string>
#include <vector>

namespace nimble::tuning {

enum class MeasureError { kNone = 0, kCompile = 1, kRuntime = 2, kTimeout = 3 };

const char* to_string(MeasureError error);
MeasureError measure_error_from_string(const std::string& name);

struct MeasureResult {
  std::vector<double> seconds;  // one entry per timed repeat
  MeasureError error = MeasureError::kNone;
  std::string message;
  double cost_seconds = 0;  // tuning time the candidate consumed: build plus every repeat
  bool cut_short = false;   // the evaluator stopped repeating because it was clearly slow
  int stalled_samples = 0;  // timed repeats dropped as stalled and timed again (StallRule)

  bool ok() const { return error == MeasureError::kNone && !seconds.empty(); }
  double mean_seconds() const;
};

// The median of `seconds` (the mean of the middle two for an even count; 0 for none): how the
// re-timing and the binding compare candidates, since timings on a shared machine are
// heavy-tailed.
double median_seconds(std::vector<double> seconds);

}  // namespace nimble::tuning

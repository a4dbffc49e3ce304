#pragma once
// Trimmer's survey stop. After every epoch (each live task has had a slot) the model latency is
// re-estimated; tuning stops when it reaches a goal, when the budget is spent (the tuner checks
// that), or when the rate of latency improvement falls:
//   x_t  = w2 * df_t / dO_t               (latency change per tuning second over the epoch)
//   stop = w1 * (x_t - x_{t-1}) / x_{t-1} <= phi     (phi = -0.25)
// The paper prints "x_t + x_{t-1}" in the numerator; with both rates negative (improving) that
// quantity is always >= 1 and could never fall below a negative phi, so we read it as the
// relative change of the rate, which is what the text describes. The signs w1, w2 follow the
// paper's cases. `patience` consecutive epochs must meet the criterion (Trimmer's "plateau
// iterations"), so one unlucky epoch does not end a run.
#include <optional>
#include <string>

namespace nimble::tuning {

struct SurveyStopOptions {
  double goal_seconds = 0;  // stop once the model latency is at or below this (0: no goal)
  double phi = -0.25;
  bool stop_on_rate = true;
  int patience = 2;
};

class SurveyStop {
 public:
  explicit SurveyStop(SurveyStopOptions options = {}) : options_(options) {}
  // After an epoch that ended at `tuning_seconds` with model latency `model_seconds`; returns
  // why tuning should stop, or nothing.
  std::optional<std::string> after_epoch(double model_seconds, double tuning_seconds);
  // The criterion's value for rates x_t and x_{t-1}; exposed for tests.
  static double criterion(double x_t, double x_previous);
  static double rate(double latency_change, double time_change);
  int epochs() const { return epochs_; }

 private:
  SurveyStopOptions options_;
  int epochs_ = 0;
  double last_latency_ = 0;
  double last_time_ = 0;
  std::optional<double> last_rate_;
  int strikes_ = 0;
};

}  // namespace nimble::tuning

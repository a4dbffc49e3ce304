#include "tuning/survey/survey_stop.h"

#include <cmath>
#include <limits>

namespace nimble::tuning {

double SurveyStop::rate(double latency_change, double time_change) {
  if (time_change == 0) return 0;
  const double w2 = (latency_change < 0 && time_change < 0) ? -1.0 : 1.0;
  return w2 * latency_change / time_change;
}

double SurveyStop::criterion(double x_t, double x_previous) {
  if (x_previous == 0) {
    // No improvement in the last epoch: stop if there is none now either, go on if it resumed.
    return x_t < 0 ? std::numeric_limits<double>::infinity() : -1.0;
  }
  const bool slower_now = x_t > 0;
  const bool slower_before = x_previous > 0;
  const double w1 = (slower_now && slower_before) || (!slower_now && slower_before) ? -1.0 : 1.0;
  return w1 * (x_t - x_previous) / x_previous;
}

std::optional<std::string> SurveyStop::after_epoch(double model_seconds, double tuning_seconds) {
  ++epochs_;
  if (options_.goal_seconds > 0 && model_seconds <= options_.goal_seconds) return "goal";
  std::optional<std::string> stop;
  if (epochs_ > 1 && std::isfinite(model_seconds) && std::isfinite(last_latency_)) {
    const double x = rate(model_seconds - last_latency_, tuning_seconds - last_time_);
    if (last_rate_ && options_.stop_on_rate) {
      strikes_ = criterion(x, *last_rate_) <= options_.phi ? strikes_ + 1 : 0;
      if (strikes_ >= options_.patience) stop = "improvement-rate";
    }
    last_rate_ = x;
  }
  last_latency_ = model_seconds;
  last_time_ = tuning_seconds;
  return stop;
}

}  // namespace nimble::tuning

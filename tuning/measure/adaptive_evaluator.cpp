#include "tuning/measure/adaptive_evaluator.h"

#include <cmath>

namespace nimble::tuning {

RepeatDecision AdaptiveEvaluator::after_repeat(const std::vector<double>& seconds,
                                               double repeats_cost_seconds) const {
  const auto n = static_cast<double>(seconds.size());
  double mean = 0;
  for (const double s : seconds) mean += s;
  mean /= n;
  if (std::isfinite(best_seconds_) && best_seconds_ > 0) {
    // A single sample at the cold line is not worth a second one: even if noise inflated it,
    // the candidate is far from competitive.
    if (n == 1 && seconds[0] > options_.one_sample_cut_factor * best_seconds_)
      return RepeatDecision::kCutShort;
  }
  if (static_cast<int>(n) < options_.min_repeats) return RepeatDecision::kContinue;
  double var = 0;
  for (const double s : seconds) var += (s - mean) * (s - mean);
  var /= (n - 1);
  const double cv = mean > 0 ? std::sqrt(var) / mean : 0.0;
  const double relative_error = cv / std::sqrt(n);
  if (std::isfinite(best_seconds_) && best_seconds_ > 0) {
    const double optimistic = mean * (1 - options_.confidence_z * relative_error);
    if (optimistic > options_.slower_than_best_factor * best_seconds_)
      return RepeatDecision::kCutShort;
  }
  if (relative_error <= options_.target_relative_error) return RepeatDecision::kEnough;
  if (repeats_cost_seconds > options_.max_repeat_cost_seconds) return RepeatDecision::kEnough;
  if (static_cast<int>(n) >= options_.max_repeats) return RepeatDecision::kEnough;
  return RepeatDecision::kContinue;
}

bool AdaptiveEvaluator::slow_on_first_call(double seconds) const {
  return options_.first_call_cut_factor > 0 && std::isfinite(best_seconds_) && best_seconds_ > 0 &&
         seconds > options_.first_call_cut_factor * best_seconds_;
}

}  // namespace nimble::tuning

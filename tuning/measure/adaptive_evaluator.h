#pragma once
// AdaTune's adaptive evaluator: repeat a timing until its mean is known to a relative
// precision that follows the observed coefficient of variation, and stop early once a
// candidate is clearly slower than the task's best.
#include <limits>

#include "tuning/measure/measurer.h"

namespace nimble::tuning {

struct AdaptiveEvaluatorOptions {
  int min_repeats = 2;  // a coefficient of variation needs two samples
  int max_repeats = 16;
  // Stop when the relative standard error of the mean, cv / sqrt(n), falls below this.
  double target_relative_error = 0.02;
  // Cut a candidate short once even its optimistic mean is this many times the best.
  double slower_than_best_factor = 1.5;
  // ... or once its first sample is this many times the best, the line past which the cold
  // filter calls a candidate cold: such a candidate then costs one timed call, not two. (Cutting
  // at 3x left 14.4% of tuning time on cold candidates in 12 real-model runs; at 2x, 12.8%,
  // with tuned replays as fast.)
  double one_sample_cut_factor = 2.0;
  // ... or, before any timed repeat, once a measurer's first warm-up call is this many times the
  // best (`slow_on_first_call`; 0: never). Generous, as a first call pays one-time costs
  // (packing, a library's primitive creation, cold caches). On the lowered traces a few such
  // candidates cost seconds each (oneDNN on a 232>232 1x1: 0.92 s of setup, 0.59 s a call).
  double first_call_cut_factor = 3.0;
  double confidence_z = 2.0;  // "optimistic" = mean lowered by z standard errors
  // Stop repeating (enough: the mean so far is the candidate's time) once its timed repeats have
  // cost more than this, after min_repeats: precision on one candidate is then dearer than
  // other candidates. The run sets it from the slot (TunerOptions::repeat_cost_slot_share).
  double max_repeat_cost_seconds = std::numeric_limits<double>::infinity();
};

class AdaptiveEvaluator : public RepeatPolicy {
 public:
  AdaptiveEvaluator(AdaptiveEvaluatorOptions options, double best_seconds)
      : options_(options), best_seconds_(best_seconds) {}
  RepeatDecision after_repeat(const std::vector<double>& seconds,
                              double repeats_cost_seconds) const override;
  bool slow_on_first_call(double seconds) const override;

 private:
  AdaptiveEvaluatorOptions options_;
  double best_seconds_;
};

// The AutoTVM default, kept as the baseline the adaptive evaluator is compared against.
class FixedRepeats : public RepeatPolicy {
 public:
  explicit FixedRepeats(int repeats) : repeats_(repeats) {}
  RepeatDecision after_repeat(const std::vector<double>& seconds, double) const override {
    return static_cast<int>(seconds.size()) >= repeats_ ? RepeatDecision::kEnough
                                                        : RepeatDecision::kContinue;
  }

 private:
  int repeats_;
};

}  // namespace nimble::tuning

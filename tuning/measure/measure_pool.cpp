#include "tuning/measure/measure_pool.h"

#include <chrono>
#include <stdexcept>

namespace nimble::tuning {

std::unique_ptr<RepeatPolicy> make_repeat_policy(const RepeatSettings& settings) {
  if (settings.adaptive)
    return std::make_unique<AdaptiveEvaluator>(settings.evaluator, settings.best_seconds);
  return std::make_unique<FixedRepeats>(settings.fixed_repeats);
}

MeasuredRequest InlineMeasurePool::take() {
  if (queue_.empty()) throw std::logic_error("InlineMeasurePool::take: nothing was submitted");
  const MeasureRequest request = std::move(queue_.front());
  queue_.pop_front();
  MeasuredRequest out;
  out.ticket = request.ticket;
  const auto start = std::chrono::steady_clock::now();
  try {
    out.results = tasks_[request.task].measurer->measure(request.configs,
                                                         *make_repeat_policy(request.repeats));
  } catch (const std::exception&) {
    out.results.clear();  // a broken measurer fails its batch; the tuner keeps going
  }
  out.wall_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return out;
}

}  // namespace nimble::tuning

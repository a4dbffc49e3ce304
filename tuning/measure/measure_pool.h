#pragma once
// Where the tuner's batches are measured. The tuner submits (task, batch) requests and takes
// completed ones back in completion order; a pool measures up to `capacity()` batches at once
// (one per worker), in this process or on other machines. The tuner stays the one that
// proposes, schedules and records: a pool only times what it is given.
#include <cstddef>
#include <deque>
#include <limits>
#include <memory>
#include <vector>

#include "tuning/measure/adaptive_evaluator.h"
#include "tuning/task/task.h"

namespace nimble::tuning {

// How a batch's candidates are repeated, as data, so that a worker elsewhere can rebuild the
// policy: AdaTune's evaluator against the task's best at submission time, or fixed repeats.
struct RepeatSettings {
  bool adaptive = true;
  AdaptiveEvaluatorOptions evaluator;
  double best_seconds = std::numeric_limits<double>::infinity();
  int fixed_repeats = 10;
};

std::unique_ptr<RepeatPolicy> make_repeat_policy(const RepeatSettings& settings);

struct MeasureRequest {
  long ticket = 0;  // the tuner's name for the request, handed back with its results
  size_t task = 0;  // index into the tuner's tasks
  std::vector<Config> configs;
  RepeatSettings repeats;
};

// A request's results, one per config in order; any other count (a measurer that threw, a
// worker that died) means the whole batch failed after `wall_seconds`.
struct MeasuredRequest {
  long ticket = 0;
  std::vector<MeasureResult> results;
  double wall_seconds = 0;
};

class MeasurePool {
 public:
  virtual ~MeasurePool() = default;
  // Requests that may be in flight at once now; it shrinks when workers are lost (0: none
  // left, the tuner stops once what is in flight has come back).
  virtual int capacity() = 0;
  virtual void submit(MeasureRequest request) = 0;
  // The next completed request, in completion order; blocks until one completes.
  virtual MeasuredRequest take() = 0;
};

// Measures in this process with each task's own measurer, one batch at a time: the tuner's
// behaviour without workers.
class InlineMeasurePool : public MeasurePool {
 public:
  explicit InlineMeasurePool(const std::vector<Task>& tasks) : tasks_(tasks) {}
  int capacity() override { return 1; }
  void submit(MeasureRequest request) override { queue_.push_back(std::move(request)); }
  MeasuredRequest take() override;

 private:
  const std::vector<Task>& tasks_;
  std::deque<MeasureRequest> queue_;
};

}  // namespace nimble::tuning

#pragma once
// The operator scheduler: which task gets the next time slot. Every scheduler sees the same
// view of the tuning state and answers through the same call, so they are interchangeable
// by name (see scheduler_factory.h).
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace nimble::tuning {

struct TaskProgress {
  std::string name;
  std::string group;
  double flops = 0;
  double weight = 1;
  double best_seconds = 0;      // the task's contribution per occurrence (baseline until tuned)
  double baseline_seconds = 0;  // the task's start's (0: unknown)
  long trials = 0;
  double measure_seconds = 0;  // its measurements' seconds so far, cold ones included
  long slots = 0;              // slots given to the task so far
  long last_slot_trials = 0;
  bool finished = false;  // no improvement for long enough, or space exhausted
  // Its search's last proposal found only candidates the cold filter calls cold
  // (TaskTuner::only_cold_left): what is left of its space is expected at least 2x its best.
  bool only_cold_left = false;
  const std::vector<double>* best_gflops_history = nullptr;    // per trial
  const std::vector<double>* best_seconds_per_slot = nullptr;  // after each of its slots
};

struct SchedulerView {
  const std::vector<TaskProgress>& tasks;
  long slot = 0;             // slots handed out so far, all tasks together
  double peak_gflops = 1;    // the device's peak, to normalize curves
  double model_seconds = 0;  // current estimated model latency
  double initial_model_seconds = 0;
};

class TaskScheduler {
 public:
  virtual ~TaskScheduler() = default;
  virtual std::string name() const = 0;
  // The task for the next slot, or nothing when no live task should be tuned any more.
  virtual std::optional<size_t> choose(const SchedulerView& view) = 0;
  // After the chosen task's slot; schedulers with beliefs update them here.
  virtual void observe(size_t /*task*/, const SchedulerView& /*view*/) {}
  // Whether the slot about to open for `task` also ends at its first measured batch that does
  // not improve the task's best, before its full length.
  virtual bool slot_ends_when_flat(size_t /*task*/, const SchedulerView& /*view*/) const {
    return false;
  }
  // Whether every slot of this scheduler is one batch of its task's search, whatever the slot's
  // length in seconds (Ansor's round: one call of the search policy for num_measures_per_round
  // measurements, so each decision sees the same number of trials on a cheap task as on a
  // dear one).
  virtual bool one_batch_slots() const { return false; }
  // The weighted model-latency reduction (ms) this scheduler expects from one more slot of
  // `task`, for progress shown to users; nothing from a scheduler without a belief, or before
  // it has one for the task.
  virtual std::optional<double> expected_gain_ms(const SchedulerView& /*view*/,
                                                 size_t /*task*/) const {
    return std::nullopt;
  }
};

// Live tasks in index order, the candidate set of every scheduler.
inline std::vector<size_t> live_tasks(const SchedulerView& view) {
  std::vector<size_t> live;
  for (size_t i = 0; i < view.tasks.size(); ++i)
    if (!view.tasks[i].finished) live.push_back(i);
  return live;
}

}  // namespace nimble::tuning

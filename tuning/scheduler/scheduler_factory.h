#pragma once
// Schedulers by name, so that a command line or a Python call can pick one.
#include <memory>
#include <string>
#include <vector>

#include "tuning/scheduler/dynatune_scheduler.h"
#include "tuning/scheduler/gradient_scheduler.h"
#include "tuning/scheduler/task_scheduler.h"

namespace nimble::tuning {

struct SchedulerOptions {
  long sequential_trials_per_task = 0;  // 0: until the task stops improving
  GradientSchedulerOptions gradient;
  DynaTuneOptions dynatune;
  uint64_t seed = 0;
};

// "sequential", "round-robin", "random", "flop-linear", "gradient" (Ansor), "dynatune".
std::vector<std::string> scheduler_names();
std::unique_ptr<TaskScheduler> make_scheduler(const std::string& name,
                                              const SchedulerOptions& options);

}  // namespace nimble::tuning

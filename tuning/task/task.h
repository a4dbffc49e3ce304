#pragma once
// A tuning task: one kernel shape of the model, with the space of its schedules.
#include <limits>
#include <memory>
#include <string>

#include "tuning/measure/measurer.h"
#include "tuning/space/knob_space.h"

namespace nimble::tuning {

struct Task {
  std::string name;
  std::string signature;  // identifies the kernel shape in the database across runs
  std::string group;      // tasks of one group share a best GFLOPS estimate (Ansor's beta term)
  KnobSpace space;
  double flops = 0;
  double weight = 1;  // how many times the task occurs in the model
  // Latency of the untuned kernel the model would otherwise run; infinity when none exists.
  double baseline_seconds = std::numeric_limits<double>::infinity();
  std::shared_ptr<Measurer> measurer;
  // The config of what runs untuned, where the space has it (empty: none): measured first, so
  // that the search starts from the default and never reports a best below it.
  Config start;
  // Trials without improvement after which this task is finished, where it is fewer than the
  // run's early_stop_trials (0: the run's): a recorded space of 150 configurations must not wait
  // 200 flat trials for its early stop.
  long early_stop_trials = 0;
};

}  // namespace nimble::tuning

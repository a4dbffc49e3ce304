#pragma once
// Answers a candidate's measurement from a trace: its recorded median times log-normal noise of
// its recorded relative spread on every repeat, and its recorded cost (setup plus one recorded
// repeat per repeat the policy asks for), so that the adaptive evaluator's cuts pay off as they
// would.
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "tuning/measure/measurer.h"
#include "tuning/simulator/trace.h"
#include "tuning/task/task.h"

namespace nimble::tuning {

class TraceMeasurer : public Measurer {
 public:
  // The noise of a configuration is drawn from a stream seeded by `seed`, the configuration and
  // how often it was measured before: two runs of one seed see the same timing of a
  // configuration, whatever order their schedulers measured things in, and a configuration
  // measured again (a cut-short rule re-timed) gets fresh draws.
  TraceMeasurer(std::shared_ptr<const Trace> trace, size_t task, uint64_t seed);
  std::vector<MeasureResult> measure(const std::vector<Config>& batch,
                                     const RepeatPolicy& repeats) override;

 private:
  std::shared_ptr<const Trace> trace_;  // keeps the task's points alive
  const TraceTask& task_;
  uint64_t seed_;
  std::unordered_map<Config, size_t, ConfigHash> index_;
  std::unordered_map<Config, uint64_t, ConfigHash> measured_before_;
};

// The trace's tasks for the tuner, each measured by a TraceMeasurer of seed `noise_seed`.
std::vector<Task> make_trace_model(const std::shared_ptr<const Trace>& trace, uint64_t noise_seed);

}  // namespace nimble::tuning

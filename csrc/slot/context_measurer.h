#pragma once
// Tuning a lowered replay where it runs: one task per lowered convolution or linear layer shape,
// over the "prepacked" or "prepacked_linear" family's knobs (the kernel, its intra-op threads
// and nimble's kernel parameters),
// each candidate put in place of the convolutions of its shape in the replay itself, the replay
// run, and the candidate's time read from the executor's per-op timing. The other ops run as they
// are, so a candidate gets the replay's input layouts, the caches its neighbours leave and the
// replay's threads; timed alone on NCHW copies, a kernel's ranking can differ (docs/tuning.md,
// "Timed where it runs"). Records are keyed by lowered_signature (lowering_choices.h), which
// `prepare(tuned=db)` reads.
#include <ATen/core/Tensor.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "csrc/kernels/kernel_measurer.h"
#include "csrc/kernels/kernel_space.h"
#include "csrc/runtime/replay.h"
#include "csrc/slot/lowered_product.h"
#include "tuning/task/task.h"

namespace nimble::slot {

// One lowered convolution or linear layer shape of a replay and where it occurs.
struct ContextTask {
  struct Site {
    int op = -1;
    int arg = -1;                  // the index of its packed argument
    LoweredProduct packed;         // the program's
    std::vector<at::Tensor> live;  // input and residual as the replay hands them (capture_live)
    at::Tensor reference;          // the rule's kernel on `live`
  };
  std::shared_ptr<const kernels::KernelSpace> space;  // lowered_space
  std::string signature;                              // lowered_signature
  std::string name;                                   // short, for progress lines
  std::vector<Site> sites;                            // in program order
};

// The replay's lowered convolutions and linear layers grouped by lowered_signature; empty for a
// replay with none.
std::vector<ContextTask> context_tasks(const Replay& replay);

// Runs the replay once on `inputs` and keeps every site's live operands and the rule's result
// on them (what candidates are checked against). The replay's kernels are as before after it.
void capture_live(Replay& replay, const std::vector<at::Tensor>& inputs,
                  std::vector<ContextTask>& tasks);

class ContextMeasurer : public tuning::Measurer {
 public:
  // `replay` must outlive the measurer; `task` has its live operands (capture_live).
  // options.timeout_seconds bounds a candidate's first in-context call, as alone.
  ContextMeasurer(Replay& replay, const std::vector<at::Tensor>& inputs, ContextTask task,
                  kernels::MeasureOptions options, int warm_ups = 2);
  std::vector<tuning::MeasureResult> measure(const std::vector<tuning::Config>& batch,
                                             const tuning::RepeatPolicy& repeats) override;
  // The rule's configuration (the space's default) timed the same way.
  double baseline_seconds(int repeats = 5);
  // Timed replays a loaded machine preempted in the task's ops are dropped and timed again
  // (tuning::StallRule; default: over 3x the candidate's median, at most 4 a candidate). Under
  // load, one such call among 16 (3.6-23 ms against 0.16) made a candidate's mean 2-7x its
  // median, cold by the tuner's judgement and timed to the last repeat: 38% of a loaded run's
  // measurement time (docs/tuning.md, "Adaptive evaluator"). {0, 0} keeps every sample.
  void set_stall_rule(tuning::StallRule stalls) { stalls_ = stalls; }

 private:
  tuning::MeasureResult measure_one(const tuning::Config& config,
                                    const tuning::RepeatPolicy& repeats);
  // Seconds per call of the task's ops in one timed replay: their mean.
  double timed_replay();

  Replay& replay_;
  std::vector<at::Tensor> inputs_;
  ContextTask task_;
  kernels::MeasureOptions options_;
  int warm_ups_;
  tuning::StallRule stalls_{3.0, 4};
};

// The tuner's tasks for a lowered replay, live operands captured first; `baseline` is called
// once per task with its index after the rule's time was measured (for progress).
std::vector<tuning::Task> context_tuning_tasks(Replay& replay,
                                               const std::vector<at::Tensor>& inputs,
                                               std::vector<ContextTask> tasks,
                                               const kernels::MeasureOptions& options,
                                               const std::function<void(int)>& baseline = {});

}  // namespace nimble::slot

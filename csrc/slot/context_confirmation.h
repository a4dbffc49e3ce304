#pragma once
// The search's best candidates of a lowered replay's tasks timed again, side by side with the
// rule's kernel, before anyone relies on them. The search times each of a few hundred
// candidates a task with one or two replays (the adaptive evaluator cuts the rest), and keeps
// the fastest: the minimum of hundreds of noisy times, which on a machine with other work
// beside it is the candidate that ran in the quietest moment, not the fastest kernel. On
// mobilenet_v2 at 64x64 that minimum promised 43% off the convolutions' time while the same
// kernels, alternated with the rule's in one process, ran within 2% of it (docs/tuning.md,
// "Timed where it runs"). Here the top few distinct configurations of each task and the rule's
// run in turn, round after round, in the replay as the search timed them; each is judged by
// its time against the rule's in the same round, and the rule's times and those of the
// candidates that beat it go to the database as records of run kConfirmedRun, which
// lowering_choices prefers over the search's.
#include <ATen/core/Tensor.h>

#include <functional>
#include <string>
#include <vector>

#include "csrc/kernels/kernel_measurer.h"
#include "csrc/runtime/replay.h"
#include "tuning/database/tuning_database.h"
#include "tuning/space/config.h"

namespace nimble::slot {

// The database runs of the re-timed records: the rule's and each candidate that beat it, and
// the candidates that did not.
inline constexpr const char* kConfirmedRun = "confirmed in context";
inline constexpr const char* kRefutedRun = "not confirmed in context";

struct ConfirmOptions {
  std::string device;  // whose records are re-timed, and the device of the records written
  int candidates = 3;  // distinct configurations besides the rule's, the search's fastest first
  int rounds = 10;     // each configuration once a round, in rotating order
  int repeats = 2;     // timed replays of a configuration each round (their mean is its sample)
  double budget_seconds = 0;  // tasks are re-timed, the most promising first, until it is spent
  // A candidate beats the rule where its median time over the rule's in the same round is
  // below 1 - min_gain, it was faster in at least faster_share of the rounds, and its median
  // is below the rule's. (With 10 rounds, a candidate no faster than the rule passes the
  // rounds' test 5.5% of the time.)
  double min_gain = 0.02;
  double faster_share = 0.8;
};

struct ConfirmedTask {
  std::string name;
  std::string signature;
  int weight = 0;              // its convolutions in the replay
  double claimed_seconds = 0;  // the search's fastest record of the task
  double rule_seconds = 0;     // the rule's configuration, median of its rounds
  double best_seconds = 0;     // the candidate that beat the rule most, else the rule's
  tuning::Config best;
  int compared = 0;  // configurations re-timed, the rule's included (0: the rule's failed)
};

// Re-times, in `replay` on `inputs`, the tasks whose search records (run != kConfirmedRun)
// hold a configuration faster than the rule's, the largest claimed gain (weight x (rule - best))
// first, and appends the results to `database`. `each` is called after every task.
std::vector<ConfirmedTask> confirm_in_context(
    Replay& replay, const std::vector<at::Tensor>& inputs, tuning::TuningDatabase& database,
    const ConfirmOptions& options, const kernels::MeasureOptions& measure,
    const std::function<void(const ConfirmedTask&)>& each = {});

}  // namespace nimble::slot

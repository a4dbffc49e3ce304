#pragma once
// The tuned picks of a lowered replay confirmed in the whole replay, one at a time, before
// `prepare(tuned=db)` binds them. The search and the re-timing (context_confirmation.h) time
// each candidate op by op: the op's own start to end in the replay. That misses what a choice
// costs the rest of the replay (the gaps between ops, the helper thread a one-thread choice
// leaves idle and the next split op waits for, the caches it leaves its neighbours): on session
// 10's machine the re-timed picks were 2-16% faster op by op and the whole replays ran
// 0.89-1.14x. Here each shape whose pick (lowering_choices) differs from the rule's is swapped
// in and out of the replay itself, whole runs alternating with and without it (a paired A/B:
// the order alternates pair by pair, each pair's ratio cancels what the machine did to both),
// the largest re-timed gain first, each on top of the picks already kept; a pick is kept where
// the runs with it were faster in significantly more pairs than not (a one-sided sign test)
// and their median ratio is below 1. Then the kept picks together are compared the same way
// with the rule's replay, and dropped together where they do not win. Every verdict goes to
// the database (runs kKeptInReplayRun / kDroppedInReplayRun), which lowering_choices reports
// so that `prepare` binds the kept picks without timing them again.
#include <ATen/core/Tensor.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "csrc/runtime/replay.h"
#include "tuning/database/tuning_database.h"
#include "tuning/space/config.h"

namespace nimble::slot {

inline constexpr const char* kKeptInReplayRun = "kept in the whole replay";
inline constexpr const char* kDroppedInReplayRun = "dropped in the whole replay";

// Paired runs of two states of a replay: a[i] and b[i] were run next to each other.
struct PairedComparison {
  int pairs = 0;
  int faster = 0;           // pairs where b ran faster than a
  int slower = 0;           // pairs where b ran slower
  double median_ratio = 1;  // median over pairs of b[i] / a[i]
  double a_seconds = 0;     // medians
  double b_seconds = 0;
  bool b_wins = false;   // b faster at the test's level
  bool b_loses = false;  // b slower at the test's level
};

// The sign test of b against a over paired times: b wins where it was faster in more than
// pairs / 2 + z * sqrt(pairs) / 2 of the pairs (z = 1.645: one-sided 5%) and the median ratio
// is below 1 - min_gain; it loses the same way the other way round. Ties count for neither.
PairedComparison compare_pairs(const std::vector<double>& a, const std::vector<double>& b,
                               double z = 1.645, double min_gain = 0);

struct ReplayConfirmOptions {
  std::string device;         // whose choices are confirmed, and the records' device
  double budget_seconds = 0;  // all picks and the final comparison; picks not reached are dropped
  int pairs = 100;            // paired runs a pick, fewer where the budget is short
  int min_pairs = 24;         // a pick the budget cannot give this many is not tried (dropped)
  int final_pairs = 0;        // the kept picks together against the rule's; 0: 2 x pairs
  int warm_ups = 2;           // untimed runs of each state after a swap
  double z = 1.645;
  double min_gain = 0;
  // Per shape key, seconds added to every timed run with its pick in place: a pick forced
  // slower (or faster, below 0) whatever the machine does, for the tests.
  std::map<std::string, double> handicap_seconds;
};

struct ReplayPick {
  std::string key;   // shape key
  std::string spec;  // what the lowering runs (LoweringChoice::spec)
  tuning::Config config;
  std::vector<std::string> signatures;
  int ops = 0;
  double gain_seconds = 0;      // the re-timing's claim: ops x (rule - pick), 0 where not re-timed
  PairedComparison comparison;  // with the picks kept before it (a) and with this one too (b)
  bool tried = false;
  bool kept = false;
  std::string reason;
};

struct ReplayConfirmation {
  std::vector<ReplayPick> picks;
  PairedComparison combination;  // the rule's replay (a) against the kept picks (b)
  bool combination_kept = false;
  double seconds = 0;
};

// Confirms, in `replay` (the rule's kernels: as `prepare` builds it untuned) on `inputs`, the
// database's picks on options.device that differ from the rule's, and appends the verdicts to
// `database`. The replay's kernels are the rule's again after it. `each` after every pick.
ReplayConfirmation confirm_in_replay(Replay& replay, const std::vector<at::Tensor>& inputs,
                                     tuning::TuningDatabase& database,
                                     const ReplayConfirmOptions& options,
                                     const std::function<void(const ReplayPick&)>& each = {});

}  // namespace nimble::slot

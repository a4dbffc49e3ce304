#pragma once
// What one-knob moves away from the rule's configuration did on the other tasks of a run
// (knowledge transfer across tasks, docs/tuning.md "Per-task search"). A task's own cost model
// knows nothing before its first batches come back, so its first batches (the rule and its
// one-knob neighbourhood) were proposed blind: on the lowered traces switching a GEMM or
// depthwise task to oneDNN was cold on nearly every task, and a large task measured it anyway.
// The kernels' knobs act much alike across shapes, so each move's effect on the tasks that
// measured it (its time over the task's rule, the median over tasks) predicts what it does on
// the next one: moves predicted cold wait, moves predicted to help go first and combine.
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "tuning/space/knob_space.h"

namespace nimble::tuning {

struct TransferOptions {
  bool enabled = true;
  // A move is judged once this many other tasks measured it. One: on the lowered traces
  // (seeds 0-4) DynaTune, which tunes few tasks, reached 99% on 3 of 5 googlenet seeds with
  // it and on 1 with two, the cold shares within 1.5 points except resnet18's (19% against 27%).
  int min_tasks = 1;
  // A move no other task measured from this value is judged by the same knob's moves to the
  // same value from its other values ("kernel:nimble_depthwise>onednn" by "kernel:nimble_gemm>
  // onednn" too): a task's first blind neighbourhood then skips a destination the run already
  // found cold. With SearchOptions::complete_untried_only, the default since session 16: every
  // lowered trace's DynaTune cold share under 15% (docs/numbers.md, session 16, cold18).
  bool by_destination = true;
};

class MoveMemory {
 public:
  explicit MoveMemory(TransferOptions options = {}) : options_(options) {}

  // Task `task` measured `config`, one knob away from its rule `start`, at `ratio` times the
  // rule's time (a failure: `failed`). Configs that are not one knob away teach nothing here.
  // `stake`: the task's share of the model's latency when it measured the move.
  void remember(size_t task, const KnobSpace& space, const Config& start, const Config& config,
                double ratio, bool failed, double stake = 0);
  // `config`'s predicted time over `start`'s on task `task`, from the other tasks: the product
  // of its moves' median ratios, over the moves measured on at least min_tasks other tasks;
  // nothing when none of its moves was.
  std::optional<double> predicted_ratio(size_t task, const KnobSpace& space, const Config& start,
                                        const Config& config) const;
  // The rule with every move that other tasks found faster, each knob at its best such value
  // (knobs taken as independent); nothing when no move is known to help or the result is not
  // a valid config.
  std::optional<Config> combined_best(size_t task, const KnobSpace& space,
                                      const Config& start) const;
  // A task of at least `stake` measured `config`'s move at `factor` x its rule or more, and no
  // other task below: what a completion would bet on (a large task unlike the smaller ones that
  // found the move cold) was already tried on one as large.
  bool settled_for(size_t task, const KnobSpace& space, const Config& start, const Config& config,
                   double stake, double factor) const;
  const TransferOptions& options() const { return options_; }

 private:
  struct Evidence {
    size_t task;
    double log_ratio;
    double stake;
  };
  // The log ratios of `key` on tasks other than `task` (by its destination, by_destination, when
  // fewer than min_tasks measured the move itself).
  std::vector<double> evidence(const std::string& key, size_t task) const;
  // The median log ratio of `key` over tasks other than `task`, if enough of them measured it.
  std::optional<double> median_log_ratio(const std::string& key, size_t task) const;

  TransferOptions options_;
  std::map<std::string, std::vector<Evidence>> moves_;  // "knob:from>to" -> per task
};

}  // namespace nimble::tuning

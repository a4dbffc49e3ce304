#pragma once
// The search for one task (AutoTVM-style): random configs until the cost model has data, then
// simulated annealing on the model, a diverse batch, an epsilon share of random configs, cold
// candidates filtered (Trimmer). A config is never proposed twice, nor while it is still being
// measured (several batches of one task may be in flight on different workers).
#include <array>
#include <limits>
#include <optional>
#include <random>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "tuning/filter/cold_candidate_filter.h"
#include "tuning/search/move_memory.h"
#include "tuning/search/simulated_annealing.h"
#include "tuning/search/xgboost_cost_model.h"
#include "tuning/task/task.h"

namespace nimble::tuning {

struct SearchOptions {
  int batch_size = 8;
  int min_records_for_model = 8;  // random proposals until this many records exist
  double random_fraction = 0.05;  // AutoTVM's epsilon-greedy share of random configs
  double diversity_weight = 0.05;
  int pool_factor = 4;  // annealing keeps this many candidates per batch slot
  // Finish the task once every candidate the annealing pool keeps (the model's best
  // unmeasured configs) is cold by the filter's judgement: what is left to measure would
  // only cost time (Trimmer's cold candidates), so the budget goes to other tasks. Off by
  // default: on the simulator's held-out seeds it cut every scheduler's time to 99% by
  // 35-41% for a final latency 0.4% worse (docs/tuning.md, "Finishing cold tasks").
  bool finish_when_all_cold = false;
  // ... and only after this many trials without improvement: a model that has just found a
  // new best region may call everything else cold too early.
  int cold_patience = 24;
  // Stake-aware neighbour completion (0: off). A task holding at least this share of the
  // model's latency (weight x best over the model, set by the run before each proposal)
  // measures one of the start's neighbours the move memory calls cold once its warm ones are
  // used up: resnet18's 512-channel convolutions (a fifth of the model each) wait for good on
  // their oneDNN neighbour (0.37x and 0.76x of the rule) once the smaller tasks found oneDNN
  // 1.8-4.4x slower. A tenth, chosen on the lowered traces' seeds 0-9 among 0.05-0.25 and held
  // on 100-109: DynaTune's median final no worse on any of resnet18, mobilenet_v2, googlenet,
  // shufflenet_v2, 5.3% better on held-out resnet18 (docs/numbers.md, session 15).
  double complete_share = 0.1;
  // With completion on, a move is not completed where a task of at least this one's stake
  // already measured it cold and no task found it warm: the bet was tried. With
  // TransferOptions::by_destination it brought every lowered trace's DynaTune cold share under
  // 15% (shufflenet_v2 16.7/17.8% -> 12.4/14.5%), finals better or level but mobilenet_v2's
  // seeds 0-9, +0.10% (docs/numbers.md, session 16, cold18).
  bool complete_untried_only = true;
  // With completion on, the cold filter's coin restarts (Trimmer's decay counted from there)
  // after a completed neighbour improves its task, and after an improvement of at least
  // reset_jump x on a task of at least reset_share of the model: a cost model trained on the
  // old region lets its cold picks through at the decayed coin (resnet18's cold share 18%).
  double reset_share = 0.2;
  double reset_jump = 1.2;
  // A rule the evaluator cut short is provisional and timed once more (TaskTuner::Retime): a
  // single stalled sample is no reference. With the repeats' cost limit at a slot it gave
  // DynaTune's best medians on the lowered traces (docs/numbers.md, session 16).
  bool retime_cut_short_rule = true;
  AnnealingOptions annealing;
  CostModelOptions cost_model;
  ColdFilterOptions cold_filter;
  TransferOptions transfer;  // what the run's other tasks teach (move_memory.h)
};

// Where a measured candidate came from in the search, for the cold-time accounting by source
// (docs/numbers.md, "Schedulers on real kernels": the blind first-batch neighbours are most of
// DynaTune's cold time on the lowered traces).
enum class CandidateSource {
  kStart,           // the rule's configuration
  kCombination,     // the moves other tasks found faster, combined (MoveMemory::combined_best)
  kNeighbor,        // a one-knob neighbour of the start before the cost model had data
  kJudgedNeighbor,  // ... once it had, let through by the cold filter
  kRandom,          // random: before the cost model had data, or AutoTVM's epsilon share
  kModel,           // the cost model's annealing pick (or the filter's replacement)
  kProbe,           // the one pick measured when the filter called every other one cold
  kTopUp,           // a random config filling a short pool
  kOther,           // restored from a database, or proposed by no search of this run (last)
};
inline constexpr size_t kCandidateSources = static_cast<size_t>(CandidateSource::kOther) + 1;
const char* candidate_source_name(CandidateSource source);

struct SourceSeconds {
  double cold = 0;   // tuning time on cold candidates from the source
  double total = 0;  // tuning time on all of them
  SourceSeconds& operator+=(const SourceSeconds& other) {
    cold += other.cold;
    total += other.total;
    return *this;
  }
  SourceSeconds& operator-=(const SourceSeconds& other) {
    cold -= other.cold;
    total -= other.total;
    return *this;
  }
};

struct ColdStats {
  long proposals_checked = 0;
  long proposals_replaced = 0;
  long cold_measured = 0;   // measured candidates slower than cold_factor x the best
  double cold_seconds = 0;  // tuning time those cold candidates consumed
  double failed_seconds = 0;
  double total_seconds = 0;
  std::array<SourceSeconds, kCandidateSources> by_source{};  // indexed by CandidateSource
};

class TaskTuner {
 public:
  // `moves` (may be null): the run's memory of one-knob moves, shared by its tasks' tuners;
  // `index` names this task there.
  TaskTuner(const Task& task, SearchOptions options, uint64_t seed, MoveMemory* moves = nullptr,
            size_t index = 0);

  // Up to `count` configs neither measured nor in flight; fewer only when the space is
  // exhausted or the rest of it is in flight. The configs are in flight until recorded or
  // settled.
  std::vector<Config> propose(int count);
  // The measurement of `configs` came back, whether it is recorded or not (the tuner settles
  // every batch; a tuner whose callbacks do not record lets the search propose them again).
  void settle(const std::vector<Config>& configs);
  bool has_pending() const { return !pending_.empty(); }
  // Feed back a measured batch (also used to restore records from a database).
  void record(const std::vector<Config>& configs, const std::vector<MeasureResult>& results);

  bool has_best() const { return !best_config_.empty(); }
  double best_seconds() const { return best_seconds_; }
  const Config& best_config() const { return best_config_; }
  double best_gflops() const;
  long trials() const { return static_cast<long>(history_.size()); }
  long trials_since_improvement() const { return trials() - last_improvement_trial_; }
  long failures() const { return failures_; }
  // Best-so-far GFLOPS after every trial (0 until the first valid measurement).
  const std::vector<double>& best_gflops_history() const { return history_; }
  bool exhausted() const { return exhausted_; }
  // No candidate left that the filter does not call cold (finish_when_all_cold).
  bool all_cold() const { return all_cold_; }
  // The last proposal found nothing of the cost model's the cold filter lets through: every
  // pick was filtered and no warm replacement was left, so it holds only the model's best pick
  // (a probe) besides any of the start's neighbours that passed, instead of a batch the filter
  // expects cold. The run ends such a task's slot after that batch, and DynaTune gives it no
  // exploration bonus until a proposal finds warm candidates again.
  bool only_cold_left() const { return only_cold_left_; }
  // The task's share of the model's latency now (SearchOptions::complete_share).
  void set_stake_share(double share) { stake_share_ = share; }
  bool measured(const Config& c) const { return visited_.count(c) > 0; }
  const ColdStats& cold_stats() const { return cold_stats_; }
  const XGBoostCostModel& cost_model() const { return model_; }

 private:
  std::vector<Config> search(int count);  // the proposal, before it is marked in flight
  std::vector<Config> random_unvisited(int count, std::unordered_set<Config, ConfigHash>& taken);
  // Before the cost model has data: the task's start, then its one-knob neighbours, then random.
  std::vector<Config> first_proposals(int count, std::unordered_set<Config, ConfigHash>& taken);
  void retrain();
  // The other tasks' moves predict `c` at least cold_factor x this task's best (or its rule's
  // time before it has one).
  bool transfer_says_cold(const Config& c) const;
  // Teach the run's move memory what measuring `c` one knob from the rule showed.
  void teach(const Config& c, double seconds, bool failed);

  const Task& task_;
  SearchOptions options_;
  std::mt19937_64 rng_;
  XGBoostCostModel model_;
  ColdCandidateFilter filter_;
  std::unordered_set<Config, ConfigHash> visited_;
  std::unordered_set<Config, ConfigHash> pending_;  // proposed, not yet settled
  std::vector<Config> configs_;
  std::vector<double> throughput_;  // GFLOPS per record, 0 for failures
  std::vector<double> history_;
  Config best_config_;
  double best_seconds_ = std::numeric_limits<double>::infinity();
  long last_improvement_trial_ = 0;
  long failures_ = 0;
  bool exhausted_ = false;
  bool all_cold_ = false;
  bool only_cold_left_ = false;
  // Where each proposed config not yet recorded came from.
  std::unordered_map<Config, CandidateSource, ConfigHash> source_;
  void mark(const Config& c, CandidateSource source) { source_[c] = source; }
  ColdStats cold_stats_;
  MoveMemory* moves_;
  size_t index_;
  double start_seconds_ = 0;   // the rule's measured time; 0 until it ran, and while provisional
  bool rule_unknown_ = false;  // the rule was cut short twice: no reference for the moves
  // A rule the evaluator cut short (a stall on its first call: one sample, 10x its time on
  // shufflenet_v2's lowered 464>1024 1x1) is a bound, not a time: it is timed once more, in the
  // next proposal, and until then it is provisional (no reference for the move memory).
  enum class Retime { kNone, kWanted, kInFlight, kDone };
  Retime retime_ = Retime::kNone;
  void record_retimed_start(const MeasureResult& r);
  double stake_share_ = 0;
  std::optional<Config> completion_;  // the cold-called neighbour measured, once
  long coin_restart_trial_ = 0;       // the filter's decay counts batches from this trial
  struct Measured {
    Config config;
    double seconds;
    bool failed;
  };
  std::vector<Measured> untaught_;  // measured before the rule came back
};

}  // namespace nimble::tuning

#include "csrc/slot/replay_confirmation.h"

#include <ATen/core/LegacyTypeDispatch.h>

#include <algorithm>
#include <cmath>
#include <ctime>
#include <map>
#include <optional>
#include <sstream>
#include <utility>

#include "csrc/slot/context_confirmation.h"
#include "csrc/slot/context_measurer.h"
#include "csrc/slot/lowering_choices.h"
#include "csrc/threads/steady_ns.h"
#include "tuning/measure/measure_result.h"

namespace nimble::slot {
namespace {

// One site of a pick: the op's packed argument with the rule's kernel and with the pick's.
struct Site {
  int op = -1;
  int arg = -1;
  c10::IValue rule;
  c10::IValue pick;
};

struct Candidate {
  ReplayPick pick;
  std::vector<Site> sites;
};

// Puts each site's rule or pick value in place.
void set(Replay& replay, const std::vector<Site>& sites, bool pick) {
  for (const Site& site : sites)
    replay.set_op_argument(site.op, site.arg, pick ? site.pick : site.rule);
}

// The rule's kernels back in place of every candidate's, whatever happens.
class RuleOnExit {
 public:
  RuleOnExit(Replay& replay, const std::vector<Candidate>& candidates)
      : replay_(replay), candidates_(candidates) {}
  ~RuleOnExit() {
    for (const Candidate& c : candidates_) set(replay_, c.sites, false);
  }
  RuleOnExit(const RuleOnExit&) = delete;
  RuleOnExit& operator=(const RuleOnExit&) = delete;

 private:
  Replay& replay_;
  const std::vector<Candidate>& candidates_;
};

double run_seconds(Replay& replay, const std::vector<at::Tensor>& inputs) {
  const int64_t started = steady_ns();
  replay.run(inputs, /*copy_outputs=*/false);
  return static_cast<double>(steady_ns() - started) * 1e-9;
}

// `pairs` paired runs of the replay in state a (`to_a` puts it there) and state b, the order
// alternating pair by pair, after warm-ups of both.
// `a_extra` and `b_extra` are added to each state's times (ReplayConfirmOptions::handicap_seconds).
std::pair<std::vector<double>, std::vector<double>> paired_runs(
    Replay& replay, const std::vector<at::Tensor>& inputs, const std::function<void()>& to_a,
    const std::function<void()>& to_b, int pairs, int warm_ups, double a_extra, double b_extra) {
  for (int i = 0; i < warm_ups; ++i) {
    to_a();
    run_seconds(replay, inputs);
    to_b();
    run_seconds(replay, inputs);
  }
  std::vector<double> a, b;
  for (int i = 0; i < pairs; ++i) {
    if (i % 2 == 0) {
      to_a();
      a.push_back(run_seconds(replay, inputs) + a_extra);
      to_b();
      b.push_back(run_seconds(replay, inputs) + b_extra);
    } else {
      to_b();
      b.push_back(run_seconds(replay, inputs) + b_extra);
      to_a();
      a.push_back(run_seconds(replay, inputs) + a_extra);
    }
  }
  return {std::move(a), std::move(b)};
}

// Per configuration, its re-timed median in `signature` (context_confirmation.h's records).
std::map<tuning::Config, double> retimed(const tuning::TuningDatabase& database,
                                         const std::string& signature, const std::string& device) {
  std::map<tuning::Config, double> out;
  for (const tuning::DatabaseRecord& record : database.records(signature, device))
    if ((record.run == kConfirmedRun || record.run == kRefutedRun) && record.result.ok())
      out[record.config] = tuning::median_seconds(record.result.seconds);
  return out;
}

std::string describe(const PairedComparison& c) {
  std::ostringstream out;
  out.precision(4);
  out << "whole replay " << c.a_seconds * 1e3 << " ms without, " << c.b_seconds * 1e3
      << " ms with; faster in " << c.faster << " of " << c.pairs << " pairs, median ratio "
      << c.median_ratio;
  return out.str();
}

}  // namespace

PairedComparison compare_pairs(const std::vector<double>& a, const std::vector<double>& b, double z,
                               double min_gain) {
  PairedComparison out;
  const size_t n = std::min(a.size(), b.size());
  out.pairs = static_cast<int>(n);
  if (n == 0) return out;
  std::vector<double> ratios;
  for (size_t i = 0; i < n; ++i) {
    out.faster += b[i] < a[i] ? 1 : 0;
    out.slower += b[i] > a[i] ? 1 : 0;
    if (a[i] > 0) ratios.push_back(b[i] / a[i]);
  }
  out.median_ratio = ratios.empty() ? 1 : tuning::median_seconds(ratios);
  out.a_seconds = tuning::median_seconds(std::vector<double>(a.begin(), a.begin() + n));
  out.b_seconds = tuning::median_seconds(std::vector<double>(b.begin(), b.begin() + n));
  // The sign test over the pairs that differ, by its normal approximation.
  const double differ = out.faster + out.slower;
  const double needed = differ / 2 + z * std::sqrt(differ) / 2;
  out.b_wins = differ > 0 && out.faster > needed && out.median_ratio < 1 - min_gain;
  out.b_loses = differ > 0 && out.slower > needed && out.median_ratio > 1 + min_gain;
  return out;
}

ReplayConfirmation confirm_in_replay(Replay& replay, const std::vector<at::Tensor>& inputs,
                                     tuning::TuningDatabase& database,
                                     const ReplayConfirmOptions& options,
                                     const std::function<void(const ReplayPick&)>& each) {
  const at::AutoDispatchBelowADInplaceOrView below_autograd;
  const int64_t started = steady_ns();
  const auto elapsed = [&] { return static_cast<double>(steady_ns() - started) * 1e-9; };
  ReplayConfirmation out;
  const std::map<std::string, LoweringChoice> choices =
      lowering_choices(database, options.device, /*any_device=*/false);
  // Per shape key whose in-context pick is not the rule's configuration, its sites.
  std::map<std::string, Candidate> by_key;
  for (const ContextTask& task : context_tasks(replay)) {
    const std::optional<kernels::TunableOp> op = lowered_op_of_shape_key(task.signature);
    if (!op) continue;
    const std::string key = lowered_shape_key(*op);
    const auto choice = choices.find(key);
    if (choice == choices.end() || !choice->second.in_context ||
        choice->second.config == task.space->default_config() ||
        !task.space->knobs().valid(choice->second.config))
      continue;
    Candidate& candidate = by_key[key];
    ReplayPick& pick = candidate.pick;
    pick.key = key;
    pick.spec = choice->second.spec;
    pick.config = choice->second.config;
    pick.signatures.push_back(task.signature);
    const std::map<tuning::Config, double> medians =
        retimed(database, task.signature, options.device);
    const auto rule = medians.find(task.space->default_config());
    const auto mine = medians.find(pick.config);
    if (rule != medians.end() && mine != medians.end())
      pick.gain_seconds += static_cast<double>(task.sites.size()) * (rule->second - mine->second);
    for (const ContextTask::Site& site : task.sites) {
      Site s{site.op, site.arg, site.packed.value(), {}};
      try {
        s.pick = site.packed.with_config(*task.space, pick.config).value();
      } catch (const std::exception& e) {
        pick.reason = std::string("the pick cannot run here: ") + e.what();
        continue;
      }
      candidate.sites.push_back(std::move(s));
      ++pick.ops;
    }
  }
  std::vector<Candidate> candidates;
  for (auto& [key, candidate] : by_key) candidates.push_back(std::move(candidate));
  std::stable_sort(candidates.begin(), candidates.end(),
                   [](const Candidate& a, const Candidate& b) {
                     return a.pick.gain_seconds > b.pick.gain_seconds;
                   });
  if (candidates.empty()) return out;
  const RuleOnExit restore(replay, candidates);

  // What a run costs, to size the pairs to the budget: the rule's replay, a few runs.
  for (int i = 0; i < options.warm_ups; ++i) run_seconds(replay, inputs);
  std::vector<double> first;
  for (int i = 0; i < 5; ++i) first.push_back(run_seconds(replay, inputs));
  const double run = std::max(tuning::median_seconds(first), 1e-6);
  const int final_pairs = options.final_pairs > 0 ? options.final_pairs : 2 * options.pairs;
  const auto cost = [&](int pairs) { return 2.0 * (pairs + options.warm_ups) * run; };

  const auto handicap = [&](const Candidate& c) {
    const auto found = options.handicap_seconds.find(c.pick.key);
    return found == options.handicap_seconds.end() ? 0.0 : found->second;
  };
  std::vector<const Candidate*> kept;
  double kept_handicap = 0;
  const auto set_kept = [&](bool on) {
    for (const Candidate* c : kept) set(replay, c->sites, on);
  };
  for (size_t i = 0; i < candidates.size(); ++i) {
    Candidate& candidate = candidates[i];
    ReplayPick& pick = candidate.pick;
    if (!pick.reason.empty()) {
      if (each) each(pick);
      continue;
    }
    // The budget left, less the smallest final comparison, shared among the picks left (the
    // final comparison takes what is left then, up to final_pairs).
    const double left = options.budget_seconds - elapsed() - cost(options.min_pairs);
    const int share =
        static_cast<int>(left / static_cast<double>(candidates.size() - i) / (2.0 * run)) -
        options.warm_ups;
    const int pairs = std::min(options.pairs, share);
    if (pairs < options.min_pairs) {
      pick.reason = "not tried: the budget ran out";
      if (each) each(pick);
      continue;
    }
    pick.tried = true;
    const auto [a, b] = paired_runs(
        replay, inputs, [&] { set(replay, candidate.sites, false); },
        [&] { set(replay, candidate.sites, true); }, pairs, options.warm_ups, kept_handicap,
        kept_handicap + handicap(candidate));
    pick.comparison = compare_pairs(a, b, options.z, options.min_gain);
    pick.kept = pick.comparison.b_wins;
    pick.reason = describe(pick.comparison);
    if (pick.kept) {
      kept.push_back(&candidate);  // stays swapped in: the next picks are judged on top of it
      kept_handicap += handicap(candidate);
    } else {
      set(replay, candidate.sites, false);
    }
    if (each) each(pick);
  }
  if (!kept.empty()) {
    const int pairs = std::max(
        options.min_pairs,
        std::min(final_pairs, static_cast<int>((options.budget_seconds - elapsed()) / (2.0 * run)) -
                                  options.warm_ups));
    const auto [a, b] = paired_runs(
        replay, inputs, [&] { set_kept(false); }, [&] { set_kept(true); }, pairs, options.warm_ups,
        0.0, kept_handicap);
    out.combination = compare_pairs(a, b, options.z, options.min_gain);
    out.combination_kept = out.combination.b_wins;
    set_kept(false);
  }
  const double recorded_at = static_cast<double>(std::time(nullptr));
  std::vector<tuning::DatabaseRecord> records;
  for (Candidate& candidate : candidates) {
    ReplayPick& pick = candidate.pick;
    if (pick.kept && !out.combination_kept) {
      pick.kept = false;
      pick.reason += "; the kept picks together did not beat the rule's replay (" +
                     describe(out.combination) + ")";
    }
    const auto choice = choices.find(pick.key);
    for (const std::string& signature : pick.signatures) {
      tuning::DatabaseRecord record;
      record.run = pick.kept ? kKeptInReplayRun : kDroppedInReplayRun;
      record.signature = signature;
      record.device = options.device;
      record.config = pick.config;
      // The pick's own time, as its record had it (a resumed search reads these as
      // measurements of the configuration); the whole replay's in the message.
      record.result.seconds = {choice->second.seconds};
      record.result.message = pick.reason;
      record.recorded_at = recorded_at;
      records.push_back(std::move(record));
    }
    out.picks.push_back(std::move(pick));
  }
  database.append(records);
  out.seconds = elapsed();
  return out;
}

}  // namespace nimble::slot

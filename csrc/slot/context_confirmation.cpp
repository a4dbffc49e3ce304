#include "csrc/slot/context_confirmation.h"

#include <algorithm>
#include <ctime>
#include <map>
#include <optional>
#include <utility>

#include "csrc/kernels/cpu/tuning_families/cpu_families.h"
#include "csrc/slot/context_measurer.h"
#include "csrc/threads/steady_ns.h"
#include "tuning/measure/adaptive_evaluator.h"
#include "tuning/measure/measure_result.h"

namespace nimble::slot {
namespace {

// A task with what its search claimed: the rule's configuration first, then the fastest
// distinct others by their fastest record.
struct Claim {
  ContextTask task;
  std::vector<tuning::Config> configs;
  double claimed_seconds = 0;
  double gain_seconds = 0;  // weight x (the rule's record - the fastest)
};

std::optional<Claim> claim_of(ContextTask task, const tuning::TuningDatabase& database,
                              const ConfirmOptions& options) {
  const tuning::Config rule = task.space->default_config();
  std::map<tuning::Config, double> fastest;
  for (const tuning::DatabaseRecord& record : database.records(task.signature, options.device)) {
    if (record.run == kConfirmedRun || record.run == kRefutedRun || !record.result.ok() ||
        !task.space->knobs().valid(record.config))
      continue;
    const double seconds = record.result.mean_seconds();
    const auto found = fastest.find(record.config);
    if (found == fastest.end() || seconds < found->second) fastest[record.config] = seconds;
  }
  std::vector<std::pair<double, tuning::Config>> ranked;
  // A config that runs the rule's very kernel (runs_as_rule) is no candidate: its lead over
  // the rule is two timings of one kernel.
  for (const auto& [config, seconds] : fastest)
    if (config != rule && !kernels::runs_as_rule(*task.space, config))
      ranked.emplace_back(seconds, config);
  std::sort(ranked.begin(), ranked.end());
  const auto rule_record = fastest.find(rule);
  // Nothing to confirm where the search found nothing faster than the rule's own record.
  if (ranked.empty() ||
      (rule_record != fastest.end() && rule_record->second <= ranked.front().first))
    return std::nullopt;
  Claim claim;
  claim.configs.push_back(rule);
  for (size_t i = 0; i < ranked.size() && static_cast<int>(i) < options.candidates; ++i)
    claim.configs.push_back(ranked[i].second);
  claim.claimed_seconds = ranked.front().first;
  const double rule_seconds =
      rule_record != fastest.end() ? rule_record->second : ranked.front().first;
  claim.gain_seconds =
      static_cast<double>(task.sites.size()) * (rule_seconds - claim.claimed_seconds);
  claim.task = std::move(task);
  return claim;
}

ConfirmedTask confirm(Replay& replay, const std::vector<at::Tensor>& inputs, const Claim& claim,
                      const ConfirmOptions& options, const kernels::MeasureOptions& measure,
                      std::vector<tuning::DatabaseRecord>& records) {
  // One warm-up replay a visit: a visit swaps the candidate in (its weights packed anew), and
  // the rule's configuration is swapped in and built the same way, so neither starts warmer.
  ContextMeasurer measurer(replay, inputs, claim.task, measure, /*warm_ups=*/1);
  const size_t n = claim.configs.size();
  std::vector<std::vector<double>> samples(n);
  std::vector<bool> failed(n, false);
  const tuning::FixedRepeats repeats(options.repeats);
  for (int round = 0; round < options.rounds; ++round) {
    for (size_t k = 0; k < n; ++k) {
      const size_t i = (k + static_cast<size_t>(round)) % n;  // no configuration always first
      if (failed[i]) continue;
      const tuning::MeasureResult result = measurer.measure({claim.configs[i]}, repeats).at(0);
      if (!result.ok()) {
        failed[i] = true;
        continue;
      }
      samples[i].push_back(result.mean_seconds());
    }
  }
  ConfirmedTask out;
  out.name = claim.task.name;
  out.signature = claim.task.signature;
  out.weight = static_cast<int>(claim.task.sites.size());
  out.claimed_seconds = claim.claimed_seconds;
  if (failed[0] || samples[0].empty()) return out;  // the rule's own kernel failed: nothing
  out.rule_seconds = tuning::median_seconds(samples[0]);
  out.best = claim.configs[0];
  out.best_seconds = out.rule_seconds;
  double best_ratio = 1;
  const double recorded_at = static_cast<double>(std::time(nullptr));
  for (size_t i = 0; i < n; ++i) {
    if (failed[i] || samples[i].size() != samples[0].size()) continue;
    ++out.compared;
    // Each round's time against the rule's in the same round: what a busy machine does to
    // both cancels. A candidate beats the rule where it was faster in most rounds, by a margin.
    std::vector<double> ratios;
    int faster = 0;
    for (size_t r = 0; r < samples[i].size(); ++r) {
      ratios.push_back(samples[i][r] / samples[0][r]);
      faster += samples[i][r] < samples[0][r] ? 1 : 0;
    }
    const double ratio = tuning::median_seconds(ratios);
    const double seconds = tuning::median_seconds(samples[i]);
    const bool beats = i > 0 && ratio < 1 - options.min_gain && seconds < out.rule_seconds &&
                       faster >= options.faster_share * static_cast<double>(ratios.size());
    if (beats && ratio < best_ratio) {
      best_ratio = ratio;
      out.best = claim.configs[i];
      out.best_seconds = seconds;
    }
    tuning::DatabaseRecord record;
    // The rule's and each winner's times are what lowering_choices ranks; a candidate that did
    // not beat the rule is kept for the record under another run, which ranks below them.
    record.run = i == 0 || beats ? kConfirmedRun : kRefutedRun;
    record.signature = claim.task.signature;
    record.device = options.device;
    record.config = claim.configs[i];
    record.result.seconds = samples[i];
    record.recorded_at = recorded_at;
    records.push_back(std::move(record));
  }
  return out;
}

}  // namespace

std::vector<ConfirmedTask> confirm_in_context(
    Replay& replay, const std::vector<at::Tensor>& inputs, tuning::TuningDatabase& database,
    const ConfirmOptions& options, const kernels::MeasureOptions& measure,
    const std::function<void(const ConfirmedTask&)>& each) {
  const int64_t started = steady_ns();
  std::vector<ContextTask> tasks = context_tasks(replay);
  std::vector<Claim> claims;
  for (ContextTask& task : tasks) {
    std::optional<Claim> claim = claim_of(std::move(task), database, options);
    if (claim) claims.push_back(std::move(*claim));
  }
  std::vector<ConfirmedTask> out;
  if (claims.empty()) return out;
  std::vector<ContextTask> live;
  for (const Claim& claim : claims) live.push_back(claim.task);
  capture_live(replay, inputs, live);
  for (size_t i = 0; i < claims.size(); ++i) claims[i].task = std::move(live[i]);
  std::stable_sort(claims.begin(), claims.end(),
                   [](const Claim& a, const Claim& b) { return a.gain_seconds > b.gain_seconds; });
  for (const Claim& claim : claims) {
    if (static_cast<double>(steady_ns() - started) * 1e-9 >= options.budget_seconds) break;
    std::vector<tuning::DatabaseRecord> records;
    out.push_back(confirm(replay, inputs, claim, options, measure, records));
    database.append(records);
    if (each) each(out.back());
  }
  return out;
}

}  // namespace nimble::slot

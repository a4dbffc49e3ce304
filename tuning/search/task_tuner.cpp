#include "tuning/search/task_tuner.h"

#include <algorithm>
#include <utility>

#include "tuning/search/diverse_selection.h"

namespace nimble::tuning {

const char* candidate_source_name(CandidateSource source) {
  // In CandidateSource's order.
  static constexpr const char* kNames[kCandidateSources] = {
      "start", "combination", "neighbor", "judged_neighbor", "random", "model",
      "probe", "top_up",      "other"};
  const auto i = static_cast<size_t>(source);
  return i < kCandidateSources ? kNames[i] : "other";
}

TaskTuner::TaskTuner(const Task& task, SearchOptions options, uint64_t seed, MoveMemory* moves,
                     size_t index)
    : task_(task),
      options_(options),
      rng_(seed),
      model_(options.cost_model, seed),
      filter_(options.cold_filter),
      moves_(options.transfer.enabled && !task.start.empty() ? moves : nullptr),
      index_(index) {}

bool TaskTuner::transfer_says_cold(const Config& c) const {
  if (!moves_) return false;
  const std::optional<double> ratio = moves_->predicted_ratio(index_, task_.space, task_.start, c);
  if (!ratio) return false;
  const double factor = options_.cold_filter.cold_factor;
  if (start_seconds_ > 0 && has_best()) return *ratio * start_seconds_ >= factor * best_seconds_;
  return *ratio >= factor;  // the best is at most the rule's time
}

void TaskTuner::teach(const Config& c, double seconds, bool failed) {
  if (!moves_) return;
  if (!(start_seconds_ > 0)) {
    if (!rule_unknown_) untaught_.push_back({c, seconds, failed});
    return;
  }
  moves_->remember(index_, task_.space, task_.start, c, seconds / start_seconds_, failed,
                   stake_share_);
}

double TaskTuner::best_gflops() const {
  return has_best() ? task_.flops / best_seconds_ / 1e9 : 0.0;
}

std::vector<Config> TaskTuner::random_unvisited(int count,
                                                std::unordered_set<Config, ConfigHash>& taken) {
  std::vector<Config> out;
  // Misses only become likely when the space is nearly used up; then the space is exhausted
  // for practical purposes.
  for (int attempt = 0; attempt < 200 * count && static_cast<int>(out.size()) < count; ++attempt) {
    Config c = task_.space.random_config(rng_);
    if (visited_.count(c) || pending_.count(c) || taken.count(c)) continue;
    taken.insert(c);
    out.push_back(std::move(c));
  }
  return out;
}

std::vector<Config> TaskTuner::first_proposals(int count,
                                               std::unordered_set<Config, ConfigHash>& taken) {
  std::vector<Config> out;
  const auto fresh = [&](const Config& c) {
    return !visited_.count(c) && !pending_.count(c) && !taken.count(c);
  };
  const auto take = [&](Config c) {
    taken.insert(c);
    out.push_back(std::move(c));
  };
  const Config& start = task_.start;
  if (!start.empty() && task_.space.valid(start)) {
    if (fresh(start)) {
      mark(start, CandidateSource::kStart);
      take(start);
    } else if (retime_ == Retime::kWanted && !pending_.count(start) && !taken.count(start)) {
      retime_ = Retime::kInFlight;
      mark(start, CandidateSource::kStart);
      take(start);
    }
    // What the other tasks' moves say is the best combination: a warm first candidate that can
    // reach several knobs' gains at once (the neighbourhood changes one knob at a time).
    if (moves_ && static_cast<int>(out.size()) < count)
      if (const std::optional<Config> best = moves_->combined_best(index_, task_.space, start))
        if (fresh(*best)) {
          mark(*best, CandidateSource::kCombination);
          take(*best);
        }
    // The start's one-knob neighbours before anything else: the start is the rule's choice, so
    // its neighbourhood is where a first gain is likeliest and mostly warm (on the lowered
    // traces, 13-15 configs a task holding the task's best in most tasks). The moves other
    // tasks found faster go first; those they found cold wait for the cost model's search
    // (where the filter may still let them through). Once the cost model has data, the cold
    // filter judges them as it judges the model's own picks.
    const int batches_seen = static_cast<int>(trials() / std::max(1, options_.batch_size));
    std::vector<Config> near = task_.space.one_knob_neighbors(start);
    std::shuffle(near.begin(), near.end(), rng_);
    if (moves_) {
      std::vector<double> ratio(near.size(), 1.0);
      for (size_t i = 0; i < near.size(); ++i)
        ratio[i] = moves_->predicted_ratio(index_, task_.space, start, near[i]).value_or(1.0);
      std::vector<size_t> order(near.size());
      for (size_t i = 0; i < order.size(); ++i) order[i] = i;
      std::stable_sort(order.begin(), order.end(),
                       [&](size_t a, size_t b) { return ratio[a] < ratio[b]; });
      std::vector<Config> sorted;
      for (const size_t i : order) sorted.push_back(std::move(near[i]));
      near = std::move(sorted);
    }
    for (Config& c : near) {
      if (static_cast<int>(out.size()) >= count) break;
      if (!fresh(c) || transfer_says_cold(c)) continue;
      if (model_.trained()) {
        const std::vector<float> f = task_.space.features(c);
        if (filter_.should_replace(f, model_.predict({f})[0], batches_seen, rng_)) continue;
      }
      mark(c, model_.trained() ? CandidateSource::kJudgedNeighbor : CandidateSource::kNeighbor);
      take(std::move(c));
    }
    // Stake-aware completion: the least cold of the neighbours the other tasks call cold, once.
    if (options_.complete_share > 0 && stake_share_ >= options_.complete_share && !completion_ &&
        static_cast<int>(out.size()) < count)
      for (Config& c : near) {
        if (c.empty() || !fresh(c) || !transfer_says_cold(c)) continue;
        if (options_.complete_untried_only &&
            moves_->settled_for(index_, task_.space, start, c, stake_share_,
                                options_.cold_filter.cold_factor))
          continue;
        mark(c, model_.trained() ? CandidateSource::kJudgedNeighbor : CandidateSource::kNeighbor);
        completion_ = c;
        take(std::move(c));
        break;
      }
  }
  if (!model_.trained())
    for (Config& c : random_unvisited(count - static_cast<int>(out.size()), taken)) {
      mark(c, CandidateSource::kRandom);
      out.push_back(std::move(c));
    }
  return out;
}

std::vector<Config> TaskTuner::propose(int count) {
  std::vector<Config> out = search(count);
  // Only a space used up with nothing left in flight is exhausted; otherwise an empty proposal
  // means the rest of the space is being measured.
  if (out.empty() && pending_.empty() && !all_cold_) exhausted_ = true;
  pending_.insert(out.begin(), out.end());
  return out;
}

void TaskTuner::settle(const std::vector<Config>& configs) {
  for (const Config& c : configs) pending_.erase(c);
}

std::vector<Config> TaskTuner::search(int count) {
  only_cold_left_ = false;
  std::unordered_set<Config, ConfigHash> taken;
  if (static_cast<double>(visited_.size() + pending_.size()) >= task_.space.size()) return {};
  // The start and its one-knob neighbourhood come first, the cost model's picks fill the rest.
  std::vector<Config> out = first_proposals(count, taken);
  if (!model_.trained() || static_cast<int>(out.size()) >= count) return out;
  const int first = static_cast<int>(out.size());
  count -= first;
  std::vector<Config> starts;
  if (has_best()) starts.push_back(best_config_);
  const auto excluded = [this](const Config& c) {
    return visited_.count(c) > 0 || pending_.count(c) > 0;
  };
  const std::vector<ScoredConfig> pool =
      anneal(task_.space, model_, excluded, count * options_.pool_factor, starts,
             options_.annealing, rng_);
  if (options_.finish_when_all_cold && options_.cold_filter.enabled && !pool.empty() &&
      trials_since_improvement() >= options_.cold_patience &&
      std::all_of(pool.begin(), pool.end(), [&](const ScoredConfig& c) {
        return filter_.is_cold(task_.space.features(c.config), c.score);
      })) {
    all_cold_ = true;
    return {};
  }
  const std::vector<size_t> order = select_diverse(pool, count, options_.diversity_weight);
  std::vector<bool> used(pool.size(), false);
  for (const size_t i : order) used[i] = true;
  size_t spare = 0;  // next unused pool entry, the first source of fresh replacements

  // The filter's coin decays once per batch's worth of records, not per model update: batches
  // shortened by skipped proposals must not wear the filter out sooner.
  const int batches_seen =
      static_cast<int>((trials() - coin_restart_trial_) / std::max(1, options_.batch_size));
  // The other tasks' verdict counts with the filter's own coin (Trimmer's decaying
  // probability), so that a move cold elsewhere is still tried now and then here.
  std::uniform_real_distribution<double> coin(0, 1);
  const auto filtered_out = [&](const Config& c, double predicted) {
    if (filter_.should_replace(task_.space.features(c), predicted, batches_seen, rng_)) return true;
    return transfer_says_cold(c) && coin(rng_) < filter_.probability(batches_seen);
  };
  std::vector<Config> skipped;  // filtered, with no non-cold pool entry to replace them
  std::uniform_real_distribution<double> uniform(0, 1);
  for (const size_t i : order) {
    const ScoredConfig* pick = &pool[i];
    if (uniform(rng_) < options_.random_fraction) {
      // AutoTVM's random share explores, but the filter judges it like any proposal (Trimmer
      // filters every candidate): on real kernels 70-80% of random configs were cold.
      auto fresh = random_unvisited(1, taken);
      if (!fresh.empty() &&
          !filtered_out(fresh[0], model_.predict({task_.space.features(fresh[0])})[0])) {
        mark(fresh[0], CandidateSource::kRandom);
        out.push_back(std::move(fresh[0]));
        continue;
      }
    }
    ++cold_stats_.proposals_checked;
    if (filtered_out(pick->config, pick->score)) {
      ++cold_stats_.proposals_replaced;
      // The replacement is the best unused pool entry the model does not also call cold. With
      // none left the proposal is skipped, not replaced by a random config (which would be
      // cold as often).
      const ScoredConfig* replacement = nullptr;
      while (spare < pool.size() && !replacement) {
        if (!used[spare] && !taken.count(pool[spare].config) &&
            !filter_.is_cold(task_.space.features(pool[spare].config), pool[spare].score) &&
            !transfer_says_cold(pool[spare].config))
          replacement = &pool[spare];
        ++spare;
      }
      if (!replacement) {
        skipped.push_back(pick->config);
        continue;
      }
      used[static_cast<size_t>(replacement - pool.data())] = true;
      pick = replacement;
    }
    if (taken.insert(pick->config).second) {
      mark(pick->config, CandidateSource::kModel);
      out.push_back(pick->config);
    }
  }
  // Every pick of the model filtered: its best pick is still the best guess there is, measured
  // as a probe of whether the model is wrong (whether the task is finished instead was decided
  // above), after the start's neighbours that passed. Only that one: the whole batch of picks the
  // filter called cold was cold 3 times in 4 on the lowered traces, and came back every slot a
  // scheduler gave a task whose best is far ahead of the rest of its space (docs/numbers.md,
  // "Schedulers on real kernels").
  if (static_cast<int>(out.size()) == first && !skipped.empty()) {
    if (taken.insert(skipped.front()).second) {
      mark(skipped.front(), CandidateSource::kProbe);
      out.push_back(skipped.front());
    }
    only_cold_left_ = true;
    return out;
  }
  // A pool short of proposals (a nearly used-up space) is topped up with random configs the
  // filter does not call cold; skipped proposals are not.
  const int wanted = first + count - static_cast<int>(skipped.size());
  if (static_cast<int>(out.size()) < wanted) {
    auto more = random_unvisited(wanted - static_cast<int>(out.size()), taken);
    std::vector<Config> rejected;
    for (auto& c : more) {
      if (filtered_out(c, model_.predict({task_.space.features(c)})[0]))
        rejected.push_back(std::move(c));
      else {
        mark(c, CandidateSource::kTopUp);
        out.push_back(std::move(c));
      }
    }
    // Nothing else left: one of them is the probe, so that a space is only called used up
    // once it is.
    if (out.empty() && !rejected.empty()) {
      mark(rejected.front(), CandidateSource::kProbe);
      out.push_back(std::move(rejected.front()));
      only_cold_left_ = true;
    }
  }
  return out;
}

void TaskTuner::record_retimed_start(const MeasureResult& r) {
  retime_ = Retime::kDone;
  cold_stats_.total_seconds += r.cost_seconds;
  cold_stats_.by_source[static_cast<size_t>(CandidateSource::kStart)].total += r.cost_seconds;
  if (!r.ok()) cold_stats_.failed_seconds += r.cost_seconds;
  if (!r.ok() || !(r.mean_seconds() > 0)) {
    rule_unknown_ = true;
    untaught_.clear();
    return;
  }
  const double seconds = r.mean_seconds();
  // Cut short again: still a bound, so no reference for the moves (the task teaches nothing and
  // judges moves by their own ratios); the cost model keeps the faster of the two bounds.
  if (r.cut_short) {
    rule_unknown_ = true;
    untaught_.clear();
  } else {
    start_seconds_ = seconds;
    for (const Measured& m : std::exchange(untaught_, {})) teach(m.config, m.seconds, m.failed);
  }
  if (!(task_.flops > 0)) return;  // throughput is the cost model's and the best's only record
  const auto at = std::find(configs_.begin(), configs_.end(), task_.start) - configs_.begin();
  const double gflops = task_.flops / seconds / 1e9;
  if (static_cast<size_t>(at) < throughput_.size() && (!r.cut_short || gflops > throughput_[at]))
    throughput_[at] = gflops;
  // The best is the fastest record's time now that the rule's changed.
  const auto fastest = std::max_element(throughput_.begin(), throughput_.end());
  if (fastest != throughput_.end() && *fastest > 0) {
    best_config_ = configs_[fastest - throughput_.begin()];
    best_seconds_ = task_.flops / *fastest / 1e9;
  }
  retrain();
}

void TaskTuner::record(const std::vector<Config>& configs,
                       const std::vector<MeasureResult>& results) {
  for (size_t i = 0; i < configs.size() && i < results.size(); ++i) {
    const Config& config = configs[i];
    const MeasureResult& r = results[i];
    pending_.erase(config);
    CandidateSource source = CandidateSource::kOther;
    if (const auto it = source_.find(config); it != source_.end()) {
      source = it->second;
      source_.erase(it);
    }
    if (!visited_.insert(config).second) {
      // The cut-short rule timed again; any other restored duplicate adds nothing.
      if (config == task_.start && (retime_ == Retime::kWanted || retime_ == Retime::kInFlight))
        record_retimed_start(r);
      continue;
    }
    const double seconds = r.mean_seconds();
    const double gflops = r.ok() && seconds > 0 ? task_.flops / seconds / 1e9 : 0.0;
    SourceSeconds& by_source = cold_stats_.by_source[static_cast<size_t>(source)];
    cold_stats_.total_seconds += r.cost_seconds;
    by_source.total += r.cost_seconds;
    if (!r.ok()) {
      ++failures_;
      cold_stats_.failed_seconds += r.cost_seconds;
    } else if (has_best() && seconds > options_.cold_filter.cold_factor * best_seconds_) {
      ++cold_stats_.cold_measured;
      cold_stats_.cold_seconds += r.cost_seconds;
      by_source.cold += r.cost_seconds;
    }
    if (config == task_.start) {
      // A cut-short rule's time is a bound: provisional until it is timed again.
      const bool provisional = r.cut_short && options_.retime_cut_short_rule;
      if (r.ok() && provisional) retime_ = Retime::kWanted;
      start_seconds_ = r.ok() && seconds > 0 && !provisional ? seconds : 0;
      if (start_seconds_ > 0)
        for (const Measured& m : std::exchange(untaught_, {})) teach(m.config, m.seconds, m.failed);
    } else {
      teach(config, seconds, !r.ok());
    }
    const double previous_best = best_gflops();
    if (r.ok() && seconds < best_seconds_) {
      best_seconds_ = seconds;
      best_config_ = config;
      last_improvement_trial_ = trials() + 1;
      if (previous_best > 0) filter_.rescale(previous_best / gflops);
      if (options_.complete_share > 0 &&
          (config == completion_ ||
           (previous_best > 0 && gflops >= options_.reset_jump * previous_best &&
            stake_share_ >= options_.reset_share)))
        coin_restart_trial_ = trials() + 1;
    }
    const double best = best_gflops();
    filter_.remember(task_.space.features(config), best > 0 ? gflops / best : 0.0, !r.ok());
    configs_.push_back(config);
    throughput_.push_back(gflops);
    history_.push_back(best);
  }
  retrain();
}

void TaskTuner::retrain() {
  if (static_cast<int>(configs_.size()) < options_.min_records_for_model || !has_best()) return;
  std::vector<std::vector<float>> features;
  std::vector<float> targets;
  features.reserve(configs_.size());
  const double best = best_gflops();
  for (size_t i = 0; i < configs_.size(); ++i) {
    features.push_back(task_.space.features(configs_[i]));
    targets.push_back(static_cast<float>(throughput_[i] / best));
  }
  model_.fit(features, targets);
}

}  // namespace nimble::tuning

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>
#include <string>
#include <unordered_set>

#include "test_tasks.h"
#include "tuning/filter/cold_candidate_filter.h"
#include "tuning/measure/adaptive_evaluator.h"
#include "tuning/search/diverse_selection.h"
#include "tuning/search/move_memory.h"
#include "tuning/search/task_tuner.h"
#include "tuning/search/xgboost_cost_model.h"

namespace nimble::tuning {
namespace {

TEST(XGBoostCostModel, LearnsARankingOfConfigs) {
  std::mt19937_64 rng(0);
  std::uniform_real_distribution<float> u(0, 1);
  auto f = [](const std::vector<float>& x) { return x[0] * (1 - x[1]) + 0.2f * x[2]; };
  std::vector<std::vector<float>> train, test;
  std::vector<float> y;
  for (int i = 0; i < 300; ++i) {
    train.push_back({u(rng), u(rng), u(rng)});
    y.push_back(f(train.back()));
  }
  for (int i = 0; i < 100; ++i) test.push_back({u(rng), u(rng), u(rng)});
  XGBoostCostModel model;
  EXPECT_FALSE(model.trained());
  EXPECT_THROW(model.predict(test), std::logic_error);
  model.fit(train, y);
  ASSERT_TRUE(model.trained());
  const auto p = model.predict(test);
  ASSERT_EQ(p.size(), test.size());
  // Pairwise ranking accuracy on held-out configs.
  long agree = 0, pairs = 0;
  for (size_t i = 0; i < test.size(); ++i)
    for (size_t j = i + 1; j < test.size(); ++j) {
      const float truth = f(test[i]) - f(test[j]);
      if (std::abs(truth) < 0.05f) continue;
      ++pairs;
      agree += (truth > 0) == (p[i] > p[j]);
    }
  EXPECT_GT(static_cast<double>(agree) / pairs, 0.9);
}

TEST(DiverseSelection, PrefersNewKnobValuesOverNearCopies) {
  std::vector<ScoredConfig> c = {{{0, 0}, 1.0f}, {{0, 1}, 0.99f}, {{3, 3}, 0.9f}};
  EXPECT_EQ(select_diverse(c, 2, 0.0), (std::vector<size_t>{0, 1}));
  EXPECT_EQ(select_diverse(c, 2, 0.1), (std::vector<size_t>{0, 2}));
  EXPECT_EQ(select_diverse(c, 5, 0.1).size(), 3u);
}

TEST(TaskTuner, NeverProposesAMeasuredConfigProperty) {
  for (uint64_t seed = 0; seed < 3; ++seed) {
    const Task task = testing::bowl_task("bowl", 1e9, 1, seed);
    TaskTuner tuner(task, {}, seed);
    std::unordered_set<Config, ConfigHash> seen;
    for (int b = 0; b < 12; ++b) {
      const auto batch = tuner.propose(8);
      ASSERT_FALSE(batch.empty());
      for (const auto& c : batch) {
        ASSERT_TRUE(task.space.valid(c));
        ASSERT_TRUE(seen.insert(c).second) << "config proposed twice";
      }
      tuner.record(batch,
                   task.measurer->measure(batch, AdaptiveEvaluator({}, tuner.best_seconds())));
    }
    EXPECT_EQ(tuner.trials(), static_cast<long>(seen.size()));
  }
}

// A task's start (what runs untuned) is its first proposal, once: the search never reports a
// best it did not compare with the default.
TEST(TaskTuner, ProposesTheStartFirstAndOnce) {
  Task task = testing::bowl_task("start", 1e9, 1, 5);
  std::mt19937_64 rng(8);
  task.start = task.space.random_config(rng);
  TaskTuner tuner(task, {}, 5);
  const std::vector<Config> first = tuner.propose(4);
  ASSERT_EQ(first.size(), 4u);
  EXPECT_EQ(first[0], task.start);
  for (size_t i = 1; i < first.size(); ++i) EXPECT_NE(first[i], task.start);
  tuner.record(first, task.measurer->measure(first, AdaptiveEvaluator({}, tuner.best_seconds())));
  for (int round = 0; round < 4; ++round) {
    const std::vector<Config> batch = tuner.propose(4);
    for (const Config& c : batch) EXPECT_NE(c, task.start);
    tuner.record(batch, task.measurer->measure(batch, AdaptiveEvaluator({}, tuner.best_seconds())));
  }
}

TEST(TaskTuner, MeasuresTheStartsWholeNeighbourhoodBeforeTheModelsPicks) {
  Task task = testing::bowl_task("near", 1e9, 1, 6);
  std::mt19937_64 rng(9);
  task.start = task.space.random_config(rng);
  const std::vector<Config> near = task.space.one_knob_neighbors(task.start);
  const std::set<Config> neighbourhood(near.begin(), near.end());
  ASSERT_GT(near.size(), 8u);
  SearchOptions options;
  options.cold_filter.enabled = false;  // every neighbour is proposed, none judged cold
  TaskTuner tuner(task, options, 6);
  std::set<Config> proposed;
  std::vector<Config> order;
  while (proposed.size() < near.size() + 1) {
    const std::vector<Config> batch = tuner.propose(8);
    ASSERT_FALSE(batch.empty());
    for (const Config& c : batch) {
      proposed.insert(c);
      order.push_back(c);
    }
    tuner.record(batch, task.measurer->measure(batch, AdaptiveEvaluator({}, tuner.best_seconds())));
  }
  EXPECT_EQ(order[0], task.start);
  for (size_t i = 1; i <= near.size(); ++i)
    EXPECT_TRUE(neighbourhood.count(order[i])) << "proposal " << i << " is not a neighbour";
}

TEST(MoveMemory, JudgesAMoveOnlyByOtherTasksOnceEnoughMeasuredIt) {
  const Task task = testing::bowl_task("moves", 1e9, 1, 3);
  std::mt19937_64 rng(4);
  const Config start = task.space.random_config(rng);
  const std::vector<Config> near = task.space.one_knob_neighbors(start);
  ASSERT_GT(near.size(), 2u);
  MoveMemory memory(TransferOptions{true, 2});
  memory.remember(1, task.space, start, near[0], 4.0, false);
  EXPECT_FALSE(memory.predicted_ratio(2, task.space, start, near[0]));  // one task: too few
  memory.remember(2, task.space, start, near[0], 9.0, false);
  // Task 1 asks: its own measurement is no evidence about itself.
  EXPECT_FALSE(memory.predicted_ratio(1, task.space, start, near[0]));
  memory.remember(3, task.space, start, near[0], 0, true);  // a failure counts as cold
  EXPECT_NEAR(*memory.predicted_ratio(0, task.space, start, near[0]), 9.0, 1e-9);  // median
  EXPECT_FALSE(memory.predicted_ratio(0, task.space, start, near[1]));
  EXPECT_FALSE(memory.combined_best(0, task.space, start));  // no move known to help
  // Not one knob away from the start: teaches nothing.
  const Config far = task.space.one_knob_neighbors(near[0]).back();
  if (far != start) memory.remember(1, task.space, start, far, 0.1, false);
  EXPECT_FALSE(memory.combined_best(0, task.space, start));
}

// With by_destination, a move no other task measured from this value is judged by the same
// knob's moves to the same value from other values (switching to oneDNN from nimble's GEMM
// kernel says what switching to it from the depthwise kernel does, docs/numbers.md session 16).
TEST(MoveMemory, ByDestinationJudgesAnUnmeasuredMoveByMovesToTheSameValue) {
  const Task task = testing::bowl_task("moves", 1e9, 1, 3);
  const KnobSpace& space = task.space;
  int k = 0;
  while (k < static_cast<int>(space.knobs().size()) && space.knobs()[k].size() < 3) ++k;
  ASSERT_LT(k, static_cast<int>(space.knobs().size()));
  std::mt19937_64 rng(4);
  Config from_a = space.random_config(rng);
  from_a[k] = 0;
  Config from_b = from_a;
  from_b[k] = 1;
  Config to = from_a;
  to[k] = 2;  // one knob away from both starts, to the same value
  ASSERT_TRUE(space.valid(from_a) && space.valid(from_b) && space.valid(to));
  for (const bool by_destination : {false, true}) {
    TransferOptions options;
    options.by_destination = by_destination;
    MoveMemory memory(options);
    memory.remember(1, space, from_a, to, 8.0, false);  // task 1: k 0>2 is 8x its rule
    EXPECT_NEAR(*memory.predicted_ratio(0, space, from_a, to), 8.0, 1e-9);
    const std::optional<double> other = memory.predicted_ratio(0, space, from_b, to);  // k 1>2
    EXPECT_EQ(other.has_value(), by_destination);
    if (other) EXPECT_NEAR(*other, 8.0, 1e-9);
    // A move measured from this value itself outweighs the other values' moves.
    memory.remember(2, space, from_b, to, 0.5, false);
    EXPECT_NEAR(*memory.predicted_ratio(0, space, from_b, to), 0.5, 1e-9);
  }
}

// A completion bets that a large task differs from the smaller ones that found a move cold; a
// task at least as large that measured it cold settles the bet, one that found it warm reopens it.
TEST(MoveMemory, AMoveColdOnATaskAsLargeIsSettledForACompletion) {
  const Task task = testing::bowl_task("moves", 1e9, 1, 3);
  std::mt19937_64 rng(4);
  const Config start = task.space.random_config(rng);
  const Config move = task.space.one_knob_neighbors(start).front();
  MoveMemory memory;
  EXPECT_FALSE(memory.settled_for(0, task.space, start, move, 0.2, 2.0));  // nothing known
  memory.remember(1, task.space, start, move, 30.0, false, 0.1);           // cold on a smaller task
  EXPECT_FALSE(memory.settled_for(0, task.space, start, move, 0.2, 2.0));
  memory.remember(2, task.space, start, move, 100.0, false, 0.25);  // cold on a larger one
  EXPECT_TRUE(memory.settled_for(0, task.space, start, move, 0.2, 2.0));
  EXPECT_FALSE(memory.settled_for(0, task.space, start, move, 0.3, 2.0));  // larger than both
  memory.remember(3, task.space, start, move, 0.5, false, 0.01);           // warm somewhere
  EXPECT_FALSE(memory.settled_for(0, task.space, start, move, 0.2, 2.0));
}

// A bowl task started at a random configuration, with the start's one-knob neighbours.
Task started_task(const std::string& name) {
  Task task = testing::bowl_task(name, 1e9, 1, 6);
  std::mt19937_64 rng(9);
  task.start = task.space.random_config(rng);
  return task;
}

TEST(TaskTuner, OtherTasksMovesDeferColdNeighboursAndLeadWithTheirBestCombination) {
  const Task task = started_task("transfer");
  const std::vector<Config> near = task.space.one_knob_neighbors(task.start);
  ASSERT_GT(near.size(), 8u);
  const Config& cold = near.front();
  const Config& fast = near.back();  // another knob than the cold one's
  MoveMemory memory;
  for (size_t other = 1; other <= 2; ++other) {
    memory.remember(other, task.space, task.start, cold, 4.0, false);
    memory.remember(other, task.space, task.start, fast, 0.5, false);
  }
  SearchOptions options;
  options.cold_filter.enabled = false;  // only the other tasks judge
  const int all = static_cast<int>(near.size()) + 1;
  const std::vector<Config> with = TaskTuner(task, options, 6, &memory, 0).propose(all);
  ASSERT_GE(with.size(), 2u);
  EXPECT_EQ(with[0], task.start);
  EXPECT_EQ(with[1], fast);  // the one move known to help is the combination
  EXPECT_EQ(std::count(with.begin(), with.end(), fast), 1);
  EXPECT_EQ(std::count(with.begin(), with.end(), cold), 0);
  // Every other neighbour is still proposed in the first batch.
  for (const Config& c : near)
    if (c != cold) EXPECT_EQ(std::count(with.begin(), with.end(), c), 1);
  // Without the memory the cold neighbour is measured with the rest.
  const std::vector<Config> without = TaskTuner(task, options, 6).propose(all);
  EXPECT_EQ(std::count(without.begin(), without.end(), cold), 1);
}

// Stake-aware completion is on by default for a task holding a tenth of the model: it measures
// the neighbour the other tasks call cold, once, after its warm ones (docs/numbers.md, session
// 15); a task under a tenth does not.
TEST(TaskTuner, ByDefaultATaskHoldingATenthOfTheModelMeasuresTheColdNeighbourOnce) {
  const Task task = started_task("completion");
  const std::vector<Config> near = task.space.one_knob_neighbors(task.start);
  ASSERT_GT(near.size(), 8u);
  const Config& cold = near.front();
  MoveMemory memory;
  for (size_t other = 1; other <= 2; ++other)
    memory.remember(other, task.space, task.start, cold, 4.0, false);
  SearchOptions options;
  EXPECT_DOUBLE_EQ(options.complete_share, 0.1);
  options.cold_filter.enabled = false;  // only the other tasks judge
  const int all = static_cast<int>(near.size()) + 1;
  for (const double stake : {0.08, 0.12}) {
    TaskTuner tuner(task, options, 6, &memory, 0);
    tuner.set_stake_share(stake);
    const std::vector<Config> batch = tuner.propose(all);
    EXPECT_EQ(std::count(batch.begin(), batch.end(), cold), stake >= 0.1 ? 1 : 0) << stake;
  }
}

// A rule cut short at one sample is a bound, not a time. Judged against it, the other tasks'
// moves called every config cold once the rule was recorded 10x too slow (shufflenet_v2's
// 464>1024 1x1 on the lowered traces, docs/numbers.md session 15). Now it is provisional (the
// task neither teaches from it nor judges against it) and timed again in the next proposal;
// the re-timed rule is the reference, the cost model's record and the best (with
// retime_cut_short_rule).
TEST(TaskTuner, ACutShortRuleIsProvisionalUntilItIsTimedAgain) {
  const Task task = started_task("cut");
  const std::vector<Config> near = task.space.one_knob_neighbors(task.start);
  ASSERT_GT(near.size(), 2u);
  SearchOptions options;
  options.retime_cut_short_rule = true;
  MoveMemory memory(options.transfer);
  // Another task found near[1]'s move 1.3x slower than its rule: warm.
  memory.remember(1, task.space, task.start, near[1], 1.3, false);
  TaskTuner tuner(task, options, 6, &memory, 0);
  MeasureResult rule;  // one stalled sample, cut short: 10x the rule's true time
  rule.seconds = {10e-3};
  rule.cut_short = true;
  MeasureResult fast;
  fast.seconds = {1.5e-3, 1.5e-3};
  tuner.record({task.start, near[0]}, {rule, fast});
  // Not taught against the cut-short rule; near[1] not called cold against it.
  EXPECT_FALSE(memory.predicted_ratio(1, task.space, task.start, near[0]).has_value());
  const std::vector<Config> proposed = tuner.propose(static_cast<int>(near.size()));
  ASSERT_FALSE(proposed.empty());
  EXPECT_EQ(proposed.front(), task.start);  // timed again, first
  EXPECT_EQ(std::count(proposed.begin(), proposed.end(), near[1]), 1);
  const long trials = tuner.trials();
  MeasureResult again;
  again.seconds = {1e-3, 1e-3};
  tuner.record({task.start}, {again});
  EXPECT_EQ(tuner.trials(), trials);  // a re-timing, not a new trial
  EXPECT_DOUBLE_EQ(tuner.best_seconds(), 1e-3);
  EXPECT_EQ(tuner.best_config(), task.start);
  // near[0] taught at 1.5x the re-timed rule.
  const std::optional<double> ratio = memory.predicted_ratio(1, task.space, task.start, near[0]);
  ASSERT_TRUE(ratio.has_value());
  EXPECT_NEAR(*ratio, 1.5, 1e-9);
  // Timed once more only: the start is not proposed a third time.
  tuner.settle(proposed);
  const std::vector<Config> next = tuner.propose(4);
  EXPECT_EQ(std::count(next.begin(), next.end(), task.start), 0);
  // A rule cut short twice stays a bound: no reference for the moves (a move is cold by
  // transfer only by its own ratio), and the faster of the two bounds is the cost model's record.
  MoveMemory fresh(options.transfer);
  TaskTuner twice(task, options, 6, &fresh, 0);
  MeasureResult stalled;
  stalled.seconds = {10e-3};
  stalled.cut_short = true;
  MeasureResult faster;
  faster.seconds = {1e-3, 1e-3};
  twice.record({task.start, near[0]}, {stalled, faster});
  MeasureResult again2 = stalled;
  again2.seconds = {8e-3};
  twice.record({task.start}, {again2});
  EXPECT_FALSE(fresh.predicted_ratio(1, task.space, task.start, near[0]).has_value());
  EXPECT_DOUBLE_EQ(twice.best_seconds(), 1e-3);
  EXPECT_EQ(twice.best_config(), near[0]);
}

TEST(TaskTuner, ExhaustsASmallSpaceWithoutRepeating) {
  Task task = testing::bowl_task("tiny", 1e9, 1, 0);
  task.space = KnobSpace({Knob::integer_range("a", 0, 4), Knob::categorical("b", {"p", "q"})});
  task.measurer = std::make_shared<testing::FormulaMeasurer>(
      [](const Config& c) { return 1e-3 * (1 + c[0] + c[1]); }, nullptr, 0.0, 1);
  SearchOptions o;
  o.min_records_for_model = 4;
  TaskTuner tuner(task, o, 3);
  std::set<Config> seen;
  for (int i = 0; i < 10 && !tuner.exhausted(); ++i) {
    const auto batch = tuner.propose(4);
    for (const auto& c : batch) EXPECT_TRUE(seen.insert(c).second);
    if (!batch.empty()) tuner.record(batch, task.measurer->measure(batch, FixedRepeats(2)));
  }
  EXPECT_EQ(seen.size(), 10u);
  EXPECT_TRUE(tuner.exhausted());
  EXPECT_EQ(tuner.best_config(), (Config{0, 0}));
}

TEST(TaskTuner, ModelGuidedSearchBeatsRandomSearch) {
  // Same trial count, same landscape; averaged over seeds so that luck does not decide.
  double guided = 0, random = 0;
  for (uint64_t seed = 0; seed < 4; ++seed) {
    const Task task = testing::bowl_task("bowl", 1e9, 1, seed, 0.0);
    TaskTuner tuner(task, {}, seed);
    for (int b = 0; b < 6; ++b) {
      const auto batch = tuner.propose(8);
      tuner.record(batch, task.measurer->measure(batch, FixedRepeats(1)));
    }
    guided += tuner.best_seconds();
    std::mt19937_64 rng(seed);
    double best = std::numeric_limits<double>::infinity();
    std::vector<Config> batch;
    for (int i = 0; i < 48; ++i) batch.push_back(task.space.random_config(rng));
    for (const auto& r : task.measurer->measure(batch, FixedRepeats(1)))
      best = std::min(best, r.mean_seconds());
    random += best;
  }
  EXPECT_LT(guided, random);
}

TEST(TaskTuner, RecordsFailuresAndKeepsGoing) {
  Task task = testing::bowl_task("fails", 1e9, 1, 0);
  task.measurer = std::make_shared<testing::FormulaMeasurer>(
      [](const Config&) { return 1e-3; }, [](const Config&) { return true; }, 0.0, 1);
  TaskTuner tuner(task, {}, 1);
  for (int b = 0; b < 3; ++b) {
    const auto batch = tuner.propose(8);
    ASSERT_EQ(batch.size(), 8u);
    tuner.record(batch, task.measurer->measure(batch, FixedRepeats(2)));
  }
  EXPECT_EQ(tuner.failures(), 24);
  EXPECT_FALSE(tuner.has_best());
  EXPECT_EQ(tuner.best_gflops_history(), std::vector<double>(24, 0.0));
}

TEST(ColdCandidateFilter, FlagsPredictedSlowAndFailedNeighbourhoods) {
  ColdFilterOptions o;
  o.neighbors = 2;
  ColdCandidateFilter f(o);
  EXPECT_TRUE(f.is_cold({0.5f, 0.5f}, 0.3));  // predicted 3.3x slower than the best
  EXPECT_FALSE(f.is_cold({0.5f, 0.5f}, 0.9));
  f.remember({0.0f, 0.0f}, 0.0, true);
  f.remember({0.05f, 0.0f}, 0.0, true);
  f.remember({1.0f, 1.0f}, 1.0, false);
  f.remember({0.9f, 1.0f}, 0.9, false);
  EXPECT_TRUE(f.is_cold({0.02f, 0.01f}, 0.9));   // next to two failures
  EXPECT_FALSE(f.is_cold({0.95f, 0.95f}, 0.9));  // next to the best
  f.rescale(0.4);                                // the best improved 2.5x: the old best is now cold
  EXPECT_TRUE(f.is_cold({0.95f, 0.95f}, 0.9));
}

TEST(ColdCandidateFilter, FilteringProbabilityDecaysWithBatches) {
  ColdFilterOptions o;
  o.decay = 0.5;
  const ColdCandidateFilter f(o);
  EXPECT_DOUBLE_EQ(f.probability(0), 1.0);
  EXPECT_DOUBLE_EQ(f.probability(3), 0.125);
  // The coin follows the probability: with p = 1/8, about one cold proposal in eight goes.
  std::mt19937_64 rng(5);
  int replaced = 0;
  for (int i = 0; i < 8000; ++i) replaced += f.should_replace({0.5f}, 0.0, 3, rng);
  EXPECT_NEAR(replaced / 8000.0, 0.125, 0.02);
  o.enabled = false;
  EXPECT_EQ(ColdCandidateFilter(o).probability(0), 0.0);
}

// A proposal the filter calls cold is replaced by a non-cold pool entry or skipped, never by a
// random config; AutoTVM's random share is filtered like any proposal. With every proposal
// cold and every slot drawing a random config, a batch is the model's own best pick alone (a
// probe; the search says only cold candidates are left), not a batch of picks it calls cold.
TEST(TaskTuner, FilteredProposalsGiveWayToTheModelsPicksNeverToRandomConfigs) {
  const Task task = testing::bowl_task("skip", 1e9, 1, 3);
  const auto mean_predicted_score = [&](bool filter) {
    SearchOptions o;
    o.random_fraction = 1.0;
    o.cold_filter.enabled = filter;
    o.cold_filter.cold_factor = 1e-9;  // every proposal is cold...
    o.cold_filter.decay = 1.0;         // ...and always filtered
    TaskTuner tuner(task, o, 3);
    double score = 0;
    int scored = 0;
    for (int b = 0; b < 6; ++b) {
      const bool trained = tuner.cost_model().trained();
      const auto batch = tuner.propose(8);
      EXPECT_EQ(batch.size(), filter && trained ? 1u : 8u) << "a filtered batch measures one";
      EXPECT_EQ(tuner.only_cold_left(), filter && trained);
      if (tuner.cost_model().trained()) {
        for (const Config& c : batch) {
          score += tuner.cost_model().predict({task.space.features(c)})[0];
          ++scored;
        }
      }
      tuner.record(batch,
                   task.measurer->measure(batch, AdaptiveEvaluator({}, tuner.best_seconds())));
    }
    EXPECT_GT(scored, 0);
    return score / scored;
  };
  EXPECT_GT(mean_predicted_score(true), mean_predicted_score(false) + 0.1);
}

TEST(TaskTuner, ColdFilterReplacesProposalsAndStatsAddUp) {
  const Task task = testing::bowl_task("cold", 1e9, 1, 2);
  TaskTuner tuner(task, {}, 2);
  for (int b = 0; b < 8; ++b) {
    const auto batch = tuner.propose(8);
    tuner.record(batch, task.measurer->measure(batch, AdaptiveEvaluator({}, tuner.best_seconds())));
  }
  const ColdStats& s = tuner.cold_stats();
  EXPECT_GT(s.proposals_checked, 0);
  EXPECT_GT(s.proposals_replaced, 0);
  EXPECT_LE(s.proposals_replaced, s.proposals_checked);
  EXPECT_LE(s.cold_seconds + s.failed_seconds, s.total_seconds);
  EXPECT_GT(s.total_seconds, 0);
  // Every measurement is counted under the source its proposal came from, once.
  double cold = 0, total = 0;
  for (const SourceSeconds& b : s.by_source) {
    EXPECT_LE(b.cold, b.total + 1e-12);
    cold += b.cold;
    total += b.total;
  }
  EXPECT_NEAR(cold, s.cold_seconds, 1e-9);
  EXPECT_NEAR(total, s.total_seconds, 1e-9);
  EXPECT_EQ(s.by_source[static_cast<size_t>(CandidateSource::kOther)].total, 0.0);
  EXPECT_GT(s.by_source[static_cast<size_t>(CandidateSource::kModel)].total, 0.0);
}

}  // namespace
}  // namespace nimble::tuning

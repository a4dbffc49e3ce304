#include <gtest/gtest.h>

#include <random>

#include "tuning/measure/adaptive_evaluator.h"
#include "tuning/measure/measure_result.h"
#include "tuning/measure/measurer.h"
#include "tuning/simulator/simulated_measurer.h"
#include "tuning/simulator/simulated_model.h"

namespace nimble::tuning {
namespace {

// Feeds a fixed sequence of timings to a policy, each repeat costing `repeat_cost` seconds of
// tuning time, and returns how many it consumed and the final decision.
std::pair<size_t, RepeatDecision> consume(const RepeatPolicy& policy,
                                          const std::vector<double>& timings,
                                          double repeat_cost = 0) {
  std::vector<double> seen;
  for (const double t : timings) {
    seen.push_back(t);
    const RepeatDecision d =
        policy.after_repeat(seen, repeat_cost * static_cast<double>(seen.size()));
    if (d != RepeatDecision::kContinue) return {seen.size(), d};
  }
  return {seen.size(), RepeatDecision::kContinue};
}

TEST(AdaptiveEvaluator, SteadyTimingsNeedFewRepeats) {
  const AdaptiveEvaluator e({}, 1.0);
  const auto [n, d] = consume(e, std::vector<double>(16, 1.0));
  EXPECT_EQ(n, 2u);
  EXPECT_EQ(d, RepeatDecision::kEnough);
}

TEST(AdaptiveEvaluator, RepeatsGrowWithTheCoefficientOfVariation) {
  AdaptiveEvaluatorOptions o;
  o.max_repeats = 64;
  size_t previous = 0;
  for (const double noise : {0.01, 0.05, 0.1, 0.2}) {
    std::mt19937_64 rng(7);
    std::normal_distribution<double> normal(1.0, noise);
    std::vector<double> timings(64);
    for (double& t : timings) t = std::max(0.1, normal(rng));
    const auto [n, d] =
        consume(AdaptiveEvaluator(o, std::numeric_limits<double>::infinity()), timings);
    EXPECT_EQ(d, RepeatDecision::kEnough);
    EXPECT_GE(n, previous) << "noise " << noise;
    previous = n;
  }
  EXPECT_GT(previous, 10u);
}

TEST(AdaptiveEvaluator, NeverExceedsMaxRepeats) {
  AdaptiveEvaluatorOptions o;
  o.max_repeats = 5;
  const std::vector<double> wild = {1, 3, 1, 3, 1, 3, 1, 3, 1, 3};
  const auto [n, d] = consume(AdaptiveEvaluator(o, std::numeric_limits<double>::infinity()), wild);
  EXPECT_EQ(n, 5u);
  EXPECT_EQ(d, RepeatDecision::kEnough);
}

// A candidate whose spread never reaches the target precision (shufflenet_v2's stem neighbour on
// its lowered trace: spread 0.24, 0.28 s a repeat, 16 repeats) stops once its repeats cost more
// than max_repeat_cost_seconds, with what it has (enough, not cut short), never before
// min_repeats; cheap repeats, and candidates cut as slow, are decided as before.
TEST(AdaptiveEvaluator, StopsADearCandidatesRepeatsAtTheirCostLimit) {
  AdaptiveEvaluatorOptions o;
  o.max_repeat_cost_seconds = 1.0;
  const AdaptiveEvaluator e(o, 1.0);
  std::vector<double> noisy;
  for (int i = 0; i < 16; ++i) noisy.push_back(i % 2 ? 1.3 : 0.7);
  EXPECT_EQ(consume(AdaptiveEvaluator({}, 1.0), noisy, 0.28).first, 16u);  // no limit: all 16
  const auto [n, d] = consume(e, noisy, 0.28);
  EXPECT_EQ(n, 4u);  // 4 x 0.28 s is past 1 s
  EXPECT_EQ(d, RepeatDecision::kEnough);
  EXPECT_EQ(consume(e, noisy, 5.0).first, 2u);  // a repeat dearer than the limit: min_repeats
  EXPECT_EQ(consume(e, noisy, 0.001).first, 16u);
  EXPECT_EQ(consume(e, {1.0, 1.0}, 5.0).second, RepeatDecision::kEnough);
  EXPECT_EQ(consume(e, {2.0, 2.0}, 5.0).second, RepeatDecision::kCutShort);
}

TEST(AdaptiveEvaluator, CutsClearlySlowerCandidatesShort) {
  const AdaptiveEvaluator e({}, 1.0);
  EXPECT_EQ(consume(e, {10.0, 10.0}).second, RepeatDecision::kCutShort);
  EXPECT_EQ(consume(e, {10.0}).first, 1u);  // one sample far beyond the best is enough
  EXPECT_EQ(consume(e, {2.0, 2.0}).second, RepeatDecision::kCutShort);
  // A first sample past the cold line (twice the best) is enough; one just short of it is not.
  EXPECT_EQ(consume(e, {2.5, 2.5}).first, 1u);
  EXPECT_EQ(consume(e, {1.9, 1.9}).first, 2u);
  // Within the factor of the best: measured properly.
  EXPECT_EQ(consume(e, {1.2, 1.2}).second, RepeatDecision::kEnough);
}

TEST(AdaptiveEvaluator, CallsAFirstWarmUpCallFarBeyondTheBestSlow) {
  const AdaptiveEvaluator e({}, 1.0);
  EXPECT_TRUE(e.slow_on_first_call(3.5));   // past 3x the best: measured-slow from that call
  EXPECT_FALSE(e.slow_on_first_call(2.5));  // a first call pays one-time costs: timed as usual
  AdaptiveEvaluatorOptions off;
  off.first_call_cut_factor = 0;
  EXPECT_FALSE(AdaptiveEvaluator(off, 1.0).slow_on_first_call(100.0));
  // Without a best to compare with, and for fixed repeats, nothing is cut.
  EXPECT_FALSE(
      AdaptiveEvaluator({}, std::numeric_limits<double>::infinity()).slow_on_first_call(1e9));
  EXPECT_FALSE(FixedRepeats(3).slow_on_first_call(1e9));
}

TEST(FixedRepeats, CountsExactly) {
  EXPECT_EQ(consume(FixedRepeats(3), std::vector<double>(10, 1.0)).first, 3u);
}

TEST(MeasureResult, MeanAndErrorNames) {
  MeasureResult r;
  r.seconds = {1, 2, 3};
  EXPECT_DOUBLE_EQ(r.mean_seconds(), 2.0);
  r.error = MeasureError::kTimeout;
  EXPECT_FALSE(r.ok());
  EXPECT_TRUE(std::isinf(r.mean_seconds()));
  for (const auto e : {MeasureError::kNone, MeasureError::kCompile, MeasureError::kRuntime,
                       MeasureError::kTimeout})
    EXPECT_EQ(measure_error_from_string(to_string(e)), e);
  EXPECT_THROW(measure_error_from_string("bogus"), std::invalid_argument);
}

TEST(MedianSeconds, IgnoresOneOutlierAndAveragesTheMiddleTwo) {
  EXPECT_DOUBLE_EQ(median_seconds({}), 0.0);
  EXPECT_DOUBLE_EQ(median_seconds({3, 1, 100}), 3.0);     // a preempted repeat changes nothing
  EXPECT_DOUBLE_EQ(median_seconds({4, 1, 100, 2}), 3.0);  // even: the middle two's mean
}

TEST(DropStalled, DropsSamplesFarBeyondTheMedianLargestFirstUpToTheLimit) {
  std::vector<double> s = {0.16, 0.17, 8.2, 0.15, 3.6};
  EXPECT_EQ(drop_stalled(s, 3.0, 1), 1);
  EXPECT_EQ(s, (std::vector<double>{0.16, 0.17, 0.15, 3.6}));  // the largest went first
  EXPECT_EQ(drop_stalled(s, 3.0, 4), 1);
  EXPECT_EQ(s, (std::vector<double>{0.16, 0.17, 0.15}));
  // Spread within the factor, fewer than 3 samples, or the rule off: nothing is dropped.
  std::vector<double> spread = {0.1, 0.2, 0.25};
  EXPECT_EQ(drop_stalled(spread, 3.0, 4), 0);
  std::vector<double> two = {0.1, 9.0};
  EXPECT_EQ(drop_stalled(two, 3.0, 4), 0);
  std::vector<double> off = {0.1, 0.1, 9.0};
  EXPECT_EQ(drop_stalled(off, 0.0, 4), 0);
}

// One call of an op preempted among steady ones (a loaded machine's time slice): the mean with
// it is past the cold line, and the evaluator times the candidate to its last repeat.
TEST(TimeWithPolicy, AStallRuleRetimesAPreemptedRepeatInsteadOfAveragingIt) {
  const AdaptiveEvaluator e({}, 0.16);
  const std::vector<double> calls = {0.16, 8.2,  0.161, 0.159, 0.16, 0.16, 0.161, 0.16, 0.16, 0.16,
                                     0.16, 0.16, 0.16,  0.16,  0.16, 0.16, 0.16,  0.16, 0.16, 0.16};
  const auto timed = [&](const StallRule& rule) {
    MeasureResult r;
    size_t next = 0;
    time_with_policy(
        e, [&] { return calls.at(next++); }, r, rule);
    return std::make_pair(r, next);
  };
  const auto [kept, kept_calls] = timed({});
  EXPECT_GT(kept.mean_seconds(), 2 * 0.16);  // cold by the tuner's judgement
  EXPECT_EQ(kept.stalled_samples, 0);
  const auto [clean, clean_calls] = timed({3.0, 4});
  EXPECT_EQ(clean.stalled_samples, 1);
  EXPECT_NEAR(clean.mean_seconds(), 0.16, 0.002);
  EXPECT_FALSE(clean.cut_short);
  EXPECT_LT(clean_calls, kept_calls);  // precise after a few calls, not after 16
  // At most max_dropped a candidate: past it, the stalls stay in the samples.
  MeasureResult capped;
  time_with_policy(FixedRepeats(4), [] { return 0.16; }, capped, {3.0, 0});
  EXPECT_EQ(capped.stalled_samples, 0);
  MeasureResult stalled;
  const std::vector<double> many = {0.16, 0.16, 9.0, 9.1, 9.2, 0.16};
  size_t k = 0;
  time_with_policy(FixedRepeats(4), [&] { return many.at(k++); }, stalled, {3.0, 1});
  EXPECT_EQ(stalled.stalled_samples, 1);
  EXPECT_EQ(stalled.seconds.size(), 4u);
}

TEST(SimulatedMeasurer, AdaptiveEvaluationSpendsLessTimeThanFixedRepeats) {
  SimulatedModelOptions o;
  o.seed = 4;
  o.tasks = 3;
  const auto tasks = make_simulated_model(o);
  for (const auto& task : tasks) {
    std::mt19937_64 rng(1);
    std::vector<Config> batch;
    for (int i = 0; i < 32; ++i) batch.push_back(task.space.random_config(rng));
    // The same best for both: half of the random configs' mean, so slow ones can be cut.
    const auto fixed = task.measurer->measure(batch, FixedRepeats(10));
    double best = std::numeric_limits<double>::infinity();
    for (const auto& r : fixed) best = std::min(best, r.mean_seconds());
    const auto adaptive = task.measurer->measure(batch, AdaptiveEvaluator({}, best));
    double fixed_cost = 0, adaptive_cost = 0;
    long cut = 0;
    for (size_t i = 0; i < batch.size(); ++i) {
      fixed_cost += fixed[i].cost_seconds;
      adaptive_cost += adaptive[i].cost_seconds;
      cut += adaptive[i].cut_short;
      EXPECT_EQ(fixed[i].error, adaptive[i].error);  // failures are a property of the config
    }
    EXPECT_LT(adaptive_cost, fixed_cost) << task.name;
    EXPECT_GT(cut, 0) << task.name;
  }
}

TEST(SimulatedModel, ShowsTheLandscapeFeaturesTheTunerMustHandle) {
  SimulatedModelOptions o;
  o.seed = 11;
  const auto tasks = make_simulated_model(o);
  ASSERT_EQ(tasks.size(), 12u);
  double lo = 1e300, hi = 0;
  long failures = 0, total = 0;
  for (const auto& t : tasks) {
    const auto& m = dynamic_cast<const SimulatedMeasurer&>(*t.measurer);
    lo = std::min(lo, t.weight * m.landscape().optimum_seconds());
    hi = std::max(hi, t.weight * m.landscape().optimum_seconds());
    EXPECT_GT(t.baseline_seconds, m.landscape().optimum_seconds());
    std::mt19937_64 rng(2);
    double best = std::numeric_limits<double>::infinity();
    for (int i = 0; i < 300; ++i) {
      const auto truth = m.landscape().evaluate(t.space.random_config(rng));
      ++total;
      if (truth.error != MeasureError::kNone)
        ++failures;
      else
        best = std::min(best, truth.seconds);
    }
    // Random search does not find the ceiling: there is something to tune.
    EXPECT_GT(best, m.landscape().optimum_seconds() * 1.0001) << t.name;
  }
  EXPECT_GT(hi / lo, 10.0);  // an order of magnitude between tasks
  EXPECT_GT(failures, 0);
  EXPECT_LT(failures, total / 2);
  // Same seed, same model.
  const auto again = make_simulated_model(o);
  for (size_t i = 0; i < tasks.size(); ++i) {
    EXPECT_EQ(tasks[i].flops, again[i].flops);
    EXPECT_EQ(tasks[i].signature, again[i].signature);
  }
}

}  // namespace
}  // namespace nimble::tuning

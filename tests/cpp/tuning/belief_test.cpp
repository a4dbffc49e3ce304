#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "tuning/belief/belief_model.h"
#include "tuning/belief/log_power_curve.h"

namespace nimble::tuning {
namespace {

TEST(LogPowerCurve, TheSamplersFormAtLnXAgreesWithTheCurve) {
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<double> a(0.01, 1), b(-9, 24), c(-19, -1e-3), x(1, 5000);
  for (int i = 0; i < 1000; ++i) {
    const LogPowerParams p{a(rng), b(rng), c(rng)};
    const double at = x(rng);
    EXPECT_NEAR(log_power_at_log(p, std::log(at)), log_power(p, at), 1e-12 * p.a);
  }
}

TEST(LogPowerCurve, IsIncreasingAndSaturatesAtItsCeiling) {
  const LogPowerParams p{0.8, 2.0, -1.5};
  double previous = 0;
  for (double x = 1; x < 1e4; x *= 1.5) {
    const double y = log_power(p, x);
    EXPECT_GT(y, previous);
    EXPECT_LT(y, 0.8);
    previous = y;
  }
  EXPECT_NEAR(log_power(p, 1e9), 0.8, 1e-6);
  EXPECT_NEAR(log_power(p, std::exp(2.0)), 0.4, 1e-12);  // half the ceiling at x = e^b
}

TEST(LogPowerCurve, LeastSquaresRecoversNoiselessCurvesProperty) {
  std::mt19937_64 rng(9);
  std::uniform_real_distribution<double> u(0, 1);
  for (int trial = 0; trial < 20; ++trial) {
    const LogPowerParams truth{0.2 + 0.7 * u(rng), 1.0 + 3.0 * u(rng), -0.5 - 2.5 * u(rng)};
    std::vector<double> xs, ys;
    for (int x = 1; x <= 80; ++x) {
      xs.push_back(x);
      ys.push_back(log_power(truth, x));
    }
    const CurveFit fit = fit_log_power(xs, ys);
    EXPECT_LT(fit.rmse, 1e-3 * truth.a) << "trial " << trial;
    EXPECT_NEAR(log_power(fit.params, 100), log_power(truth, 100), 0.01 * truth.a);
  }
  EXPECT_THROW(fit_log_power({1, 2}, {0.1, 0.2}), std::invalid_argument);
}

TEST(BeliefModel, SegmentsStartAtJumpsOfMoreThanTheThreshold) {
  std::vector<double> h = {0, 0};
  for (int i = 0; i < 20; ++i) h.push_back(0.10 + 0.001 * i);
  for (int i = 0; i < 20; ++i) h.push_back(0.20 + 0.001 * i);  // +~80%: a jump
  for (int i = 0; i < 20; ++i) h.push_back(0.22 + 0.001 * i);  // +~5%: no jump
  EXPECT_EQ(segment_starts(h, 0.2, 5), (std::vector<size_t>{2, 22}));
  // A jump followed by too few points stays part of the segment before it.
  h.push_back(0.5);
  h.push_back(0.5);
  EXPECT_EQ(segment_starts(h, 0.2, 5), (std::vector<size_t>{2, 22}));
  EXPECT_TRUE(segment_starts(std::vector<double>(5, 0.0), 0.2, 5).empty());
}

TEST(BeliefModel, ExpectedImprovementMatchesNumericIntegrationProperty) {
  std::mt19937_64 rng(4);
  std::uniform_real_distribution<double> u(-1, 1);
  for (int trial = 0; trial < 30; ++trial) {
    const double mean = u(rng), sd = 0.05 + std::abs(u(rng)), best = u(rng);
    double integral = 0;
    const double step = sd / 400;
    for (double y = mean - 10 * sd; y < mean + 10 * sd; y += step) {
      const double z = (y - mean) / sd;
      integral +=
          std::max(y - best, 0.0) * std::exp(-0.5 * z * z) / (sd * std::sqrt(2 * M_PI)) * step;
    }
    EXPECT_NEAR(expected_improvement(mean, sd, best), integral, 1e-4);
  }
  EXPECT_DOUBLE_EQ(expected_improvement(0.5, 0.0, 0.3), 0.2);
  EXPECT_DOUBLE_EQ(expected_improvement(0.2, 0.0, 0.3), 0.0);
}

BeliefOptions small_budget() {
  BeliefOptions o;
  o.mcmc.steps = 200;
  o.mcmc.samples = 100;
  return o;
}

TEST(BeliefModel, ARisingCurveIsExpectedToImproveMoreThanASaturatedOne) {
  std::vector<double> rising, saturated;
  for (int i = 1; i <= 40; ++i) {
    rising.push_back(log_power({0.6, 4.0, -1.2}, i));      // far from its ceiling
    saturated.push_back(log_power({0.3, -1.0, -3.0}, i));  // at its ceiling long ago
  }
  std::mt19937_64 rng(1);
  const BeliefPrediction r = predict_belief(rising, 20, small_budget(), rng);
  const BeliefPrediction s = predict_belief(saturated, 20, small_budget(), rng);
  ASSERT_TRUE(r.valid);
  ASSERT_TRUE(s.valid);
  EXPECT_GT(r.expected_improvement, 10 * s.expected_improvement);
  // The true continuation lies within the predictive spread.
  EXPECT_NEAR(r.mean, log_power({0.6, 4.0, -1.2}, 60), 3 * r.stddev + 0.01);
  // Non-decreasing prior: the prediction is never below the best measured value.
  EXPECT_GE(r.mean, rising.back());
  EXPECT_GE(s.mean, saturated.back());
}

TEST(BeliefModel, AWarmRefitAgreesWithAColdOneAndRestartsOnANewSegment) {
  std::vector<double> h;
  for (int i = 1; i <= 40; ++i) h.push_back(log_power({0.6, 4.0, -1.2}, i));
  BeliefOptions o = small_budget();
  std::mt19937_64 rng(4);
  BeliefChain chain;
  const BeliefPrediction first = predict_belief(h, 8, o, rng, &chain);
  ASSERT_TRUE(first.valid);
  EXPECT_EQ(chain.segment_start, first.segment_start);
  EXPECT_EQ(chain.walkers.size(), static_cast<size_t>(o.mcmc.walkers));
  const std::vector<Eigen::VectorXd> before = chain.walkers;
  // One slot later: eight more points on the same segment.
  for (int i = 41; i <= 48; ++i) h.push_back(log_power({0.6, 4.0, -1.2}, i));
  const BeliefPrediction warm = predict_belief(h, 8, o, rng, &chain);
  const BeliefPrediction cold = predict_belief(h, 8, o, rng);
  ASSERT_TRUE(warm.valid);
  EXPECT_NE(chain.walkers[0], before[0]);  // the walkers moved on from where they were
  EXPECT_NEAR(warm.mean, cold.mean, 2 * cold.stddev);
  EXPECT_NEAR(warm.expected_improvement, cold.expected_improvement,
              0.5 * cold.expected_improvement + 1e-4);
  EXPECT_NEAR(warm.mean, log_power({0.6, 4.0, -1.2}, 56), 3 * warm.stddev + 0.01);
  // A jump starts a new segment: the chain of the old one is not used, and now holds the new.
  for (int i = 1; i <= 30; ++i) h.push_back(log_power({0.4, 2.0, -1.5}, i) + 0.5);
  const BeliefPrediction jumped = predict_belief(h, 8, o, rng, &chain);
  ASSERT_TRUE(jumped.valid);
  EXPECT_EQ(jumped.segment_start, 48u);
  EXPECT_EQ(chain.segment_start, 48u);
  EXPECT_GE(jumped.mean, h.back());
}

TEST(BeliefModel, NeedsHistoryAndRespectsThePeak) {
  std::mt19937_64 rng(2);
  EXPECT_FALSE(predict_belief({0, 0, 0.1}, 8, small_budget(), rng).valid);
  // At the device peak nothing can improve.
  const BeliefPrediction at_peak =
      predict_belief(std::vector<double>(30, 1.0), 8, small_budget(), rng);
  EXPECT_TRUE(at_peak.valid);
  EXPECT_DOUBLE_EQ(at_peak.expected_improvement, 0.0);
}

TEST(BeliefModel, OnlyTheLastSegmentIsFitted) {
  std::vector<double> h;
  for (int i = 1; i <= 30; ++i) h.push_back(log_power({0.1, 1.0, -2.0}, i));
  for (int i = 1; i <= 30; ++i)
    h.push_back(log_power({0.5, 2.5, -1.5}, i) + 0.2);  // starts with a jump
  std::mt19937_64 rng(3);
  const BeliefPrediction b = predict_belief(h, 10, small_budget(), rng);
  EXPECT_EQ(segment_starts(h, 0.2, 16).back(), 30u);
  EXPECT_EQ(b.segment_start, 30u);
  EXPECT_GT(b.expected_improvement, 0.0);
}

}  // namespace
}  // namespace nimble::tuning

// The ensemble sampler against posteriors known in closed form.
#include "tuning/belief/mcmc_sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

namespace nimble::tuning {
namespace {

struct Moments {
  Eigen::VectorXd mean;
  Eigen::MatrixXd cov;
};

Moments moments(const std::vector<Eigen::VectorXd>& samples) {
  const Eigen::Index d = samples[0].size();
  Moments m{Eigen::VectorXd::Zero(d), Eigen::MatrixXd::Zero(d, d)};
  for (const auto& s : samples) m.mean += s;
  m.mean /= static_cast<double>(samples.size());
  for (const auto& s : samples) m.cov += (s - m.mean) * (s - m.mean).transpose();
  m.cov /= static_cast<double>(samples.size() - 1);
  return m;
}

EnsembleOptions long_run() {
  EnsembleOptions o;
  o.walkers = 16;
  o.steps = 3000;
  o.samples = 3000;
  o.init_scale = 0.1;
  return o;
}

TEST(EnsembleSampler, MatchesTheConjugateGaussianPosterior) {
  // y_i ~ N(mu, 1), mu ~ N(0, 2^2): the posterior of mu is N(m, s^2) in closed form.
  std::mt19937_64 data_rng(1);
  std::normal_distribution<double> truth(1.7, 1.0);
  std::vector<double> y(25);
  double sum = 0;
  for (double& v : y) sum += (v = truth(data_rng));
  const double s2 = 1.0 / (y.size() / 1.0 + 1.0 / 4.0);
  const double m = s2 * sum;
  const LogProbability log_post = [&](const Eigen::VectorXd& mu) {
    double lp = -0.5 * mu[0] * mu[0] / 4.0;
    for (const double v : y) lp -= 0.5 * (v - mu[0]) * (v - mu[0]);
    return lp;
  };
  std::mt19937_64 rng(2);
  const auto r = sample_ensemble(log_post, Eigen::VectorXd::Constant(1, 0.5), long_run(), rng);
  ASSERT_EQ(r.samples.size(), 3000u);
  const Moments got = moments(r.samples);
  EXPECT_NEAR(got.mean[0], m, 0.1 * std::sqrt(s2));
  EXPECT_NEAR(got.cov(0, 0), s2, 0.15 * s2);
  EXPECT_GT(r.acceptance_fraction, 0.2);
  EXPECT_LT(r.acceptance_fraction, 0.9);
}

TEST(EnsembleSampler, IsAffineInvariantOnACorrelatedGaussian) {
  // Correlation 0.98 and scales 100x apart: hard for a plain Metropolis walk, not for the
  // stretch move.
  Eigen::Matrix2d cov;
  cov << 1.0, 0.98 * 1.0 * 0.01, 0.98 * 1.0 * 0.01, 0.0001;
  const Eigen::Vector2d mean(3.0, -2.0);
  const Eigen::Matrix2d precision = cov.inverse();
  const LogProbability log_p = [&](const Eigen::VectorXd& x) {
    const Eigen::Vector2d d = x - mean;
    return -0.5 * d.dot(precision * d);
  };
  std::mt19937_64 rng(3);
  Eigen::VectorXd start(2);
  start << 3.2, -1.99;
  const auto r = sample_ensemble(log_p, start, long_run(), rng);
  const Moments got = moments(r.samples);
  EXPECT_NEAR(got.mean[0], mean[0], 0.1);
  EXPECT_NEAR(got.mean[1], mean[1], 0.001);
  EXPECT_NEAR(got.cov(0, 0), cov(0, 0), 0.15 * cov(0, 0));
  EXPECT_NEAR(got.cov(1, 1), cov(1, 1), 0.15 * cov(1, 1));
  const double corr = got.cov(0, 1) / std::sqrt(got.cov(0, 0) * got.cov(1, 1));
  EXPECT_NEAR(corr, 0.98, 0.01);
}

TEST(EnsembleSampler, RespectsATruncatingPrior) {
  // N(0, 1) restricted to x >= 0.5, the shape of a non-decreasing prior cutting a posterior:
  // mean phi(a) / (1 - Phi(a)) and CDF (Phi(x) - Phi(a)) / (1 - Phi(a)).
  const double a = 0.5;
  const LogProbability log_p = [&](const Eigen::VectorXd& x) {
    return x[0] < a ? -std::numeric_limits<double>::infinity() : -0.5 * x[0] * x[0];
  };
  const auto Phi = [](double x) { return 0.5 * std::erfc(-x / std::sqrt(2.0)); };
  const double tail = 1 - Phi(a);
  const double analytic_mean = std::exp(-0.5 * a * a) / std::sqrt(2 * M_PI) / tail;
  std::mt19937_64 rng(4);
  const auto r = sample_ensemble(log_p, Eigen::VectorXd::Constant(1, 1.0), long_run(), rng);
  for (const auto& s : r.samples) {
    ASSERT_GE(s[0], a);
  }
  EXPECT_NEAR(moments(r.samples).mean[0], analytic_mean, 0.05);
  // Kolmogorov-Smirnov distance against the analytic CDF.
  std::vector<double> xs;
  for (const auto& s : r.samples) xs.push_back(s[0]);
  std::sort(xs.begin(), xs.end());
  double ks = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const double cdf = (Phi(xs[i]) - Phi(a)) / tail;
    ks = std::max({ks, std::abs(cdf - static_cast<double>(i) / xs.size()),
                   std::abs(cdf - static_cast<double>(i + 1) / xs.size())});
  }
  EXPECT_LT(ks, 0.06);
}

TEST(EnsembleSampler, ContinuesFromTheWalkersAPreviousChainEndedAt) {
  // N(mu, 1) posterior in 2-D: a long chain, then a short one from its walkers, already there.
  const Eigen::Vector2d mu(3, -2);
  const auto log_prob = [&](const Eigen::VectorXd& x) { return -0.5 * (x - mu).squaredNorm(); };
  std::mt19937_64 rng(5);
  EnsembleOptions o;
  o.walkers = 16;
  o.init_scale = 0.1;
  const EnsembleResult first = sample_ensemble(log_prob, Eigen::Vector2d(2.5, -1.5), o, rng);
  ASSERT_EQ(first.walkers.size(), 16u);
  EnsembleOptions short_chain = o;
  short_chain.steps = 400;
  short_chain.samples = 3200;
  const EnsembleResult next = sample_ensemble_from(log_prob, first.walkers, short_chain, rng);
  ASSERT_EQ(next.samples.size(), 3200u);
  const Moments m = moments(next.samples);
  EXPECT_NEAR(m.mean[0], 3, 0.3);
  EXPECT_NEAR(m.mean[1], -2, 0.3);
  EXPECT_NEAR(m.cov(0, 0), 1, 0.5);
  std::vector<Eigen::VectorXd> outside = first.walkers;
  const auto bounded = [&](const Eigen::VectorXd& x) {
    return x[0] < 100 ? log_prob(x) : -std::numeric_limits<double>::infinity();
  };
  outside[3] = Eigen::Vector2d(200, 0);
  EXPECT_THROW(sample_ensemble_from(bounded, outside, short_chain, rng), std::invalid_argument);
}

TEST(EnsembleSampler, RejectsAStartOutsideTheSupport) {
  const LogProbability never = [](const Eigen::VectorXd&) {
    return -std::numeric_limits<double>::infinity();
  };
  std::mt19937_64 rng(0);
  EXPECT_THROW(sample_ensemble(never, Eigen::VectorXd::Zero(2), {}, rng), std::invalid_argument);
}

TEST(EnsembleSampler, DefaultsDrawTwoHundredSamplesFromTenWalkers) {
  const LogProbability normal = [](const Eigen::VectorXd& x) { return -0.5 * x.squaredNorm(); };
  std::mt19937_64 rng(0);
  const EnsembleOptions defaults;
  EXPECT_EQ(defaults.walkers, 10);
  EXPECT_EQ(defaults.steps, 500);
  const auto r = sample_ensemble(normal, Eigen::VectorXd::Constant(3, 0.1), defaults, rng);
  EXPECT_EQ(r.samples.size(), 200u);
}

}  // namespace
}  // namespace nimble::tuning

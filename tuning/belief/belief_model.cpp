#include "tuning/belief/belief_model.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

namespace nimble::tuning {

std::vector<size_t> segment_starts(const std::vector<double>& history, double jump_threshold,
                                   int min_segment_points) {
  size_t first = 0;
  while (first < history.size() && history[first] <= 0) ++first;
  std::vector<size_t> starts;
  if (first == history.size()) return starts;
  starts.push_back(first);
  for (size_t i = first + 1; i < history.size(); ++i)
    if (history[i] > (1 + jump_threshold) * history[i - 1]) starts.push_back(i);
  // A segment too short to fit belongs to its predecessor (early on, every trial is a jump).
  std::vector<size_t> merged;
  for (size_t s = 0; s < starts.size(); ++s) {
    const size_t end = s + 1 < starts.size() ? starts[s + 1] : history.size();
    if (merged.empty() || static_cast<int>(end - starts[s]) >= min_segment_points) {
      merged.push_back(starts[s]);
    }
  }
  // Merging may leave the last kept segment short too (when followed by merged pieces it is
  // not); only the final segment can end up short, so fold it into the previous one.
  if (merged.size() > 1 && static_cast<int>(history.size() - merged.back()) < min_segment_points)
    merged.pop_back();
  return merged;
}

double expected_improvement(double mean, double stddev, double best) {
  if (stddev <= 1e-12) return std::max(mean - best, 0.0);
  const double z = (mean - best) / stddev;
  const double cdf = 0.5 * std::erfc(-z / std::sqrt(2.0));
  const double pdf = std::exp(-0.5 * z * z) / std::sqrt(2 * M_PI);
  return (mean - best) * cdf + stddev * pdf;
}

namespace {

// The previous fit's walkers, where they still fit the segment: the ones inside the new
// support, the others replaced by copies of those (the stretch move spreads them again).
// Nothing when fewer than two remain or the chain was on another segment.
std::vector<Eigen::VectorXd> warm_walkers(
    const BeliefChain* chain, size_t segment_start,
    const std::function<double(const Eigen::VectorXd&)>& log_prob) {
  if (!chain || chain->segment_start != segment_start || chain->walkers.size() < 2) return {};
  std::vector<Eigen::VectorXd> inside;
  for (const Eigen::VectorXd& w : chain->walkers)
    if (std::isfinite(log_prob(w))) inside.push_back(w);
  if (inside.size() < 2) return {};
  std::vector<Eigen::VectorXd> out = inside;
  for (size_t i = 0; out.size() < chain->walkers.size(); ++i)
    out.push_back(inside[i % inside.size()]);
  return out;
}

}  // namespace

BeliefPrediction predict_belief(const std::vector<double>& history, int horizon,
                                const BeliefOptions& options, std::mt19937_64& rng,
                                BeliefChain* chain) {
  BeliefPrediction out;
  const std::vector<size_t> starts =
      segment_starts(history, options.jump_threshold, options.min_segment_points);
  if (starts.empty()) return out;
  const size_t begin = starts.back();
  const size_t n = history.size() - begin;
  out.best = history.back();
  out.segment_start = begin;
  if (n < 3) return out;

  // x counts trials from the segment start, so each segment is its own learning curve.
  std::vector<double> xs;
  std::vector<double> ys;
  const size_t stride = std::max<size_t>(1, n / static_cast<size_t>(options.max_fit_points));
  for (size_t i = n % stride; i < n; i += stride) {
    xs.push_back(static_cast<double>(i + 1));
    ys.push_back(history[begin + i]);
  }
  if (xs.back() != static_cast<double>(n)) {
    xs.push_back(static_cast<double>(n));
    ys.push_back(history.back());
  }
  std::vector<double> log_xs(xs.size());
  for (size_t i = 0; i < xs.size(); ++i) log_xs[i] = std::log(xs[i]);
  const double log_x_next = std::log(static_cast<double>(n + std::max(1, horizon)));
  const double last = history.back();
  // The noise level is what the best fit leaves; a floor keeps a perfect fit from collapsing
  // the posterior to a point. Warm, the best fit is the previous walkers' best on the new data
  // (they sample around the least-squares fit), which spares the Levenberg-Marquardt restarts.
  const bool may_warm = chain && chain->segment_start == begin && chain->walkers.size() >= 2;
  CurveFit fit;
  if (may_warm) {
    double least = std::numeric_limits<double>::infinity();
    for (const Eigen::VectorXd& w : chain->walkers)
      least = std::min(least, sum_squares({w[0], w[1], w[2]}, log_xs, ys));
    fit.rmse = std::sqrt(least / static_cast<double>(log_xs.size()));
  } else {
    // Maximum likelihood under the prior's ceiling (the device peak) starts the sampler.
    fit = fit_log_power_at_log(log_xs, ys, 1.0);
  }
  double sigma = std::max(fit.rmse, 0.005 * last);
  const auto log_prob = [&](const Eigen::VectorXd& v) {
    const LogPowerParams p{v[0], v[1], v[2]};
    // Uniform prior on a box: a positive ceiling no higher than the device peak (1 after
    // normalization), an increasing curve (c < 0)...
    if (!(p.a > 0 && p.a <= 1.0 && p.c < -1e-3 && p.c > -20 && p.b > -10 && p.b < 25))
      return -std::numeric_limits<double>::infinity();
    // ...whose prediction is not worse than the best already measured.
    if (log_power_at_log(p, log_x_next) < last) return -std::numeric_limits<double>::infinity();
    return -0.5 * sum_squares(p, log_xs, ys) / (sigma * sigma);
  };
  std::vector<Eigen::VectorXd> walkers = warm_walkers(chain, begin, log_prob);
  EnsembleResult posterior;
  if (!walkers.empty()) {
    EnsembleOptions warm = options.mcmc;
    warm.steps = options.warm_steps;
    posterior = sample_ensemble_from(log_prob, std::move(walkers), warm, rng);
  } else {
    if (may_warm) {
      fit = fit_log_power_at_log(log_xs, ys, 1.0);
      sigma = std::max(fit.rmse, 0.005 * last);
    }
    // The least-squares fit may violate the prior: lift its ceiling above the best measured
    // value and, if needed, move its half-way point earlier until the prediction clears it.
    Eigen::VectorXd start = fit.params.vector();
    start[0] = std::clamp(std::max(start[0], 1.02 * last), 1e-9, 1.0);
    start[2] = std::clamp(start[2], -19.0, -2e-3);
    start[1] = std::clamp(start[1], -9.0, 24.0);
    for (int attempt = 0; attempt < 2 && start[0] > last && !std::isfinite(log_prob(start));
         ++attempt) {
      // f(x_next) >= last  <=>  b <= ln(x_next) - ln(a / last - 1) / c; a flat curve (c near 0)
      // cannot get there within the prior's range of b, so steepen it on the second try.
      if (attempt == 1) start[2] = std::min(start[2], -1.0);
      const double latest_b = log_x_next - std::log(start[0] / last - 1) / start[2] - 1e-3;
      start[1] = std::clamp(std::min(start[1], latest_b), -9.9, 24.0);
    }
    if (!std::isfinite(log_prob(start))) {
      // No increasing curve under the device peak stays above the data: nothing to expect.
      if (chain) chain->walkers.clear();
      out.valid = true;
      out.mean = last;
      return out;
    }
    posterior = sample_ensemble(log_prob, start, options.mcmc, rng);
  }
  if (chain) {
    chain->segment_start = begin;
    chain->walkers = posterior.walkers;
  }
  double sum = 0;
  double sum_sq = 0;
  for (const auto& s : posterior.samples) {
    const double y = log_power_at_log({s[0], s[1], s[2]}, log_x_next);
    sum += y;
    sum_sq += y * y;
  }
  const double count = static_cast<double>(posterior.samples.size());
  out.valid = true;
  out.mean = sum / count;
  // The posterior predictive of y = f(x) + noise: the spread of the curves plus the noise the
  // likelihood assumes (Domhan et al.); a best-so-far curve moves in steps of about that size.
  out.stddev = std::sqrt(std::max(0.0, sum_sq / count - out.mean * out.mean) + sigma * sigma);
  // Normalized GFLOPS cannot pass the device peak (1): E[max(min(Y, 1) - best, 0)] equals
  // EI(best) - EI(1) for best <= 1.
  out.expected_improvement = std::max(0.0, expected_improvement(out.mean, out.stddev, last) -
                                               expected_improvement(out.mean, out.stddev, 1.0));
  out.acceptance_fraction = posterior.acceptance_fraction;
  return out;
}

}  // namespace nimble::tuning

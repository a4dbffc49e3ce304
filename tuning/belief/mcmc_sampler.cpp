#include "tuning/belief/mcmc_sampler.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace nimble::tuning {

EnsembleResult sample_ensemble(const LogProbability& log_prob, const Eigen::VectorXd& start,
                               const EnsembleOptions& options, std::mt19937_64& rng) {
  const Eigen::Index dim = start.size();
  const int walkers = options.walkers;
  if (walkers < 2) throw std::invalid_argument("the stretch move needs at least two walkers");
  const double start_lp = log_prob(start);
  if (!std::isfinite(start_lp)) throw std::invalid_argument("MCMC start is outside the support");

  std::normal_distribution<double> normal(0, 1);
  std::vector<Eigen::VectorXd> x(walkers);
  std::vector<double> lp(walkers);
  for (int k = 0; k < walkers; ++k) {
    // A tight ball around the start; shrink it where it pokes outside the support.
    double scale = options.init_scale;
    for (int attempt = 0;; ++attempt) {
      x[k] = start;
      for (Eigen::Index d = 0; d < dim; ++d)
        x[k][d] += scale * std::max(std::abs(start[d]), 1e-3) * normal(rng);
      lp[k] = log_prob(x[k]);
      if (std::isfinite(lp[k])) break;
      if (attempt > 50) {
        x[k] = start;
        lp[k] = start_lp;
        break;
      }
      scale *= 0.5;
    }
  }
  return sample_ensemble_from(log_prob, std::move(x), options, rng);
}

EnsembleResult sample_ensemble_from(const LogProbability& log_prob, std::vector<Eigen::VectorXd> x,
                                    const EnsembleOptions& options, std::mt19937_64& rng) {
  const int walkers = static_cast<int>(x.size());
  if (walkers < 2) throw std::invalid_argument("the stretch move needs at least two walkers");
  const Eigen::Index dim = x[0].size();
  std::vector<double> lp(walkers);
  for (int k = 0; k < walkers; ++k) {
    lp[k] = log_prob(x[k]);
    if (!std::isfinite(lp[k])) throw std::invalid_argument("an MCMC walker is outside the support");
  }
  std::uniform_real_distribution<double> uniform(0, 1);
  const int burn = options.steps / 2;
  const int kept_steps = options.steps - burn;
  const int wanted_steps = std::max(1, (options.samples + walkers - 1) / walkers);
  const int stride = std::max(1, kept_steps / wanted_steps);
  const double a = options.stretch;
  EnsembleResult result;
  long accepted = 0;
  long proposed = 0;
  for (int step = 0; step < options.steps; ++step) {
    for (int k = 0; k < walkers; ++k) {
      int j = std::uniform_int_distribution<int>(0, walkers - 2)(rng);
      if (j >= k) ++j;
      const double u = uniform(rng);
      const double z = ((a - 1) * u + 1) * ((a - 1) * u + 1) / a;
      Eigen::VectorXd y = x[j] + z * (x[k] - x[j]);
      const double lp_y = log_prob(y);
      ++proposed;
      if (!std::isfinite(lp_y)) continue;
      const double log_accept = static_cast<double>(dim - 1) * std::log(z) + lp_y - lp[k];
      if (std::log(uniform(rng)) < log_accept) {
        x[k] = std::move(y);
        lp[k] = lp_y;
        ++accepted;
      }
    }
    const int since_burn = step - burn;
    if (since_burn >= 0 && (kept_steps - 1 - since_burn) % stride == 0) {
      for (int k = 0; k < walkers && static_cast<int>(result.samples.size()) < options.samples; ++k)
        result.samples.push_back(x[k]);
    }
  }
  result.acceptance_fraction = proposed ? static_cast<double>(accepted) / proposed : 0.0;
  result.walkers = std::move(x);
  return result;
}

}  // namespace nimble::tuning

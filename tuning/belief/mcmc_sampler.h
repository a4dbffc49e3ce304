#pragma once
// Goodman & Weare's affine-invariant ensemble sampler with the stretch move (as in emcee):
// every walker moves along the line through another walker, so the sampler is as efficient
// on a strongly correlated posterior as on an isotropic one.
#include <Eigen/Dense>
#include <functional>
#include <random>
#include <vector>

namespace nimble::tuning {

struct EnsembleOptions {
  int walkers = 10;
  int steps = 500;
  int samples = 200;         // drawn evenly from the second half of the chains
  double stretch = 2.0;      // the scale a of the stretch distribution g(z) ~ 1/sqrt(z) on [1/a, a]
  double init_scale = 1e-3;  // radius of the Gaussian ball around the start, relative
};

struct EnsembleResult {
  std::vector<Eigen::VectorXd> samples;
  double acceptance_fraction = 0;
  std::vector<Eigen::VectorXd> walkers;  // where the walkers ended: a later chain's start
};

using LogProbability = std::function<double(const Eigen::VectorXd&)>;

// `log_prob` returns -infinity outside the prior's support; `start` must be inside it.
EnsembleResult sample_ensemble(const LogProbability& log_prob, const Eigen::VectorXd& start,
                               const EnsembleOptions& options, std::mt19937_64& rng);

// The same from given walkers (options.walkers is then their number), e.g. the ones a chain on
// slightly less data ended at: they are near the posterior already, so a short chain suffices.
// Every walker must be inside the support.
EnsembleResult sample_ensemble_from(const LogProbability& log_prob,
                                    std::vector<Eigen::VectorXd> walkers,
                                    const EnsembleOptions& options, std::mt19937_64& rng);

}  // namespace nimble::tuning

#pragma once
// DynaTune's Bayesian belief about one task: where its best-so-far normalized GFLOPS curve goes
// next. The history is cut into segments at jumps (> jump_threshold relative improvement in one
// trial) because a jump means a new region of the space with its own curve; the last segment is
// fitted with a log-power curve, a posterior over the curve's parameters is sampled with the
// ensemble sampler under a prior that keeps the prediction non-decreasing, and the expected
// improvement over the best measured value is taken from that posterior.
#include <random>
#include <vector>

#include "tuning/belief/log_power_curve.h"
#include "tuning/belief/mcmc_sampler.h"

namespace nimble::tuning {

struct BeliefOptions {
  double jump_threshold = 0.2;
  // A segment with fewer points is merged into the one before it: early on almost every
  // trial is a jump, and a handful of flat points says nothing about the next slot.
  int min_segment_points = 16;
  int max_fit_points = 100;  // longer histories are thinned, bounding the sampler's cost
  EnsembleOptions mcmc;
  // Steps of a chain started from the walkers of the task's previous fit on the same segment
  // (BeliefChain), half of them burn-in: one slot adds a few points to a segment of many, so the
  // posterior moves little and the walkers start near it. The full mcmc.steps of a chain
  // started from a point cost 17-41 ms a slot, 2-5% of the lowered traces' tuning time.
  int warm_steps = 40;
};

// What a task's belief fit leaves for its next one: the segment it fitted and where the
// sampler's walkers ended.
struct BeliefChain {
  size_t segment_start = 0;
  std::vector<Eigen::VectorXd> walkers;
};

struct BeliefPrediction {
  bool valid = false;  // false: too little history to believe anything
  double best = 0;     // best measured value (normalized)
  double mean = 0;     // posterior predictive mean at the horizon
  double stddev = 0;
  double expected_improvement = 0;
  size_t segment_start = 0;  // trial index where the fitted segment begins
  double acceptance_fraction = 0;
};

// Index of the first trial of every segment of a non-decreasing history (zeros are skipped).
std::vector<size_t> segment_starts(const std::vector<double>& history, double jump_threshold,
                                   int min_segment_points);

// E[max(Y - best, 0)] for Y ~ N(mean, stddev^2) (Brochu et al.).
double expected_improvement(double mean, double stddev, double best);

// `history` is best-so-far GFLOPS divided by the device peak, one entry per trial; the
// prediction is for `horizon` trials after the last one. With `chain`, a fit of the segment the
// chain holds starts from its walkers (no least-squares fit, options.warm_steps steps), and the
// chain is left holding this fit's.
BeliefPrediction predict_belief(const std::vector<double>& history, int horizon,
                                const BeliefOptions& options, std::mt19937_64& rng,
                                BeliefChain* chain = nullptr);

}  // namespace nimble::tuning

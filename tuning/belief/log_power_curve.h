#pragma once
// The log-power learning curve f(x) = a / (1 + (x / e^b)^c) (Domhan et al.), which DynaTune
// found to fit best-so-far GFLOPS curves: increasing for c < 0, saturating at a.
#include <Eigen/Dense>
#include <cmath>
#include <limits>
#include <vector>

namespace nimble::tuning {

struct LogPowerParams {
  double a = 0;  // the ceiling the curve saturates at
  double b = 0;  // log of the x where half the ceiling is reached
  double c = 0;  // steepness; negative for an increasing curve
  Eigen::Vector3d vector() const { return {a, b, c}; }
  static LogPowerParams from(const Eigen::Vector3d& v) { return {v[0], v[1], v[2]}; }
};

double log_power(const LogPowerParams& p, double x);
// The same at ln x: one exp, where the sampler evaluates it thousands of times per slot.
inline double log_power_at_log(const LogPowerParams& p, double log_x) {
  return p.a / (1.0 + std::exp(p.c * (log_x - p.b)));
}

// Squared error of the curve at (ln x, y) pairs; infinity where it is not finite. On ln x (one
// exp per point instead of a pow and an exp): the fit's descents and the sampler call it
// thousands of times a slot.
double sum_squares(const LogPowerParams& p, const std::vector<double>& log_xs,
                   const std::vector<double>& ys);

struct CurveFit {
  LogPowerParams params;
  double rmse = 0;
};

// Nonlinear least squares (Levenberg-Marquardt on Eigen, several starts) of an increasing curve
// (c < 0) with a ceiling a < max_ceiling to (xs, ys), x > 0. Throws when there are fewer points
// than parameters.
CurveFit fit_log_power(const std::vector<double>& xs, const std::vector<double>& ys,
                       double max_ceiling = std::numeric_limits<double>::infinity());
// The same fit given ln x, for a caller that has the logs already (the belief model's sampler).
CurveFit fit_log_power_at_log(const std::vector<double>& log_xs, const std::vector<double>& ys,
                              double max_ceiling = std::numeric_limits<double>::infinity());

}  // namespace nimble::tuning

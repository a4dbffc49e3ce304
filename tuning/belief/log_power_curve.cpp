#include "tuning/belief/log_power_curve.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace nimble::tuning {
namespace {

double sum_squares(const LogPowerParams& p, const std::vector<double>& xs,
                   const std::vector<double>& ys) {
  double s = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const double r = log_power(p, xs[i]) - ys[i];
    s += r * r;
  }
  return std::isfinite(s) ? s : std::numeric_limits<double>::infinity();
}

// Levenberg-Marquardt with a forward-difference Jacobian: three parameters need nothing more.
LogPowerParams levenberg_marquardt(LogPowerParams start, const std::vector<double>& xs,
                                   const std::vector<double>& ys) {
  const auto n = static_cast<Eigen::Index>(xs.size());
  Eigen::Vector3d p = start.vector();
  double cost = sum_squares(start, xs, ys);
  double lambda = 1e-2;
  for (int iter = 0; iter < 200 && std::isfinite(cost); ++iter) {
    Eigen::VectorXd r(n);
    Eigen::MatrixXd jac(n, 3);
    for (Eigen::Index i = 0; i < n; ++i) r[i] = log_power(LogPowerParams::from(p), xs[i]) - ys[i];
    for (int k = 0; k < 3; ++k) {
      Eigen::Vector3d q = p;
      const double h = 1e-6 * std::max(1.0, std::abs(p[k]));
      q[k] += h;
      for (Eigen::Index i = 0; i < n; ++i)
        jac(i, k) = (log_power(LogPowerParams::from(q), xs[i]) - ys[i] - r[i]) / h;
    }
    const Eigen::Matrix3d jtj = jac.transpose() * jac;
    const Eigen::Vector3d jtr = jac.transpose() * r;
    bool improved = false;
    while (lambda < 1e10) {
      Eigen::Matrix3d damped = jtj;
      damped.diagonal() += lambda * jtj.diagonal().cwiseMax(1e-12);
      const Eigen::Vector3d step = damped.ldlt().solve(-jtr);
      const Eigen::Vector3d candidate = p + step;
      const double c = sum_squares(LogPowerParams::from(candidate), xs, ys);
      if (c < cost) {
        const double gain = cost - c;
        p = candidate;
        cost = c;
        lambda = std::max(lambda / 3, 1e-12);
        improved = true;
        if (gain < 1e-14 * (1 + cost)) return LogPowerParams::from(p);
        break;
      }
      lambda *= 4;
    }
    if (!improved) break;
  }
  return LogPowerParams::from(p);
}

}  // namespace

double log_power(const LogPowerParams& p, double x) {
  return p.a / (1.0 + std::pow(x / std::exp(p.b), p.c));
}

CurveFit fit_log_power(const std::vector<double>& xs, const std::vector<double>& ys) {
  if (xs.size() < 3 || xs.size() != ys.size())
    throw std::invalid_argument("a log-power fit needs at least three points");
  const double y_max = *std::max_element(ys.begin(), ys.end());
  const double x_mid = std::log(std::max(1.0, xs[xs.size() / 2]));
  // Curves differ mostly in how far they are from saturation; start from a few ceilings.
  CurveFit best{{}, std::numeric_limits<double>::infinity()};
  for (const double ceiling : {1.05, 1.5, 3.0}) {
    for (const double c : {-0.5, -2.0}) {
      LogPowerParams p = levenberg_marquardt({ceiling * y_max, x_mid, c}, xs, ys);
      const double s = sum_squares(p, xs, ys);
      if (s < best.rmse) best = {p, s};
    }
  }
  best.rmse = std::sqrt(best.rmse / static_cast<double>(xs.size()));
  return best;
}

}  // namespace nimble::tuning

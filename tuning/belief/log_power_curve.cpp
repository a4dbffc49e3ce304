#include "tuning/belief/log_power_curve.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace nimble::tuning {

double sum_squares(const LogPowerParams& p, const std::vector<double>& log_xs,
                   const std::vector<double>& ys) {
  double s = 0;
  for (size_t i = 0; i < log_xs.size(); ++i) {
    const double r = log_power_at_log(p, log_xs[i]) - ys[i];
    s += r * r;
  }
  return std::isfinite(s) ? s : std::numeric_limits<double>::infinity();
}
namespace {

// The fit runs in unconstrained coordinates (u, b, v) with a = max_a * sigmoid(u) (or e^u
// without a ceiling) and c = -e^v, so every step stays an increasing curve under the ceiling.
struct Coordinates {
  double max_a;
  LogPowerParams params(const Eigen::Vector3d& t) const {
    const double a = std::isfinite(max_a) ? max_a / (1 + std::exp(-t[0])) : std::exp(t[0]);
    return {a, t[1], -std::exp(t[2])};
  }
  Eigen::Vector3d coordinates(const LogPowerParams& p) const {
    const double a = std::isfinite(max_a) ? std::clamp(p.a / max_a, 1e-9, 1 - 1e-9) : p.a;
    const double u = std::isfinite(max_a) ? std::log(a / (1 - a)) : std::log(a);
    return {u, p.b, std::log(-p.c)};
  }
};

// Levenberg-Marquardt with a forward-difference Jacobian: three parameters need nothing more.
LogPowerParams levenberg_marquardt(const Coordinates& coords, LogPowerParams start,
                                   const std::vector<double>& log_xs,
                                   const std::vector<double>& ys) {
  const auto n = static_cast<Eigen::Index>(log_xs.size());
  Eigen::Vector3d p = coords.coordinates(start);
  double cost = sum_squares(coords.params(p), log_xs, ys);
  double lambda = 1e-2;
  for (int iter = 0; iter < 200 && std::isfinite(cost); ++iter) {
    Eigen::VectorXd r(n);
    Eigen::MatrixXd jac(n, 3);
    const LogPowerParams here = coords.params(p);
    for (Eigen::Index i = 0; i < n; ++i) r[i] = log_power_at_log(here, log_xs[i]) - ys[i];
    for (int k = 0; k < 3; ++k) {
      Eigen::Vector3d q = p;
      const double h = 1e-6 * std::max(1.0, std::abs(p[k]));
      q[k] += h;
      const LogPowerParams there = coords.params(q);
      for (Eigen::Index i = 0; i < n; ++i)
        jac(i, k) = (log_power_at_log(there, log_xs[i]) - ys[i] - r[i]) / h;
    }
    const Eigen::Matrix3d jtj = jac.transpose() * jac;
    const Eigen::Vector3d jtr = jac.transpose() * r;
    bool improved = false;
    while (lambda < 1e10) {
      Eigen::Matrix3d damped = jtj;
      damped.diagonal() += lambda * jtj.diagonal().cwiseMax(1e-12);
      const Eigen::Vector3d candidate = p + damped.ldlt().solve(-jtr);
      const double c = sum_squares(coords.params(candidate), log_xs, ys);
      if (c < cost) {
        const double gain = cost - c;
        p = candidate;
        cost = c;
        lambda = std::max(lambda / 3, 1e-12);
        improved = true;
        if (gain < 1e-14 * (1 + cost)) return coords.params(p);
        break;
      }
      lambda *= 4;
    }
    if (!improved) break;
  }
  return coords.params(p);
}

}  // namespace

double log_power(const LogPowerParams& p, double x) {
  return p.a / (1.0 + std::pow(x / std::exp(p.b), p.c));
}

CurveFit fit_log_power(const std::vector<double>& xs, const std::vector<double>& ys,
                       double max_ceiling) {
  std::vector<double> log_xs(xs.size());
  for (size_t i = 0; i < xs.size(); ++i) log_xs[i] = std::log(xs[i]);
  return fit_log_power_at_log(log_xs, ys, max_ceiling);
}

CurveFit fit_log_power_at_log(const std::vector<double>& log_xs, const std::vector<double>& ys,
                              double max_ceiling) {
  if (log_xs.size() < 3 || log_xs.size() != ys.size())
    throw std::invalid_argument("a log-power fit needs at least three points");
  const Coordinates coords{max_ceiling};
  const double y_max = *std::max_element(ys.begin(), ys.end());
  const double x_mid = std::max(0.0, log_xs[log_xs.size() / 2]);
  // Curves differ mostly in how far they are from saturation; start from a few ceilings.
  CurveFit best{{}, std::numeric_limits<double>::infinity()};
  for (const double ceiling : {1.05, 1.5, 3.0}) {
    const double a = std::min(ceiling * y_max, 0.999 * max_ceiling);
    for (const double c : {-0.5, -2.0}) {
      for (const double b : {x_mid, x_mid + 3}) {
        const LogPowerParams p = levenberg_marquardt(coords, {a, b, c}, log_xs, ys);
        const double s = sum_squares(p, log_xs, ys);
        if (s < best.rmse) best = {p, s};
      }
    }
  }
  best.rmse = std::sqrt(best.rmse / static_cast<double>(log_xs.size()));
  return best;
}

}  // namespace nimble::tuning

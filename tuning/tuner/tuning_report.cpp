#include "tuning/tuner/tuning_report.h"

#include <cstdio>
#include <limits>

namespace nimble::tuning {

double time_to_reach(const std::vector<CurvePoint>& curve, double latency) {
  for (const auto& p : curve)
    if (p.model_seconds <= latency) return p.seconds;
  return std::numeric_limits<double>::infinity();
}

std::string curve_to_csv(const std::vector<CurvePoint>& curve) {
  std::string out = "seconds,trials,model_ms\n";
  char line[96];
  for (const auto& p : curve) {
    std::snprintf(line, sizeof line, "%.6g,%ld,%.9g\n", p.seconds, p.trials, p.model_seconds * 1e3);
    out += line;
  }
  return out;
}

}  // namespace nimble::tuning

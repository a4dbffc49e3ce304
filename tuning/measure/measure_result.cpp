#include "tuning/measure/measure_result.h"

#include <algorithm>
#include <limits>
#include <numeric>
#include <stdexcept>

namespace nimble::tuning {

const char* to_string(MeasureError error) {
  switch (error) {
    case MeasureError::kNone:
      return "none";
    case MeasureError::kCompile:
      return "compile";
    case MeasureError::kRuntime:
      return "runtime";
    case MeasureError::kTimeout:
      return "timeout";
  }
  return "unknown";
}

MeasureError measure_error_from_string(const std::string& name) {
  for (const auto e : {MeasureError::kNone, MeasureError::kCompile, MeasureError::kRuntime,
                       MeasureError::kTimeout})
    if (name == to_string(e)) return e;
  throw std::invalid_argument("unknown measure error '" + name + "'");
}

double MeasureResult::mean_seconds() const {
  if (!ok()) return std::numeric_limits<double>::infinity();
  return std::accumulate(seconds.begin(), seconds.end(), 0.0) / static_cast<double>(seconds.size());
}

double median_seconds(std::vector<double> seconds) {
  if (seconds.empty()) return 0;
  std::sort(seconds.begin(), seconds.end());
  const size_t n = seconds.size();
  return n % 2 == 1 ? seconds[n / 2] : (seconds[n / 2 - 1] + seconds[n / 2]) / 2;
}

int drop_stalled(std::vector<double>& seconds, double factor, int limit) {
  if (seconds.size() < 3 || !(factor > 0)) return 0;
  const double line = factor * median_seconds(seconds);
  int dropped = 0;
  while (dropped < limit) {
    const auto worst = std::max_element(seconds.begin(), seconds.end());
    if (worst == seconds.end() || !(*worst > line)) break;
    seconds.erase(worst);
    ++dropped;
  }
  return dropped;
}

}  // namespace nimble::tuning

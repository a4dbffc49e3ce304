#include "tuning/filter/cold_candidate_filter.h"

#include <algorithm>
#include <cmath>

namespace nimble::tuning {

void ColdCandidateFilter::remember(std::vector<float> features, double throughput, bool failed) {
  memory_.push_back({std::move(features), throughput, failed});
}

void ColdCandidateFilter::rescale(double factor) {
  for (auto& m : memory_) m.throughput *= factor;
}

double ColdCandidateFilter::probability(int batches_seen) const {
  if (!options_.enabled) return 0.0;
  return std::max(options_.min_probability,
                  options_.initial_probability * std::pow(options_.decay, batches_seen));
}

bool ColdCandidateFilter::is_cold(const std::vector<float>& features,
                                  double predicted_throughput) const {
  if (predicted_throughput * options_.cold_factor < 1.0) return true;
  const size_t k = static_cast<size_t>(std::max(1, options_.neighbors));
  if (memory_.size() < k) return false;
  // Knob features are positions in [0, 1], so plain Euclidean distance weighs knobs alike.
  std::vector<std::pair<double, size_t>> distance(memory_.size());
  for (size_t i = 0; i < memory_.size(); ++i) {
    double d = 0;
    for (size_t j = 0; j < features.size(); ++j) {
      const double diff = features[j] - memory_[i].features[j];
      d += diff * diff;
    }
    distance[i] = {d, i};
  }
  std::partial_sort(distance.begin(), distance.begin() + static_cast<long>(k), distance.end());
  for (size_t i = 0; i < k; ++i) {
    const Memory& m = memory_[distance[i].second];
    if (!m.failed && m.throughput * options_.cold_factor >= 1.0) return false;
  }
  return true;
}

bool ColdCandidateFilter::should_replace(const std::vector<float>& features,
                                         double predicted_throughput, int batches_seen,
                                         std::mt19937_64& rng) const {
  const double p = probability(batches_seen);
  if (p <= 0 || std::uniform_real_distribution<double>(0, 1)(rng) >= p) return false;
  return is_cold(features, predicted_throughput);
}

}  // namespace nimble::tuning

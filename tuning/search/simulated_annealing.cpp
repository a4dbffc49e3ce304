#include "tuning/search/simulated_annealing.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>

namespace nimble::tuning {
namespace {

std::vector<float> score(const KnobSpace& space, const XGBoostCostModel& model,
                         const std::vector<Config>& configs) {
  std::vector<std::vector<float>> rows;
  rows.reserve(configs.size());
  for (const auto& c : configs) rows.push_back(space.features(c));
  return model.predict(rows);
}

}  // namespace

std::vector<ScoredConfig> anneal(const KnobSpace& space, const XGBoostCostModel& model,
                                 const std::function<bool(const Config&)>& excluded, int count,
                                 const std::vector<Config>& starts, const AnnealingOptions& options,
                                 std::mt19937_64& rng) {
  const int chains = std::max(1, options.chains);
  std::vector<Config> points;
  for (const auto& s : starts)
    if (static_cast<int>(points.size()) < chains / 2 && space.valid(s)) points.push_back(s);
  while (static_cast<int>(points.size()) < chains) points.push_back(space.random_config(rng));
  std::vector<float> scores = score(space, model, points);

  // Every config visited by any chain competes for the result, not only the chains' ends.
  std::unordered_map<Config, float, ConfigHash> seen;
  const auto consider = [&](const Config& c, float s) {
    if (!excluded(c)) seen.emplace(c, s);
  };
  for (size_t i = 0; i < points.size(); ++i) consider(points[i], scores[i]);

  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  for (int step = 0; step < options.steps; ++step) {
    const double temperature =
        options.start_temperature * (1.0 - static_cast<double>(step) / options.steps);
    std::vector<Config> next(points.size());
    for (size_t i = 0; i < points.size(); ++i) next[i] = space.neighbor(points[i], rng);
    const std::vector<float> next_scores = score(space, model, next);
    for (size_t i = 0; i < points.size(); ++i) {
      consider(next[i], next_scores[i]);
      const double gain = next_scores[i] - scores[i];
      if (gain >= 0 || uniform(rng) < std::exp(gain / (temperature + 1e-5))) {
        points[i] = std::move(next[i]);
        scores[i] = next_scores[i];
      }
    }
  }

  std::vector<ScoredConfig> result;
  result.reserve(seen.size());
  for (auto& [config, s] : seen) result.push_back({config, s});
  // Ties broken by config so that a run is reproducible from its seed.
  std::sort(result.begin(), result.end(), [](const ScoredConfig& a, const ScoredConfig& b) {
    return a.score != b.score ? a.score > b.score : a.config < b.config;
  });
  if (static_cast<int>(result.size()) > count) result.resize(count);
  return result;
}

}  // namespace nimble::tuning

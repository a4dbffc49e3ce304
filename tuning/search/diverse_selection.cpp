#include "tuning/search/diverse_selection.h"

#include <set>

namespace nimble::tuning {

std::vector<size_t> select_diverse(const std::vector<ScoredConfig>& candidates, int count,
                                   double diversity_weight) {
  std::vector<size_t> picked;
  if (candidates.empty()) return picked;
  const size_t knobs = candidates[0].config.size();
  std::vector<std::set<int>> covered(knobs);
  std::vector<bool> taken(candidates.size(), false);
  while (static_cast<int>(picked.size()) < count && picked.size() < candidates.size()) {
    size_t best = 0;
    double best_gain = -1e300;
    for (size_t i = 0; i < candidates.size(); ++i) {
      if (taken[i]) continue;
      double gain = candidates[i].score;
      for (size_t k = 0; k < knobs; ++k)
        if (!covered[k].count(candidates[i].config[k])) gain += diversity_weight;
      if (gain > best_gain) {
        best_gain = gain;
        best = i;
      }
    }
    taken[best] = true;
    picked.push_back(best);
    for (size_t k = 0; k < knobs; ++k) covered[k].insert(candidates[best].config[k]);
  }
  return picked;
}

}  // namespace nimble::tuning

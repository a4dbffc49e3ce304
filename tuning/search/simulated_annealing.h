#pragma once
// AutoTVM's proposal search: parallel simulated-annealing chains over the knob space,
// scored by the cost model, keeping the best configs that were never measured.
#include <functional>
#include <random>
#include <vector>

#include "tuning/search/xgboost_cost_model.h"
#include "tuning/space/knob_space.h"

namespace nimble::tuning {

struct AnnealingOptions {
  int chains = 64;
  int steps = 40;
  double start_temperature = 1.0;  // cooled linearly to zero, as in AutoTVM
};

struct ScoredConfig {
  Config config;
  float score = 0;
};

// Up to `count` distinct valid configs, best predicted first, none for which `excluded` holds.
// Chains start at `starts` (previous best configs) topped up with random configs.
std::vector<ScoredConfig> anneal(const KnobSpace& space, const XGBoostCostModel& model,
                                 const std::function<bool(const Config&)>& excluded, int count,
                                 const std::vector<Config>& starts, const AnnealingOptions& options,
                                 std::mt19937_64& rng);

}  // namespace nimble::tuning

#pragma once
// AutoTVM's diversity-aware batch selection: greedily take the candidate with the highest
// predicted score plus a bonus for every knob value the batch does not yet contain, so that a
// batch does not spend all its measurements on near-copies of one config.
#include <vector>

#include "tuning/search/simulated_annealing.h"

namespace nimble::tuning {

// Indices into `candidates` of the `count` picks, in pick order.
std::vector<size_t> select_diverse(const std::vector<ScoredConfig>& candidates, int count,
                                   double diversity_weight);

}  // namespace nimble::tuning

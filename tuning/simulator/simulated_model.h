#pragma once
// A synthetic model: tasks with an order of magnitude between them in FLOPs, achievable
// efficiency and occurrence count, each a SyntheticLandscape behind a SimulatedMeasurer.
// The same seed gives the same model, so schedulers can be compared on it.
#include <cstdint>
#include <vector>

#include "tuning/task/task.h"

namespace nimble::tuning {

struct SimulatedModelOptions {
  int tasks = 12;
  uint64_t seed = 0;
  double peak_gflops = 1000;
  // Measurement noise is seeded apart from the model so that repeated runs of one model can
  // differ only in their noise.
  uint64_t noise_seed = 0;
};

std::vector<Task> make_simulated_model(const SimulatedModelOptions& options);

}  // namespace nimble::tuning

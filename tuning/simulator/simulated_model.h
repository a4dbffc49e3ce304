#pragma once
// A synthetic model: tasks with an order of magnitude between them in FLOPs, achievable
// efficiency and occurrence count, each a SyntheticLandscape behind a SimulatedMeasurer.
// The same seed gives the same model, so schedulers can be compared on it.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "tuning/measure/measure_pool.h"
#include "tuning/task/task.h"

namespace nimble::tuning {

struct SimulatedModelOptions {
  int tasks = 12;
  uint64_t seed = 0;
  double peak_gflops = 1000;
  // Measurement noise is seeded apart from the model so that repeated runs of one model can
  // differ only in their noise.
  uint64_t noise_seed = 0;
  // Noise drawn per batch (see SimulatedMeasurer): what workers measure with.
  bool batch_keyed_noise = false;
};

std::vector<Task> make_simulated_model(const SimulatedModelOptions& options);

// A simulated model's measurers where a worker measures: rebuilt from the model's options, so
// that the same options give the same landscapes on every worker, with batch-keyed noise so
// that a batch's timings do not depend on which worker timed it; batches by task signature.
class SimulatedModelMeasurer {
 public:
  explicit SimulatedModelMeasurer(const SimulatedModelOptions& options);
  SimulatedModelMeasurer(uint64_t seed, int tasks, double peak_gflops);
  std::vector<std::string> signatures() const;
  std::vector<MeasureResult> measure(const std::string& signature,
                                     const std::vector<Config>& configs,
                                     const RepeatSettings& repeats);

 private:
  std::vector<Task> tasks_;
  std::map<std::string, size_t> by_signature_;
};

}  // namespace nimble::tuning

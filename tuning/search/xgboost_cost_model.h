#pragma once
// The per-task cost model of AutoTVM: gradient-boosted trees, trained through XGBoost's C API
// on the task's measured records, predicting normalized throughput from knob features.
#include <cstdint>
#include <memory>
#include <vector>

namespace nimble::tuning {

struct CostModelOptions {
  int rounds = 40;
  int max_depth = 6;
  double eta = 0.3;
  int threads = 1;  // the tuner runs many small models; threads cost more than they give here
};

class XGBoostCostModel {
 public:
  explicit XGBoostCostModel(CostModelOptions options = {}, uint64_t seed = 0);
  // Replaces the model with one trained on these rows (row-major features, one target per row).
  void fit(const std::vector<std::vector<float>>& features, const std::vector<float>& targets);
  std::vector<float> predict(const std::vector<std::vector<float>>& features) const;
  bool trained() const { return booster_ != nullptr; }

 private:
  struct BoosterDeleter {
    void operator()(void* handle) const;
  };
  CostModelOptions options_;
  uint64_t seed_;
  std::unique_ptr<void, BoosterDeleter> booster_;
};

}  // namespace nimble::tuning

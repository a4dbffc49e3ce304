#pragma once
// Trimmer's cold-candidate filter. A proposal is "cold" when the task's learned cost model
// predicts it far slower than the best, or when its nearest measured neighbours in knob space
// were all cold or failed (Trimmer's similarity query). The filter is applied with a
// probability that decays with every batch of records (inverse epsilon-greedy): early on the
// model is poor and filtering saves the most; later, exploration matters more.
#include <random>
#include <vector>

namespace nimble::tuning {

struct ColdFilterOptions {
  bool enabled = true;
  double cold_factor = 2.0;          // cold = more than this many times slower than the best
  int neighbors = 3;                 // k of the similarity query
  double initial_probability = 1.0;  // filtering probability before the first batch
  double decay = 0.9;                // multiplied in at every batch of records
  double min_probability = 0.0;
};

class ColdCandidateFilter {
 public:
  explicit ColdCandidateFilter(ColdFilterOptions options = {}) : options_(options) {}

  // `throughput` is normalized to the best measured (1 = best); a failure is remembered as such.
  void remember(std::vector<float> features, double throughput, bool failed);
  double probability(int batches_seen) const;
  // Decide for one proposal whether to filter it, drawing the epsilon-greedy coin from `rng`.
  bool should_replace(const std::vector<float>& features, double predicted_throughput,
                      int batches_seen, std::mt19937_64& rng) const;
  // The deterministic part: is this proposal cold according to the model and its neighbours?
  bool is_cold(const std::vector<float>& features, double predicted_throughput) const;
  // Throughputs are relative to the best at measurement time; rescale when the best improves.
  void rescale(double factor);
  const ColdFilterOptions& options() const { return options_; }

 private:
  struct Memory {
    std::vector<float> features;
    double throughput;
    bool failed;
  };
  ColdFilterOptions options_;
  std::vector<Memory> memory_;
};

}  // namespace nimble::tuning

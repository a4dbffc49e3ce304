#pragma once
// A synthetic kernel whose performance over its knob space looks like what DynaTune reports
// for real ones: search finds diminishing returns towards a ceiling it cannot know, a narrow
// region of the space gives a jump, measurements are noisy, and some configs fail (compile
// errors, run errors from too-large tiles, timeouts of hopeless configs).
#include <cstdint>
#include <string>
#include <vector>

#include "tuning/measure/measure_result.h"
#include "tuning/space/knob_space.h"

namespace nimble::tuning {

struct LandscapeSpec {
  std::string name;
  double flops = 1e9;
  double ceiling_fraction = 0.5;  // best achievable GFLOPS / device peak
  double noise = 0.05;            // relative standard deviation of one timing
  double compile_seconds = 0.5;
  double compile_failure_rate = 0.04;
  double jump_factor = 1.5;  // the hidden region's gain over the rest of the space
  uint64_t seed = 0;
};

struct LandscapeTruth {
  MeasureError error = MeasureError::kNone;
  double seconds = 0;  // true (noise-free) latency when the config works
};

class SyntheticLandscape {
 public:
  SyntheticLandscape(LandscapeSpec spec, double peak_gflops);
  const KnobSpace& space() const { return space_; }
  const LandscapeSpec& spec() const { return spec_; }
  LandscapeTruth evaluate(const Config& config) const;
  double optimum_seconds() const { return optimum_seconds_; }
  // Enough slower than the optimum that a measurement would time out.
  double timeout_seconds() const { return 200 * optimum_seconds_; }

 private:
  double efficiency(const Config& config) const;  // unnormalized, > 0
  bool runs(const Config& config) const;          // neither too large a tile nor a compile error
  uint64_t hash(const Config& config, uint64_t salt) const;

  LandscapeSpec spec_;
  double peak_gflops_;
  KnobSpace space_;
  std::vector<int> optimum_position_;  // per ordered knob
  std::vector<double> width_;
  std::vector<double> floor_;
  std::vector<std::vector<double>> choice_factor_;  // per categorical knob
  int jump_unroll_ = 0;
  int jump_vectorize_ = 0;
  double max_efficiency_ = 1;
  double optimum_seconds_ = 0;
};

}  // namespace nimble::tuning

#pragma once
// Times the candidates of one tunable op for the tuner: each config is built, checked against
// ATen on random operands, then timed; a candidate that fails to build, throws, gives a wrong
// result or runs past the timeout is a failed measurement with its message, never a winner.
// ATen's own kernel, the baseline a candidate must beat, is timed the same way.
#include <functional>
#include <memory>
#include <string>

#include "csrc/kernels/kernel_space.h"
#include "tuning/measure/measurer.h"

namespace nimble::kernels {

struct MeasureOptions {
  // Calls per timed repeat are chosen so that a repeat lasts at least this long: a single call
  // of a 20 us kernel is mostly timer noise.
  double min_repeat_seconds = 2e-3;
  // A candidate whose first call takes longer is recorded as timed out and not repeated (a
  // running kernel cannot be interrupted; this bounds the time a slow one costs).
  double timeout_seconds = 2.0;
  uint64_t seed = 0;  // of the random operands
};

// "" when `result` equals `reference` within float rounding (max |difference| at most 1e-4 of
// max |reference|), else what differs: layout, dtype, or the size of the error.
std::string compare_results(const at::Tensor& result, const at::Tensor& reference);

// Seconds per call of `call`: mean over `repeats` repeats, as the tuner's candidates are timed.
double time_calls(const std::function<void()>& call, const tuning::RepeatPolicy& repeats,
                  const MeasureOptions& options, tuning::MeasureResult& result);

class KernelMeasurer : public tuning::Measurer {
 public:
  KernelMeasurer(std::shared_ptr<const KernelSpace> space, MeasureOptions options);
  std::vector<tuning::MeasureResult> measure(const std::vector<tuning::Config>& batch,
                                             const tuning::RepeatPolicy& repeats) override;
  // ATen's kernel on the same operands, timed the same way (fixed repeats).
  double baseline_seconds(int repeats = 10);

 private:
  tuning::MeasureResult measure_one(const tuning::Config& config,
                                    const tuning::RepeatPolicy& repeats);

  std::shared_ptr<const KernelSpace> space_;
  MeasureOptions options_;
  std::vector<at::Tensor> operands_;
  at::Tensor reference_;
};

}  // namespace nimble::kernels

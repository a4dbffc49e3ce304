#pragma once
// Times the candidates of one tunable op for the tuner: each config is built, checked against
// ATen on random operands, then timed; a candidate that fails to build, throws, gives a wrong
// result or runs past the timeout is a failed measurement with its message, never a winner.
// ATen's own kernel, the baseline a candidate must beat, is timed the same way.
#include <ATen/core/Tensor.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

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
  // Time each call with cold caches, as in a replay, where a convolution's weights were last
  // touched a whole model ago: before every timed call, `flush_bytes` are written (evicting
  // the caches) and the input operand is read back (the op before it just wrote it). A call
  // timed hot, over and over, flatters kernels whose weights then sit in cache (up to 2.5x
  // on mobilenet_v2's layers). Off: calls repeated back to back.
  bool cold_cache = true;
  size_t flush_bytes = size_t{64} << 20;
  // Where the kernels run: a CUDA kernel is timed with events on the current stream and its
  // cold calls follow an L2 flush (csrc/kernels/cuda/device_timing.h); a CPU one by the clock.
  c10::DeviceType device = c10::DeviceType::CPU;
};

// Evicts the CPU caches by writing a buffer larger than they are. One flusher serves all the
// measurers of a process (a buffer each cost 3.4 GB for mobilenet_v2's 53 tasks); the lock
// keeps a flusher shared across threads free of data races.
class CacheFlusher {
 public:
  explicit CacheFlusher(size_t bytes) : buffer_(bytes) {}
  void flush() {
    const std::lock_guard<std::mutex> lock(mutex_);
    ++pass_;
    std::fill(buffer_.begin(), buffer_.end(), pass_);
  }
  // Evicts the L2 cache of a GPU (a buffer there, made on first use); throws in a build
  // without CUDA.
  void flush_device(c10::Device device);

 private:
  std::mutex mutex_;
  std::vector<unsigned char> buffer_;
  unsigned char pass_ = 0;
  at::Tensor device_buffer_;
};

// The flusher `options` ask for: a buffer of flush_bytes, or none when cold_cache is off.
std::shared_ptr<CacheFlusher> make_flusher(const MeasureOptions& options);

// "" when `result` equals `reference` within float rounding (max |difference| at most 1e-4 of
// max |reference|), else what differs: layout, dtype, or the size of the error.
std::string compare_results(const at::Tensor& result, const at::Tensor& reference);

// Seconds per call of `call`: mean over `repeats` repeats, as the tuner's candidates are timed.
// With `before_each`, it runs untimed before every timed call (cache flushing), one call per
// repeat; without, a repeat times enough calls back to back to last min_repeat_seconds.
// The first timed call is only a warm-up unless `first_call_done`: the caller already ran
// `call` once (a candidate's correctness check), so its one-time costs are paid and, with
// `before_each`, the first call counts as a repeat (a cold candidate is then cut after one).
double time_calls(const std::function<void()>& call, const tuning::RepeatPolicy& repeats,
                  const MeasureOptions& options, tuning::MeasureResult& result,
                  const std::function<void()>& before_each = {}, bool first_call_done = false);

// What runs before each timed call of a kernel on `operands` under `options`: the cache
// flush and the re-read of the input, or nothing when cold_cache is off.
std::function<void()> cold_start(CacheFlusher& flusher, const std::vector<at::Tensor>& operands,
                                 const MeasureOptions& options);

// `measure_one` on each config of `batch` in turn, below autograd, each result with what
// measuring it cost: a measurer's `measure`.
std::vector<tuning::MeasureResult> measure_each(
    const std::vector<tuning::Config>& batch,
    const std::function<tuning::MeasureResult(const tuning::Config&)>& measure_one);

class KernelMeasurer : public tuning::Measurer {
 public:
  // `flusher`: shared with the other measurers of a model (make_flusher(options)).
  KernelMeasurer(std::shared_ptr<const KernelSpace> space, MeasureOptions options,
                 std::shared_ptr<CacheFlusher> flusher);
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
  std::shared_ptr<CacheFlusher> flusher_;
};

}  // namespace nimble::kernels

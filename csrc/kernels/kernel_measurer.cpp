#include "csrc/kernels/kernel_measurer.h"

#include <ATen/ATen.h>
#include <ATen/core/LegacyTypeDispatch.h>

#include <cmath>
#include <sstream>
#include <stdexcept>

#include "csrc/threads/steady_ns.h"
#include "tuning/measure/adaptive_evaluator.h"
#ifdef NIMBLE_WITH_CUDA
#include "csrc/kernels/cuda/device_timing.h"
#endif
#include "csrc/kernels/cuda/fp32_reference.h"

namespace nimble::kernels {
namespace {

// Seconds `call` takes where it runs: the host's clock, or a GPU's events.
double seconds_of(const MeasureOptions& options, const std::function<void()>& call) {
  if (options.device == c10::DeviceType::CUDA) {
#ifdef NIMBLE_WITH_CUDA
    return cuda::device_seconds(call);
#else
    throw std::runtime_error("timing a CUDA kernel in a build without CUDA");
#endif
  }
  const double start = steady_seconds();
  call();
  return steady_seconds() - start;
}

}  // namespace

std::string compare_results(const at::Tensor& result, const at::Tensor& reference) {
  std::ostringstream why;
  if (!result.defined()) return "the kernel returned no tensor";
  if (result.sizes() != reference.sizes() || result.strides() != reference.strides() ||
      result.scalar_type() != reference.scalar_type() || result.device() != reference.device()) {
    why << "wrong layout: got " << result.sizes() << " strides " << result.strides() << " "
        << result.scalar_type() << " on " << result.device() << ", ATen gives " << reference.sizes()
        << " strides " << reference.strides() << " " << reference.scalar_type() << " on "
        << reference.device();
    return why.str();
  }
  const double scale = reference.abs().max().item<double>();
  const double error = (result - reference).abs().max().item<double>();
  if (std::isfinite(error) && error <= 1e-4 * scale + 1e-6) return "";
  why << "wrong result: max |difference| " << error << " against max |ATen result| " << scale;
  return why.str();
}

void CacheFlusher::flush_device([[maybe_unused]] c10::Device device) {
#ifdef NIMBLE_WITH_CUDA
  const std::lock_guard<std::mutex> lock(mutex_);
  cuda::flush_l2(device_buffer_, device);
#else
  throw std::runtime_error("flushing a GPU's cache in a build without CUDA");
#endif
}

std::function<void()> cold_start(CacheFlusher& flusher, const std::vector<at::Tensor>& operands,
                                 const MeasureOptions& options) {
  if (!options.cold_cache) return {};
  return [&flusher, &operands] {
    // On a GPU the weights of a replay's convolution were last read a whole model ago: out of
    // L2, while its input was just written by the op before it (left where the flush leaves it).
    if (operands[0].device().is_cuda()) return flusher.flush_device(operands[0].device());
    flusher.flush();
    // The input in cache again, as the op that produced it left it. (Summing through ATen
    // would be an op call of its own; a plain read is what the previous op's writes leave.)
    const at::Tensor& input = operands[0];
    if (!input.device().is_cpu() || !input.is_contiguous()) return;
    const auto* bytes = static_cast<const unsigned char*>(input.data_ptr());
    volatile unsigned char sink = 0;
    for (size_t i = 0; i < input.nbytes(); i += 64) sink = sink + bytes[i];
  };
}

double time_calls(const std::function<void()>& call, const tuning::RepeatPolicy& repeats,
                  const MeasureOptions& options, tuning::MeasureResult& result,
                  const std::function<void()>& before_each, bool first_call_done) {
  if (before_each) before_each();
  const double first = seconds_of(options, call);
  if (first > options.timeout_seconds) {
    result.error = tuning::MeasureError::kTimeout;
    std::ostringstream m;
    m << "first call took " << first << " s, over the " << options.timeout_seconds << " s timeout";
    result.message = m.str();
    return first;
  }
  // The first call pays one-time costs (a library's kernel generation, packed weights,
  // cold caches) unless the caller paid them: the number of calls per repeat comes from a
  // second, warm one.
  if (before_each) {
    bool first_pending = first_call_done;
    tuning::time_with_policy(
        repeats,
        [&] {
          if (first_pending) {
            first_pending = false;
            return first;
          }
          before_each();
          return seconds_of(options, call);
        },
        result);
    return result.mean_seconds();
  }
  const double warm = seconds_of(options, call);
  const int calls = static_cast<int>(
      std::clamp(std::ceil(options.min_repeat_seconds / std::max(warm, 1e-9)), 1.0, 10000.0));
  tuning::time_with_policy(
      repeats,
      [&] {
        return seconds_of(options,
                          [&] {
                            for (int i = 0; i < calls; ++i) call();
                          }) /
               calls;
      },
      result);
  return result.mean_seconds();
}

std::shared_ptr<CacheFlusher> make_flusher(const MeasureOptions& options) {
  return std::make_shared<CacheFlusher>(options.cold_cache ? options.flush_bytes : 0);
}

KernelMeasurer::KernelMeasurer(std::shared_ptr<const KernelSpace> space, MeasureOptions options,
                               std::shared_ptr<CacheFlusher> flusher)
    : space_(std::move(space)), options_(options), flusher_(std::move(flusher)) {
  if (!flusher_) throw std::invalid_argument("KernelMeasurer: no cache flusher given");
  options_.device = space_->op().device;
  const at::AutoDispatchBelowADInplaceOrView below_autograd;
  operands_ = space_->op().random_operands(options_.seed);
  const cuda::Fp32Reference exact_fp32;
  reference_ = space_->op().aten(operands_);
}

tuning::MeasureResult KernelMeasurer::measure_one(const tuning::Config& config,
                                                  const tuning::RepeatPolicy& repeats) {
  tuning::MeasureResult result;
  std::unique_ptr<TunedKernel> kernel;
  try {
    kernel = space_->build(config);
  } catch (const std::exception& e) {
    result.error = tuning::MeasureError::kCompile;
    result.message = e.what();
    return result;
  }
  try {
    const std::string wrong = compare_results(kernel->run(operands_), reference_);
    if (!wrong.empty()) {
      result.error = tuning::MeasureError::kRuntime;
      result.message = wrong;
      return result;
    }
    time_calls([&] { kernel->run(operands_); }, repeats, options_, result,
               cold_start(*flusher_, operands_, options_), /*first_call_done=*/true);
  } catch (const std::exception& e) {
    result.seconds.clear();
    result.error = tuning::MeasureError::kRuntime;
    result.message = e.what();
  }
  return result;
}

std::vector<tuning::MeasureResult> measure_each(
    const std::vector<tuning::Config>& batch,
    const std::function<tuning::MeasureResult(const tuning::Config&)>& measure_one) {
  const at::AutoDispatchBelowADInplaceOrView below_autograd;
  std::vector<tuning::MeasureResult> out;
  out.reserve(batch.size());
  for (const tuning::Config& config : batch) {
    const double start = steady_seconds();
    out.push_back(measure_one(config));
    out.back().cost_seconds = steady_seconds() - start;
  }
  return out;
}

std::vector<tuning::MeasureResult> KernelMeasurer::measure(const std::vector<tuning::Config>& batch,
                                                           const tuning::RepeatPolicy& repeats) {
  return measure_each(batch, [&](const tuning::Config& c) { return measure_one(c, repeats); });
}

double KernelMeasurer::baseline_seconds(int repeats) {
  const at::AutoDispatchBelowADInplaceOrView below_autograd;
  const tuning::FixedRepeats fixed(repeats);
  tuning::MeasureResult result;
  const TunableOp& op = space_->op();
  return time_calls([&] { op.aten(operands_); }, fixed, options_, result,
                    cold_start(*flusher_, operands_, options_));
}

}  // namespace nimble::kernels

#pragma once
// Timing kernels on a GPU as a replay runs them: device time between two events recorded on
// the current stream around the call (a CUDA graph launches the kernels, so the host's launch
// overhead is not what a replay pays), with the L2 cache evicted before a cold call.
#include <ATen/core/Tensor.h>

#include <functional>

namespace nimble::kernels::cuda {

// Seconds between an event recorded before `call` and one after it on the current stream;
// waits for the second.
double device_seconds(const std::function<void()>& call);

// Evicts the L2 cache of `device` by writing `buffer`, first allocated there at twice the L2's
// size (kept by the caller, so that flushing allocates nothing after the first time).
void flush_l2(at::Tensor& buffer, c10::Device device);

}  // namespace nimble::kernels::cuda

#pragma once
// The CUDA streams and events one graph executor issues its ops on. Events are its own,
// made and destroyed with it. Streams are torch's pool streams (pool_streams.h says why):
// nimble never creates or destroys a CUDA stream.
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include <utility>
#include <vector>

#include "csrc/runtime/pool_streams.h"

namespace nimble::cuda {

// Streams per priority in torch's pool (c10/cuda/CUDAStream.cpp, kStreamsPerPool).
inline constexpr int kPoolStreamsPerPriority = 32;

// `count` distinct pool streams of `device`. Stream 0, which carries the plan's critical
// path (scheduling/physical_streams.h), is a high-priority one: torch instantiates graphs
// with cudaGraphInstantiateFlagUseNodePriority, and a captured kernel node keeps the
// priority of the stream it was captured on, so the critical path's kernels go first when
// side branches compete with them for the GPU.
inline std::vector<c10::cuda::CUDAStream> pool_streams(int count, c10::DeviceIndex device) {
  return take_distinct_streams<c10::cuda::CUDAStream>(count, kPoolStreamsPerPriority, [&](int s) {
    return c10::cuda::getStreamFromPool(/*isHighPriority=*/s == 0, device);
  });
}

class OwnedEvent {
 public:
  // Events that only order streams need no timestamps (cheaper to record and wait for).
  explicit OwnedEvent(bool timing = false) {
    C10_CUDA_CHECK(
        cudaEventCreateWithFlags(&event_, timing ? cudaEventDefault : cudaEventDisableTiming));
  }
  ~OwnedEvent() {
    if (event_ != nullptr) C10_CUDA_IGNORE_ERROR(cudaEventDestroy(event_));
  }
  OwnedEvent(const OwnedEvent&) = delete;
  OwnedEvent& operator=(const OwnedEvent&) = delete;
  OwnedEvent(OwnedEvent&& other) noexcept : event_(std::exchange(other.event_, nullptr)) {}
  OwnedEvent& operator=(OwnedEvent&&) = delete;

  void record(cudaStream_t stream) const { C10_CUDA_CHECK(cudaEventRecord(event_, stream)); }
  void block(cudaStream_t stream) const { C10_CUDA_CHECK(cudaStreamWaitEvent(stream, event_, 0)); }
  // Milliseconds from `start` to this event; both must be timing events that completed.
  float since(const OwnedEvent& start) const {
    float ms = 0;
    C10_CUDA_CHECK(cudaEventElapsedTime(&ms, start.event_, event_));
    return ms;
  }

 private:
  cudaEvent_t event_ = nullptr;
};

}  // namespace nimble::cuda

#pragma once
// Owners of the CUDA streams and events one graph executor issues its ops on: created
// with it, destroyed with it, never shared with another graph or with torch's pool.
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include <utility>

namespace nimble::cuda {

class OwnedStream {
 public:
  explicit OwnedStream(c10::DeviceIndex device) {
    C10_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    wrapped_ = c10::cuda::getStreamFromExternal(stream_, device);
  }
  ~OwnedStream() {
    if (stream_ != nullptr) C10_CUDA_IGNORE_ERROR(cudaStreamDestroy(stream_));
  }
  OwnedStream(const OwnedStream&) = delete;
  OwnedStream& operator=(const OwnedStream&) = delete;
  OwnedStream(OwnedStream&& other) noexcept
      : stream_(std::exchange(other.stream_, nullptr)), wrapped_(other.wrapped_) {}
  OwnedStream& operator=(OwnedStream&&) = delete;

  cudaStream_t get() const { return stream_; }
  // For torch: guards, the caching allocator's stream bookkeeping.
  c10::cuda::CUDAStream torch_stream() const { return wrapped_; }

 private:
  cudaStream_t stream_ = nullptr;
  c10::cuda::CUDAStream wrapped_ = c10::cuda::getDefaultCUDAStream();
};

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

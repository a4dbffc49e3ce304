#include "csrc/kernels/cuda/device_timing.h"

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>

namespace nimble::kernels::cuda {

double device_seconds(const std::function<void()>& call) {
  at::cuda::CUDAEvent start(cudaEventDefault), end(cudaEventDefault);
  const auto stream = at::cuda::getCurrentCUDAStream();
  start.record(stream);
  call();
  end.record(stream);
  end.synchronize();
  return start.elapsed_time(end) * 1e-3;
}

void flush_l2(at::Tensor& buffer, c10::Device device) {
  if (!buffer.defined() || buffer.device() != device) {
    const c10::cuda::CUDAGuard guard(device);
    const int64_t l2 = at::cuda::getCurrentDeviceProperties()->l2CacheSize;
    buffer = at::empty({2 * std::max<int64_t>(l2, 1 << 20)},
                       at::TensorOptions().dtype(at::kByte).device(device));
  }
  buffer.zero_();
}

}  // namespace nimble::kernels::cuda

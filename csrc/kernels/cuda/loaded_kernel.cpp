#include "csrc/kernels/cuda/loaded_kernel.h"

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <cuda_runtime_api.h>

namespace nimble::kernels::cuda {

struct LoadedKernel::Handles {
  cudaLibrary_t library = nullptr;
  cudaKernel_t kernel = nullptr;
};

LoadedKernel::LoadedKernel(const std::string& cubin, const std::string& entry)
    : handles_(std::make_unique<Handles>()) {
  C10_CUDA_CHECK(cudaLibraryLoadData(&handles_->library, cubin.data(), nullptr, nullptr, 0, nullptr,
                                     nullptr, 0));
  C10_CUDA_CHECK(cudaLibraryGetKernel(&handles_->kernel, handles_->library, entry.c_str()));
}

LoadedKernel::~LoadedKernel() {
  if (handles_->library != nullptr) C10_CUDA_IGNORE_ERROR(cudaLibraryUnload(handles_->library));
}

void LoadedKernel::launch(const nimble_cuda::GridSize& grid, int threads, const void* args) const {
  void* params[] = {const_cast<void*>(args)};
  C10_CUDA_CHECK(cudaLaunchKernel(reinterpret_cast<const void*>(handles_->kernel),
                                  dim3(grid.x, grid.y, grid.z), dim3(threads), params, 0,
                                  at::cuda::getCurrentCUDAStream()));
}

int current_sm() {
  const cudaDeviceProp* p = at::cuda::getCurrentDeviceProperties();
  return p->major * 10 + p->minor;
}

}  // namespace nimble::kernels::cuda

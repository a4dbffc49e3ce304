#pragma once
// A compiled kernel loaded into the current CUDA context (through the runtime's library API,
// so that nimble needs no link to the driver library, which a machine without a GPU lacks),
// launched on the current stream: inside a graph capture, the launch is captured like any op.
#include <memory>
#include <string>

#include "csrc/kernels/cuda/host_grid.h"

namespace nimble::kernels::cuda {

class LoadedKernel {
 public:
  LoadedKernel(const std::string& cubin, const std::string& entry);
  ~LoadedKernel();
  LoadedKernel(const LoadedKernel&) = delete;
  LoadedKernel& operator=(const LoadedKernel&) = delete;
  // `args` points at the kernel's one parameter, an Args struct (the bodies' layout is the same
  // in host C++ and in device code: both compile the same struct).
  void launch(const nimble_cuda::GridSize& grid, int threads, const void* args) const;

 private:
  struct Handles;
  std::unique_ptr<Handles> handles_;
};

// The compute capability of the current GPU as NVRTC names it (86 for sm_86).
int current_sm();

}  // namespace nimble::kernels::cuda

#pragma once
// The family "cuda_depthwise" (body: depthwise_conv_kernel.h): its knobs and what a config
// compiles and launches as. See nvrtc_family.h for what a Spec is.
#include <vector>

#include "csrc/kernels/cuda/depthwise_conv_kernel.h"
#include "csrc/kernels/cuda/nvrtc_family.h"

namespace nimble::kernels::cuda {

struct DepthwiseConvSpec {
  using Kernel = nimble_cuda::DepthwiseKernel;
  using Knobs = nimble_cuda::DepthwiseKnobs;
  using Args = nimble_cuda::DepthwiseArgs;
  static constexpr const char* kName = "cuda_depthwise";
  static constexpr const char* kEntry = "nimble_depthwise_conv";
  static constexpr const char* kSource = "csrc/kernels/cuda/depthwise_conv_kernel.h";
  static bool supports_shape(const TunableOp& op);
  static std::vector<tuning::Knob> tuned_knobs();
  static std::vector<int> op_fields(const TunableOp& op);
  static bool launchable(const Knobs& k);
  static nimble_cuda::GridSize grid(const TunableOp& op, const Knobs& k);
  static Args args(const TunableOp& op, const OperandPointers& p);
};

}  // namespace nimble::kernels::cuda

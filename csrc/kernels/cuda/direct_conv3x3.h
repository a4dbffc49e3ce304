#pragma once
// The family "cuda_direct3x3" (body: direct_conv3x3_kernel.h): its knobs and what a config
// compiles and launches as. See nvrtc_family.h for what a Spec is.
#include <vector>

#include "csrc/kernels/cuda/direct_conv3x3_kernel.h"
#include "csrc/kernels/cuda/nvrtc_family.h"

namespace nimble::kernels::cuda {

struct DirectConv3x3Spec {
  using Kernel = nimble_cuda::DirectConv3x3Kernel;
  using Knobs = nimble_cuda::DirectConvKnobs;
  using Args = nimble_cuda::DirectConvArgs;
  static constexpr const char* kName = "cuda_direct3x3";
  static constexpr const char* kEntry = "nimble_direct_conv3x3";
  static constexpr const char* kSource = "csrc/kernels/cuda/direct_conv3x3_kernel.h";
  static bool supports_shape(const TunableOp& op);
  static std::vector<tuning::Knob> tuned_knobs();
  static std::vector<int> op_fields(const TunableOp& op);
  static bool launchable(const Knobs& k);
  static nimble_cuda::GridSize grid(const TunableOp& op, const Knobs& k);
  static Args args(const TunableOp& op, const OperandPointers& p);
};

}  // namespace nimble::kernels::cuda

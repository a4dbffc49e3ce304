#pragma once
// The family "cuda_pointwise" (body: pointwise_gemm_kernel.h): its knobs and what a config
// compiles and launches as. See nvrtc_family.h for what a Spec is.
#include <vector>

#include "csrc/kernels/cuda/nvrtc_family.h"
#include "csrc/kernels/cuda/pointwise_gemm_kernel.h"

namespace nimble::kernels::cuda {

struct PointwiseGemmSpec {
  using Kernel = nimble_cuda::PointwiseGemmKernel;
  using Knobs = nimble_cuda::PointwiseKnobs;
  using Args = nimble_cuda::PointwiseArgs;
  static constexpr const char* kName = "cuda_pointwise";
  static constexpr const char* kEntry = "nimble_pointwise_gemm";
  static constexpr const char* kSource = "csrc/kernels/cuda/pointwise_gemm_kernel.h";
  static bool supports_shape(const TunableOp& op);
  static std::vector<tuning::Knob> tuned_knobs();
  static std::vector<int> op_fields(const TunableOp& op);
  static bool launchable(const Knobs& k);
  static nimble_cuda::GridSize grid(const TunableOp& op, const Knobs& k);
  static Args args(const TunableOp& op, const OperandPointers& p);
};

}  // namespace nimble::kernels::cuda

#pragma once
// A convolution of a recorded trace and the ops after it that the CPU lowering fuses into
// it (cpu_lowering.h), before the fused op is made; the layout plan (cpu_layout_plan.h)
// may still change what it reads and returns.
#include <ATen/core/Tensor.h>

#include <vector>

#include "csrc/kernels/cpu/prepacked_convolution.h"

namespace nimble {

struct FusedConvolution {
  size_t convolution = 0;
  std::vector<size_t> fused;  // the ops after it that it replaces, ascending
  at::Tensor input, other, weight, bias;
  std::vector<at::Tensor> sources;
  kernels::ConvolutionGeometry geometry;
  kernels::ConvolutionEpilogue epilogue;
  at::Tensor result;                // what the last replaced op returned
  std::vector<at::Tensor> aliases;  // what in-place ops returned for it, if other tensors
  bool keep_kernel_layout = false;  // result in the kernel's own layout, not the model's
  size_t last() const { return fused.empty() ? convolution : fused.back(); }
};

}  // namespace nimble

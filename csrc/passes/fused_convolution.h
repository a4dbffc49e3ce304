#pragma once
// A convolution of a recorded trace and the ops after it that the CPU lowering fuses into
// it (cpu_lowering.h), before the fused op is made; the layout plan (cpu_layout_plan.h)
// may still change what it reads and returns.
#include <ATen/core/Tensor.h>

#include <vector>

#include "csrc/kernels/cpu/torch_ops/prepacked_convolution.h"
#include "csrc/passes/fused_product.h"

namespace nimble {

struct FusedConvolution : FusedProduct {
  at::Tensor weight, bias;
  std::vector<at::Tensor> sources;
  kernels::ConvolutionGeometry geometry;
  bool keep_kernel_layout = false;  // result in the kernel's own layout, not the model's
};

}  // namespace nimble

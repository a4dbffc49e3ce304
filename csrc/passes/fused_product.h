#pragma once
// A product of a recorded trace that the CPU lowering replaces (a convolution, a matrix
// product with a constant weight) and the ops after it it fuses, before the fused op is
// made (fused_convolution.h, linear_lowering.h say what each kind adds).
#include <ATen/core/Tensor.h>

#include <vector>

#include "csrc/program/epilogue.h"

namespace nimble {

struct FusedProduct {
  size_t product = 0;         // the convolution or matrix product
  std::vector<size_t> fused;  // the ops after it that it replaces, ascending
  at::Tensor input, other;    // what the fused op reads: the activation, the residual
  Epilogue epilogue;
  at::Tensor result;                // what the last replaced op returned
  std::vector<at::Tensor> aliases;  // what in-place ops returned for it, if other tensors
  size_t last() const { return fused.empty() ? product : fused.back(); }
};

}  // namespace nimble

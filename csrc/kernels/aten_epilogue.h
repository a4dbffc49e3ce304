#pragma once
// The epilogue (epilogue.h) as ATen's in-place ops, on any device: the reference a fused
// kernel is measured against, and what runs after a kernel that does not fuse it.
#include <ATen/core/Tensor.h>

#include "csrc/program/epilogue.h"

namespace nimble::kernels {

// y = activation(y), the epilogue's residual flag aside.
void activate_in_place(const Epilogue& epilogue, at::Tensor& y);

// y = activation(y + residual); `residual` is read only when the epilogue has one.
void apply_in_place(const Epilogue& epilogue, at::Tensor& y, const at::Tensor* residual);

}  // namespace nimble::kernels

#pragma once
// The CPU kernel families, one a file in this folder.
#include <memory>

#include "csrc/kernels/kernel_family.h"

namespace nimble::kernels {

std::shared_ptr<const KernelFamily> aten_conv_family();       // aten_conv.cpp
std::shared_ptr<const KernelFamily> im2col_gemm_family();     // im2col_gemm.cpp
std::shared_ptr<const KernelFamily> depthwise_conv_family();  // depthwise_conv.cpp
std::shared_ptr<const KernelFamily> direct_conv_family();     // direct_conv.cpp
std::shared_ptr<const KernelFamily> winograd_conv_family();   // winograd_conv.cpp
std::shared_ptr<const KernelFamily> prepacked_family();       // prepacked_family.cpp

}  // namespace nimble::kernels

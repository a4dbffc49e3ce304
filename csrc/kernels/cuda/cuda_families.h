#pragma once
// The kernel families for ops on a CUDA GPU, one a file in this folder. Built only with CUDA.
#include <memory>

#include "csrc/kernels/cuda/cubin_cache.h"
#include "csrc/kernels/kernel_family.h"

namespace nimble::kernels::cuda {

// Library algorithm choice.
std::shared_ptr<const KernelFamily> cudnn_conv_family();       // cudnn_conv.cpp
std::shared_ptr<const KernelFamily> cublaslt_linear_family();  // cublaslt_linear.cpp
// nimble's own kernels, compiled by NVRTC (cached in `cache`).
std::shared_ptr<const KernelFamily> depthwise_conv_family(
    const CubinCache& cache);  // depthwise_conv.cpp
std::shared_ptr<const KernelFamily> pointwise_gemm_family(
    const CubinCache& cache);  // pointwise_gemm.cpp
std::shared_ptr<const KernelFamily> direct_conv3x3_family(
    const CubinCache& cache);  // direct_conv3x3.cpp

}  // namespace nimble::kernels::cuda

#pragma once
// nimble's NVRTC kernel families, by their bodies' constants; each one's members are defined in
// its own file (depthwise_conv.cpp, pointwise_gemm.cpp, direct_conv3x3.cpp).
#include "csrc/kernels/cuda/depthwise_conv_kernel.h"
#include "csrc/kernels/cuda/direct_conv3x3_kernel.h"
#include "csrc/kernels/cuda/nvrtc_family.h"
#include "csrc/kernels/cuda/pointwise_gemm_kernel.h"

namespace nimble::kernels::cuda {

using DepthwiseConvSpec = NvrtcSpec<nimble_cuda::DepthwiseKnobs>;
using PointwiseGemmSpec = NvrtcSpec<nimble_cuda::PointwiseKnobs>;
using DirectConv3x3Spec = NvrtcSpec<nimble_cuda::DirectConvKnobs>;

}  // namespace nimble::kernels::cuda

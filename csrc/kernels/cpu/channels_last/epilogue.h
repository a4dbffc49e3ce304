#pragma once
// What follows a convolution or product inside nimble's own channels-last kernels
// (depthwise_convolution.h, gemm_convolution.h): a residual add, then one activation,
// applied to a run of results right after the kernel stored them (they are still in L1).
// Torch-free: the kernels work on raw float arrays. The epilogue is the one every kernel takes
// (program/epilogue.h); its `residual` flag is the caller's to read: these take the residual
// as a pointer.
#include <cstdint>

#include "csrc/kernels/cpu/channels_last/isa.h"
#include "csrc/program/epilogue.h"

namespace nimble::kernels::nhwc {

// y[i] = activation(y[i] + residual[i]) for i < n; residual null: no add. NaN stays NaN
// (as in eager PyTorch), whatever the activation. `isa`: the code that runs, the calling
// kernel's (isa.h); each is compiled with its own flags, and results may differ in the last
// bits between them.
void finish(Isa isa, float* y, const float* residual, int64_t n, const Epilogue& epilogue);

// y[p, c] = activation(x[p, c] * scale[c] + shift[c]) for pixels [begin, end) of x and y
// [pixels, channels], dense and not overlapping: an inference batch norm and the activation
// after it (kernels/cpu/torch_ops/nhwc_tensor_ops.h).
void scale_shift(Isa isa, const float* x, float* y, const float* scale, const float* shift,
                 int64_t channels, const Epilogue& epilogue, int64_t begin, int64_t end);

}  // namespace nimble::kernels::nhwc

#pragma once
// What the prepacked kernels of a lowered CPU program (prepacked_convolution.h,
// prepacked_linear.h) hold beside the model's own weights.
#include <cstdint>

#include "csrc/program/program.h"

namespace nimble::kernels {

// Bytes of the packed weights the program's prepacked convolutions and linear layers hold.
int64_t prepacked_weight_bytes(const Program& program);

}  // namespace nimble::kernels

#pragma once
// What a tuned lowering asks of one convolution (passes/cpu_lowering.h, slot/lowering_choices.h):
// the kernel, the intra-op threads and nimble's kernel parameters, written as a short spec,
// "nimble_gemm threads=1 gemm.tile_rows=4": the kernel's name (PrepackedConvolution::
// kernel_name), then only what is not the rule's (threads 0: the caller's; parameters as
// kernel_parameters.h writes them). A lowered convolution reports the spec it runs (of()), so
// a replay built from a spec can be checked against it.
#include <cstdint>
#include <string>

#include "csrc/kernels/cpu/channels_last/kernel_parameters.h"
#include "csrc/kernels/cpu/torch_ops/prepacked_convolution.h"

namespace nimble::kernels {

struct TunedConvolution {
  PrepackedConvolution::Kernel kernel = PrepackedConvolution::Kernel::kOneDnn;
  int64_t threads = 0;
  nhwc::KernelParameters parameters;

  std::string to_string() const;
  // Throws naming what it cannot read: an unknown kernel or word, or parameters of the other
  // kernel (gemm.* are nimble_gemm's, depthwise.* nimble_depthwise's, oneDNN and Winograd have
  // none).
  static TunedConvolution parse(const std::string& spec);
  static TunedConvolution of(const PrepackedConvolution& convolution);
};

}  // namespace nimble::kernels

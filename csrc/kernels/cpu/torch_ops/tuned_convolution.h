#pragma once
// What a tuned lowering asks of one convolution (passes/cpu_lowering.h, slot/lowering_choices.h):
// the kernel, the intra-op threads and nimble's kernel parameters, written as a short spec,
// "nimble_gemm threads=1 gemm.tile_rows=4": the kernel's name (PrepackedConvolution::
// kernel_name), then only what is not the rule's (threads 0: the caller's; parameters as
// kernel_parameters.h writes them). A lowered convolution reports the spec it runs (of()), so
// a replay built from a spec can be checked against it. A lowered linear layer's spec
// (TunedLinear) is written the same way, of its two kernels.
#include <cstdint>
#include <string>

#include "csrc/kernels/cpu/channels_last/kernel_parameters.h"
#include "csrc/kernels/cpu/torch_ops/prepacked_convolution.h"
#include "csrc/kernels/cpu/torch_ops/prepacked_linear.h"

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

struct TunedLinear {
  PrepackedLinear::Kernel kernel = PrepackedLinear::Kernel::kNimbleGemm;
  int64_t threads = 0;
  nhwc::KernelParameters parameters;  // gemm.* (nimble_gemm's) only

  std::string to_string() const;
  // Throws as TunedConvolution::parse does, and for a convolution's kernel.
  static TunedLinear parse(const std::string& spec);
  static TunedLinear of(const PrepackedLinear& linear);
};

}  // namespace nimble::kernels

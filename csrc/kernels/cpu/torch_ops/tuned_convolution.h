#pragma once
// What a tuned lowering asks of one lowered product, a convolution or a linear layer
// (passes/cpu_lowering.h, passes/linear_lowering.h, slot/lowering_choices.h): the kernel, the
// intra-op threads and nimble's kernel parameters, written as a short spec,
// "nimble_gemm threads=1 gemm.tile_rows=4": the kernel's name (the op's kernel_name), then only
// what is not the rule's (threads 0: the caller's; parameters as kernel_parameters.h writes
// them). A lowered product reports the spec it runs (of()), so a replay built from a spec can
// be checked against it.
#include <cstdint>
#include <string>

#include "csrc/kernels/cpu/channels_last/kernel_parameters.h"
#include "csrc/kernels/cpu/torch_ops/prepacked_convolution.h"
#include "csrc/kernels/cpu/torch_ops/prepacked_linear.h"

namespace nimble::kernels {

// The spec of a kernel by name, the one writer of every lowered product's spec.
std::string tuned_spec(const std::string& kernel, int64_t threads,
                       const nhwc::KernelParameters& parameters);

// `Product` is PrepackedConvolution or PrepackedLinear: its Kernel, kernel_name, kernel_of_name
// and the kernel(), threads(), parameters() of one lowered op.
template <class Product>
struct TunedChoice {
  typename Product::Kernel kernel{};
  int64_t threads = 0;
  nhwc::KernelParameters parameters;

  std::string to_string() const;
  // Throws naming what it cannot read: a kernel the product does not have, an unknown word, or
  // parameters of another kernel (gemm.* are nimble_gemm's, depthwise.* nimble_depthwise's,
  // the other kernels have none).
  static TunedChoice parse(const std::string& spec);
  static TunedChoice of(const Product& product);
};

using TunedConvolution = TunedChoice<PrepackedConvolution>;
using TunedLinear = TunedChoice<PrepackedLinear>;

}  // namespace nimble::kernels

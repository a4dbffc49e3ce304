#pragma once
// A lowered product of a replay as in-context tuning sees it: the packed object a lowered
// convolution (PrepackedConvolution) or linear layer (PrepackedLinear) holds as its op's
// constant argument. Both ops take (input, residual or None, packed), so one site of either is
// captured, swapped for a candidate and timed the same way (context_measurer.h).
#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>

#include <optional>
#include <string>

#include "csrc/kernels/cpu/torch_ops/prepacked_convolution.h"
#include "csrc/kernels/cpu/torch_ops/prepacked_linear.h"
#include "csrc/kernels/kernel_space.h"
#include "tuning/space/config.h"

namespace nimble::slot {

class LoweredProduct {
 public:
  // The product a program op's constant holds; nullopt for any other constant.
  static std::optional<LoweredProduct> of(const c10::IValue& constant);

  // Its shape key (PrepackedConvolution::key, PrepackedLinear::key): what choices are keyed by.
  std::string key() const;
  std::string epilogue() const;  // program/epilogue.h's describe()
  // The same product on the kernel, intra-op threads and parameters that `config` of its
  // lowered_space (lowering_choices.h) asks for; throws where that kernel cannot run it.
  LoweredProduct with_config(const kernels::KernelSpace& space, const tuning::Config& config) const;
  at::Tensor run(const at::Tensor& input, const std::optional<at::Tensor>& other) const;
  // The constant a program op holds for it.
  c10::IValue value() const;

 private:
  c10::intrusive_ptr<kernels::PrepackedConvolution> convolution_;
  c10::intrusive_ptr<kernels::PrepackedLinear> linear_;
};

}  // namespace nimble::slot

#include "csrc/slot/lowered_product.h"

#include <ATen/Parallel.h>

#include "csrc/kernels/cpu/tuning_families/cpu_families.h"
#include "csrc/kernels/kernel_family.h"

namespace nimble::slot {

std::optional<LoweredProduct> LoweredProduct::of(const c10::IValue& constant) {
  static const c10::TypePtr convolution =
      c10::getCustomClassType<c10::intrusive_ptr<kernels::PrepackedConvolution>>();
  static const c10::TypePtr linear =
      c10::getCustomClassType<c10::intrusive_ptr<kernels::PrepackedLinear>>();
  if (!constant.isCustomClass()) return std::nullopt;
  LoweredProduct out;
  if (constant.type() == convolution) {
    out.convolution_ = constant.toCustomClass<kernels::PrepackedConvolution>();
  } else if (constant.type() == linear) {
    out.linear_ = constant.toCustomClass<kernels::PrepackedLinear>();
  } else {
    return std::nullopt;
  }
  return out;
}

std::string LoweredProduct::key() const {
  return convolution_ ? convolution_->key() : linear_->key();
}

std::string LoweredProduct::epilogue() const {
  return describe(convolution_ ? convolution_->epilogue() : linear_->epilogue());
}

LoweredProduct LoweredProduct::with_config(const kernels::KernelSpace& space,
                                           const tuning::Config& config) const {
  const kernels::KnobValues knobs(space.knobs(), config, space.family(config).name() + ".");
  // As a tuned lowering applies it (lowering_choices.cpp): every thread there is is the caller's.
  const int64_t threads =
      knobs.value("threads") < at::get_num_threads() ? knobs.value("threads") : 0;
  const kernels::nhwc::KernelParameters parameters =
      kernels::prepacked_parameters(space.op(), knobs);
  LoweredProduct out;
  if (convolution_) {
    out.convolution_ = convolution_->with_choice(
        kernels::PrepackedConvolution::kernel_of_name(knobs.label("kernel")), threads, parameters);
  } else {
    out.linear_ = linear_->with_choice(
        kernels::PrepackedLinear::kernel_of_name(knobs.label("kernel")), threads, parameters);
  }
  return out;
}

at::Tensor LoweredProduct::run(const at::Tensor& input,
                               const std::optional<at::Tensor>& other) const {
  return convolution_ ? convolution_->run(input, other) : linear_->run(input, other);
}

c10::IValue LoweredProduct::value() const {
  return convolution_ ? c10::IValue(convolution_) : c10::IValue(linear_);
}

}  // namespace nimble::slot

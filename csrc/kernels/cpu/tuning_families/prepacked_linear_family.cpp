// Family "prepacked_linear": the kernels the CPU lowering runs a linear layer on
// (prepacked_linear.h), as tuning candidates: oneDNN's matmul on a weight reordered once, and
// nimble's GEMM (the rows as the pixels of a 1x1 convolution) with its tiling as knobs, the
// same knobs as the convolutions' GEMM (gemm_parameter_knobs, kernel_parameters.h), each with
// its epilogue fused and the intra-op thread count as a knob; oneDNN has no parameters
// (prepacked_family_base.h). A lowered replay prepared with a tuning database runs each linear
// layer on this family's best record for its shape (slot/lowering_choices.h), where the replay
// runs it faster than the rule's.
#include <ATen/ATen.h>
#include <ATen/Context.h>

#include "csrc/kernels/cpu/torch_ops/prepacked_linear.h"
#include "csrc/kernels/cpu/tuning_families/cpu_families.h"
#include "csrc/kernels/cpu/tuning_families/cpu_kernel_support.h"
#include "csrc/kernels/cpu/tuning_families/prepacked_family_base.h"

namespace nimble::kernels {
namespace {

using Kernel = PrepackedLinear::Kernel;

std::vector<std::string> kernel_names() {
  std::vector<std::string> out;
  if (at::hasMKLDNN()) out.emplace_back(PrepackedLinear::kernel_name(Kernel::kOneDnn));
  out.emplace_back(PrepackedLinear::kernel_name(Kernel::kNimbleGemm));
  return out;
}

class PrepackedLinearKernel : public TunedKernel {
 public:
  PrepackedLinearKernel(TunableOp op, Kernel kernel, int64_t threads,
                        nhwc::KernelParameters parameters)
      : op_(std::move(op)), kernel_(kernel), threads_(threads), parameters_(parameters) {}

  at::Tensor run(at::TensorList operands) const override {
    // The 4-D operands (tunable_op.h) in the layer's 2-D form: input [n, c], weight [k, c].
    const at::Tensor input = operands[0].as_strided(
        {op_.n, op_.c}, {op_.input_strides[0], op_.input_strides[1]}, operands[0].storage_offset());
    const at::Tensor weight = view_sharing_version(operands[1], {op_.k, op_.c},
                                                   {op_.weight_strides[0], op_.weight_strides[1]});
    const at::Tensor bias = op_.bias ? operands[2] : at::Tensor();
    // Packed for the weight it was given (its storage: the 2-D view is new on every call);
    // the layer itself repacks when that weight is written (its version counter).
    if (!packed_ || weight.data_ptr() != weight_data_ || (bias.defined() && !bias.is_same(bias_))) {
      weight_data_ = weight.data_ptr();
      bias_ = bias;
      packed_ = c10::make_intrusive<PrepackedLinear>(
          weight, /*transposed=*/true, bias, op_.epilogue, op_.n,
          std::vector<int64_t>{op_.n, op_.k}, kernel_, std::make_shared<NonFiniteWeights>(),
          threads_, parameters_);
    }
    std::optional<at::Tensor> residual;
    if (op_.epilogue.residual) residual = operands.back().reshape({op_.n, op_.k});
    return in_output_layout(op_, packed_->run(input, residual).view({op_.n, op_.k, 1, 1}));
  }

 private:
  TunableOp op_;
  Kernel kernel_;
  int64_t threads_;
  nhwc::KernelParameters parameters_;
  mutable const void* weight_data_ = nullptr;
  mutable at::Tensor bias_;
  mutable c10::intrusive_ptr<PrepackedLinear> packed_;
};

class PrepackedLinearFamily : public PrepackedFamilyBase {
 public:
  PrepackedLinearFamily() : PrepackedFamilyBase("prepacked_linear", TunableOp::Kind::kLinear) {}
  std::unique_ptr<TunedKernel> build(const TunableOp& op, const KnobValues& k) const override {
    return std::make_unique<PrepackedLinearKernel>(
        op, PrepackedLinear::kernel_of_name(k.label("kernel")), k.value("threads"),
        prepacked_parameters(op, k));
  }

 protected:
  std::vector<std::string> kernel_names(const TunableOp&) const override {
    return kernels::kernel_names();
  }
  bool takes_no_parameters(const std::string& kernel) const override {
    return PrepackedLinear::kernel_of_name(kernel) != Kernel::kNimbleGemm;
  }
  std::vector<tuning::Knob> parameter_knobs(const TunableOp& op) const override {
    return gemm_parameter_knobs(op);
  }
  std::optional<std::string> rule_kernel(const TunableOp& op) const override {
    // None where the rule leaves the layer to ATen (the lowering does not lower it).
    const std::optional<Kernel> rule = PrepackedLinear::choose(op.n, op.c, op.k);
    if (!rule) return std::nullopt;
    return std::string(PrepackedLinear::kernel_name(*rule));
  }
};

}  // namespace

std::shared_ptr<const KernelFamily> prepacked_linear_family() {
  return std::make_shared<PrepackedLinearFamily>();
}

}  // namespace nimble::kernels

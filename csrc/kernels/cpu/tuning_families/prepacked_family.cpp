// Family "prepacked": the kernels the CPU lowering runs (prepacked_convolution.h), as tuning
// candidates: oneDNN on a weight reordered once, nimble's channels-last depthwise and
// indirect-product kernels, each with its epilogue fused and the intra-op thread count as a knob. A
// lowered replay prepared with a tuning database runs each convolution on this family's best record
// for its shape (`lowering_key`), so tuning starts from the lowering's own default, which is one of
// the candidates, never below it (csrc/passes/cpu_lowering.h).
#include <ATen/ATen.h>
#include <ATen/Context.h>

#include "csrc/kernels/cpu/torch_ops/prepacked_convolution.h"
#include "csrc/kernels/cpu/tuning_families/cpu_families.h"
#include "csrc/kernels/cpu/tuning_families/cpu_kernel_support.h"

namespace nimble::kernels {
namespace {

using Kernel = PrepackedConvolution::Kernel;

std::vector<std::string> kernel_names(const TunableOp& op) {
  std::vector<std::string> out;
  if (at::hasMKLDNN()) out.emplace_back(PrepackedConvolution::kernel_name(Kernel::kOneDnn));
  out.emplace_back(PrepackedConvolution::kernel_name(op.depthwise() ? Kernel::kNimbleDepthwise
                                                                    : Kernel::kNimbleGemm));
  return out;
}

class Prepacked : public TunedKernel {
 public:
  Prepacked(TunableOp op, Kernel kernel, int64_t threads)
      : op_(std::move(op)), kernel_(kernel), threads_(threads) {}

  at::Tensor run(at::TensorList operands) const override {
    // The thread count as the lowered program applies it (PrepackedConvolution's own), so
    // that what is measured here is what a lowered replay runs.
    const at::Tensor& weight = operands[1];
    const at::Tensor bias = op_.bias ? operands[2] : at::Tensor();
    // Packed for the weight it was given; the convolution itself repacks when that weight
    // is written (its version counter), and a kernel handed another weight packs that one.
    if (!packed_ || !weight.is_same(weight_) || (bias.defined() && !bias.is_same(bias_))) {
      weight_ = weight;
      bias_ = bias;
      packed_ = c10::make_intrusive<PrepackedConvolution>(
          weight, bias, std::vector<at::Tensor>{weight, bias},
          ConvolutionGeometry{{op_.padding[0], op_.padding[1]},
                              {op_.stride[0], op_.stride[1]},
                              {op_.dilation[0], op_.dilation[1]},
                              op_.groups},
          op_.epilogue, operands[0], op_.out_strides, std::make_shared<NonFiniteWeights>(), kernel_,
          threads_);
    }
    const std::optional<at::Tensor> residual =
        op_.epilogue.residual ? std::optional<at::Tensor>(operands.back()) : std::nullopt;
    return packed_->run(operands[0], residual);
  }

 private:
  TunableOp op_;
  Kernel kernel_;
  int64_t threads_;
  mutable at::Tensor weight_, bias_;
  mutable c10::intrusive_ptr<PrepackedConvolution> packed_;
};

class PrepackedFamily : public KernelFamily {
 public:
  std::string name() const override { return "prepacked"; }
  bool supports(const TunableOp& op) const override {
    return op.device == c10::DeviceType::CPU && op.kind == TunableOp::Kind::kConv2d &&
           op.dtype == c10::ScalarType::Float;
  }
  bool fuses_epilogue() const override { return true; }
  std::vector<tuning::Knob> knobs(const TunableOp& op) const override {
    return {tuning::Knob::categorical("kernel", kernel_names(op)), threads_knob()};
  }
  std::unique_ptr<TunedKernel> build(const TunableOp& op, const KnobValues& k) const override {
    const std::string name = k.label("kernel");
    for (Kernel kernel : {Kernel::kOneDnn, Kernel::kNimbleDepthwise, Kernel::kNimbleGemm}) {
      if (name == PrepackedConvolution::kernel_name(kernel))
        return std::make_unique<Prepacked>(op, kernel, k.value("threads"));
    }
    throw std::invalid_argument("prepacked: unknown kernel " + name);
  }
};

}  // namespace

std::shared_ptr<const KernelFamily> prepacked_family() {
  return std::make_shared<PrepackedFamily>();
}

}  // namespace nimble::kernels

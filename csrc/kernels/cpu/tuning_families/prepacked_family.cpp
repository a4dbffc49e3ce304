// Family "prepacked": the kernels the CPU lowering runs (prepacked_convolution.h), as tuning
// candidates: oneDNN on a weight reordered once, nimble's channels-last depthwise and
// indirect-product kernels, and its Winograd kernel for 3x3 layers of stride 1 (which the
// rule does not pick: a tuned replay may, per layer), each with its epilogue fused and the intra-op
// thread count as a knob, and nimble's kernels with their parameters as knobs (kernel_parameters.h:
// the GEMM's tiling, the depthwise kernel's blocking); oneDNN and Winograd have none
// (prepacked_family_base.h). A lowered replay prepared with a tuning database runs each
// convolution on this family's best record for its shape, kernel, threads and parameters
// (slot/lowering_choices.h), where the replay runs it faster than the rule's.
#include <ATen/ATen.h>
#include <ATen/Context.h>

#include "csrc/kernels/cpu/torch_ops/prepacked_convolution.h"
#include "csrc/kernels/cpu/tuning_families/cpu_families.h"
#include "csrc/kernels/cpu/tuning_families/cpu_kernel_support.h"
#include "csrc/kernels/cpu/tuning_families/prepacked_family_base.h"

namespace nimble::kernels {
namespace {

using Kernel = PrepackedConvolution::Kernel;

ConvolutionGeometry geometry_of(const TunableOp& op) {
  return ConvolutionGeometry{{op.padding[0], op.padding[1]},
                             {op.stride[0], op.stride[1]},
                             {op.dilation[0], op.dilation[1]},
                             op.groups};
}

// The parameter knobs of the op's nimble kernel, in knobs()'s order after kernel and threads.
// A few values each, 0 (or "rule") first: the trace recorder (nimble/tuning/trace.py) measures
// every config of a space, so its size is kept to hundreds.
std::vector<tuning::Knob> parameter_knobs(const TunableOp& op) {
  if (op.depthwise()) {
    return {tuning::Knob::integer_range("dw_channel_vectors", 0, 4),
            tuning::Knob::integer_range("dw_pixels", 0, 8, 2),
            tuning::Knob::categorical("dw_windows", {"rule", "off"}),
            tuning::Knob::integer_range("dw_pieces", 0, 4)};
  }
  return gemm_parameter_knobs(op);
}

std::vector<std::string> kernel_names(const TunableOp& op) {
  std::vector<std::string> out;
  if (at::hasMKLDNN()) out.emplace_back(PrepackedConvolution::kernel_name(Kernel::kOneDnn));
  out.emplace_back(PrepackedConvolution::kernel_name(op.depthwise() ? Kernel::kNimbleDepthwise
                                                                    : Kernel::kNimbleGemm));
  if (PrepackedConvolution::winograd_applies({op.k, op.c / op.groups, op.r, op.s}, geometry_of(op)))
    out.emplace_back(PrepackedConvolution::kernel_name(Kernel::kNimbleWinograd));
  return out;
}

class Prepacked : public TunedKernel {
 public:
  Prepacked(TunableOp op, Kernel kernel, int64_t threads, nhwc::KernelParameters parameters)
      : op_(std::move(op)), kernel_(kernel), threads_(threads), parameters_(parameters) {}

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
          weight, bias, std::vector<at::Tensor>{weight, bias}, geometry_of(op_), op_.epilogue,
          operands[0], op_.out_strides, std::make_shared<NonFiniteWeights>(), kernel_, threads_,
          parameters_);
    }
    const std::optional<at::Tensor> residual =
        op_.epilogue.residual ? std::optional<at::Tensor>(operands.back()) : std::nullopt;
    return packed_->run(operands[0], residual);
  }

 private:
  TunableOp op_;
  Kernel kernel_;
  int64_t threads_;
  nhwc::KernelParameters parameters_;
  mutable at::Tensor weight_, bias_;
  mutable c10::intrusive_ptr<PrepackedConvolution> packed_;
};

class PrepackedFamily : public PrepackedFamilyBase {
 public:
  PrepackedFamily() : PrepackedFamilyBase("prepacked", TunableOp::Kind::kConv2d) {}
  std::unique_ptr<TunedKernel> build(const TunableOp& op, const KnobValues& k) const override {
    const Kernel kernel = PrepackedConvolution::kernel_of_name(k.label("kernel"));
    return std::make_unique<Prepacked>(op, kernel, k.value("threads"), prepacked_parameters(op, k));
  }

 protected:
  std::vector<std::string> kernel_names(const TunableOp& op) const override {
    return kernels::kernel_names(op);
  }
  bool takes_no_parameters(const std::string& kernel) const override {
    const Kernel k = PrepackedConvolution::kernel_of_name(kernel);
    return k == Kernel::kOneDnn || k == Kernel::kNimbleWinograd;
  }
  std::vector<tuning::Knob> parameter_knobs(const TunableOp& op) const override {
    return kernels::parameter_knobs(op);
  }
  std::optional<std::string> rule_kernel(const TunableOp& op) const override {
    return PrepackedConvolution::kernel_name(PrepackedConvolution::choose(
        {op.k, op.c / op.groups, op.r, op.s}, geometry_of(op), {op.n, op.c, op.h, op.w}));
  }
};

}  // namespace

std::vector<tuning::Knob> gemm_parameter_knobs(const TunableOp& op) {
  // Rows per block below the output's rows (more is all of them, as one block).
  const int64_t rows = op.n * op.out_h() * op.out_w();
  std::vector<std::string> rows_per_block = {"rule"};
  for (const int64_t r : {16, 64, 256})
    if (r < rows) rows_per_block.push_back(std::to_string(r));
  return {tuning::Knob::integer_range("gemm_pieces", 0, 4),
          tuning::Knob::categorical("gemm_rows_per_block", rows_per_block),
          tuning::Knob::integer_range("gemm_column_splits", 0, 2),
          tuning::Knob::categorical("gemm_loop_order", {"rule", "rows", "columns"}),
          tuning::Knob::integer_range("gemm_tile_rows", 0, 6, 2),
          tuning::Knob::categorical("gemm_reduction_block", {"rule", "256"}),
          tuning::Knob::categorical("gemm_tile_vectors", {"rule", "2", "4", "8"})};
}

nhwc::KernelParameters prepacked_parameters(const TunableOp& op, const KnobValues& k) {
  nhwc::KernelParameters p;
  if (op.depthwise()) {
    p.depthwise.channel_vectors = k.value("dw_channel_vectors");
    p.depthwise.pixels = k.value("dw_pixels");
    p.depthwise.windows = k.label("dw_windows") == "rule";
    p.depthwise.pieces = k.value("dw_pieces");
    return p;
  }
  p.gemm.pieces = k.value("gemm_pieces");
  const std::string rows = k.label("gemm_rows_per_block");
  p.gemm.rows_per_block = rows == "rule" ? 0 : std::stoll(rows);
  p.gemm.column_splits = k.value("gemm_column_splits");
  const std::string order = k.label("gemm_loop_order");
  p.gemm.loop_order = order == "rows"      ? nhwc::LoopOrder::kRowsOutside
                      : order == "columns" ? nhwc::LoopOrder::kColumnsOutside
                                           : nhwc::LoopOrder::kRule;
  p.gemm.tile_rows = k.value("gemm_tile_rows");
  const std::string reduction = k.label("gemm_reduction_block");
  p.gemm.reduction_block = reduction == "rule" ? 0 : std::stoll(reduction);
  const std::string vectors = k.label("gemm_tile_vectors");
  p.gemm.tile_vectors = vectors == "rule" ? 0 : std::stoll(vectors);
  return p;
}

std::shared_ptr<const KernelFamily> prepacked_family() {
  return std::make_shared<PrepackedFamily>();
}

}  // namespace nimble::kernels

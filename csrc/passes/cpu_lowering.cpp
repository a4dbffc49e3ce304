#include "csrc/passes/cpu_lowering.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <map>
#include <optional>
#include <unordered_map>

#include "csrc/kernels/cpu/prepacked_convolution.h"
#include "csrc/passes/channel_shuffle_fusion.h"
#include "csrc/passes/channels_last_ops.h"
#include "csrc/passes/cpu_layout_plan.h"
#include "csrc/passes/epilogue_fusion.h"
#include "csrc/passes/fused_convolution.h"
#include "csrc/passes/linear_lowering.h"
#include "csrc/passes/op_patterns.h"
#include "csrc/passes/trace_access.h"

namespace nimble {

namespace {

using kernels::ConvolutionGeometry;

std::vector<int64_t> int_list(const c10::IValue& v) { return v.toIntVector(); }

// The convolution at `index` if the pass can lower it: 2-d, float32 on the CPU, weight and
// bias neither computed by the trace nor inputs.
std::optional<FusedConvolution> lowerable(const std::vector<RecordedOp>& ops, size_t index,
                                          const TraceAccess& access,
                                          const std::vector<FoldedBatchNorm>& folds,
                                          const CpuLoweringCallbacks& callbacks) {
  const RecordedOp& op = ops[index];
  if (!is_plain_convolution(op) || !op.args[0].isTensor() || !op.args[1].isTensor() ||
      op.returns.size() != 1 || !op.returns[0].isTensor())
    return std::nullopt;
  FusedConvolution conv;
  conv.product = index;
  conv.input = op.args[0].toTensor();
  conv.weight = op.args[1].toTensor();
  if (op.args[2].isTensor()) conv.bias = op.args[2].toTensor();
  conv.result = op.returns[0].toTensor();
  const auto fits = [](const at::Tensor& t) {
    return t.device().is_cpu() && t.scalar_type() == at::kFloat && t.layout() == at::kStrided;
  };
  if (conv.input.dim() != 4 || conv.weight.dim() != 4 || !fits(conv.input) || !fits(conv.weight) ||
      (conv.bias.defined() && !fits(conv.bias)) ||
      access.producer.count(conv.weight.unsafeGetTensorImpl()) || callbacks.is_input(conv.weight) ||
      (conv.bias.defined() && callbacks.is_input(conv.bias)) ||
      (conv.bias.defined() && access.producer.count(conv.bias.unsafeGetTensorImpl())))
    return std::nullopt;
  conv.geometry = {int_list(op.args[4]), int_list(op.args[3]), int_list(op.args[5]),
                   op.args[8].toInt()};
  conv.sources = {conv.weight, conv.bias};
  for (const FoldedBatchNorm& fold : folds) {
    if (fold.folded_weight().is_same(conv.weight)) conv.sources = fold.sources();
  }
  return conv;
}

RecordedOp make_fused_convolution_op(const FusedConvolution& conv,
                                     const std::shared_ptr<kernels::NonFiniteWeights>& non_finite,
                                     const CpuLoweringCallbacks& callbacks) {
  using kernels::PrepackedConvolution;
  std::optional<PrepackedConvolution::Kernel> kernel;
  if (callbacks.tuned) {
    const auto found = callbacks.tuned->find(
        PrepackedConvolution::shape_key(conv.input.sizes(), conv.weight.sizes(), conv.geometry));
    if (found != callbacks.tuned->end())
      kernel = PrepackedConvolution::kernel_of_name(found->second);
  }
  auto packed = c10::make_intrusive<PrepackedConvolution>(
      conv.weight, conv.bias, conv.sources, conv.geometry, conv.epilogue, conv.input,
      conv.keep_kernel_layout ? std::vector<int64_t>{} : conv.result.strides().vec(), non_finite,
      kernel);
  RecordedOp op{kernels::convolution_prepacked_op(), {}, {}};
  op.args = {conv.input, conv.other.defined() ? c10::IValue(conv.other) : c10::IValue(),
             c10::IValue(std::move(packed))};
  op.returns = {conv.result};
  return op;
}

// A fused op in the place of the last op it replaces; the others are dropped.
void replace(std::vector<bool>& drop, std::vector<RecordedOp>& ops, const FusedProduct& product,
             RecordedOp fused, const CpuLoweringCallbacks& callbacks) {
  for (const at::Tensor& alias : product.aliases) callbacks.redirect(alias, product.result);
  drop[product.product] = true;
  for (size_t f : product.fused) drop[f] = true;
  drop[product.last()] = false;
  ops[product.last()] = std::move(fused);
}

}  // namespace

int lower_for_cpu_inference(std::vector<RecordedOp>& ops, const std::vector<FoldedBatchNorm>& folds,
                            const CpuLoweringCallbacks& callbacks) {
  const int shuffles = fuse_channel_shuffles(ops, callbacks);
  const TraceAccess access(ops);
  std::vector<FusedConvolution> convs;
  std::vector<FusedLinear> linears;
  std::vector<bool> taken(ops.size(), false);
  for (size_t i = 0; i < ops.size(); ++i) {
    if (taken[i]) continue;
    if (std::optional<FusedConvolution> conv = lowerable(ops, i, access, folds, callbacks)) {
      std::vector<bool> tentative = taken;
      fuse_epilogue(*conv, ops, access, callbacks, tentative, /*through_views=*/false);
      if (inputs_unchanged(*conv, access)) {
        taken = std::move(tentative);
      } else {
        conv = lowerable(ops, i, access, folds, callbacks);  // lowered alone, with nothing fused
      }
      taken[i] = true;
      convs.push_back(std::move(*conv));
    } else if (std::optional<FusedLinear> linear = lower_linear(ops, i, access, callbacks, taken)) {
      linears.push_back(std::move(*linear));
    }
  }
  auto conversions = plan_cpu_layouts(ops, convs, access, callbacks);

  std::vector<bool> drop(ops.size(), false);
  const auto non_finite = std::make_shared<kernels::NonFiniteWeights>();
  for (const FusedConvolution& conv : convs)
    replace(drop, ops, conv, make_fused_convolution_op(conv, non_finite, callbacks), callbacks);
  for (const FusedLinear& linear : linears)
    replace(drop, ops, linear, make_fused_linear_op(linear, non_finite), callbacks);
  std::vector<RecordedOp> kept;
  for (size_t i = 0; i < ops.size(); ++i) {
    if (!drop[i]) kept.push_back(std::move(ops[i]));
    auto after = conversions.find(i);
    if (after == conversions.end()) continue;
    for (RecordedOp& conversion : after->second) kept.push_back(std::move(conversion));
  }
  ops = std::move(kept);
  // Counted too: a trace with nothing else lowered (every weight computed) may still have
  // batch norms on channels_last values, and the caller renumbers only after a rewrite.
  const int channels_last_ops = lower_channels_last_ops(ops, callbacks);
  return static_cast<int>(convs.size() + linears.size()) + channels_last_ops + shuffles;
}

}  // namespace nimble

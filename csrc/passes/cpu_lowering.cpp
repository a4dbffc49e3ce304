#include "csrc/passes/cpu_lowering.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <map>
#include <optional>
#include <unordered_map>

#include "csrc/kernels/cpu/torch_ops/prepacked_convolution.h"
#include "csrc/kernels/cpu/torch_ops/tuned_convolution.h"
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
  std::optional<kernels::TunedConvolution> tuned;
  if (callbacks.tuned) {
    const auto found = callbacks.tuned->find(
        PrepackedConvolution::shape_key(conv.input.sizes(), conv.weight.sizes(), conv.geometry));
    if (found != callbacks.tuned->end()) tuned = kernels::TunedConvolution::parse(found->second);
  }
  auto packed = c10::make_intrusive<PrepackedConvolution>(
      conv.weight, conv.bias, conv.sources, conv.geometry, conv.epilogue, conv.input,
      conv.keep_kernel_layout ? std::vector<int64_t>{} : conv.result.strides().vec(), non_finite,
      tuned ? std::optional(tuned->kernel) : std::nullopt, tuned ? tuned->threads : 0,
      tuned ? tuned->parameters : kernels::nhwc::KernelParameters{});
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

void replace_read(c10::IValue& value,
                  const std::unordered_map<const c10::TensorImpl*, at::Tensor>& replaced) {
  if (value.isTensor()) {
    const auto it = replaced.find(value.toTensor().unsafeGetTensorImpl());
    if (it != replaced.end()) value = it->second;
  } else if (value.isTensorList()) {
    c10::List<at::Tensor> list = value.toTensorList();
    for (size_t k = 0; k < list.size(); ++k) {
      const auto it = replaced.find(list.get(k).unsafeGetTensorImpl());
      if (it != replaced.end()) list.set(k, it->second);
    }
  }
}

// The view `view` returned of `base` where it lies on another storage, as a view of `base`;
// undefined where it cannot be one (another dtype or storage size, `base` not dense).
at::Tensor rebased_view(const at::Tensor& view, const at::Tensor& base,
                        const CpuLoweringCallbacks& callbacks) {
  if (!view.defined() || !view.has_storage() || storage_of(view) == storage_of(base) ||
      view.scalar_type() != base.scalar_type() || !base.is_contiguous() ||
      base.storage_offset() != 0 || view.storage().nbytes() != base.storage().nbytes() ||
      callbacks.is_output(view) || callbacks.is_input(view))
    return {};
  return base.as_strided(view.sizes(), view.strides(), view.storage_offset());
}

// Batch-norm folding hands a view op (mixnet's channel `split`) the convolution's result in
// place of the batch norm's, while the views it recorded still lie on the batch norm's
// storage. The layout plan finds a value's readers by storage and would miss theirs, routing
// the split but not the convolutions reading its pieces (which then read nothing: "Expected
// Tensor but got None"). Such views become views of what the op reads; returns how many.
size_t rebase_views(std::vector<RecordedOp>& ops, const CpuLoweringCallbacks& callbacks) {
  std::unordered_map<const c10::TensorImpl*, at::Tensor> replaced;
  for (RecordedOp& op : ops) {
    for (c10::IValue& arg : op.args) replace_read(arg, replaced);
    for (c10::IValue& ret : op.returns) replace_read(ret, replaced);  // in-place ops' results
    const auto& schema = op.handle.schema();
    if (op.args.empty() || !op.args[0].isTensor() || schema.arguments().empty()) continue;
    const auto& base_alias = schema.arguments()[0].alias_info();
    if (!base_alias || base_alias->isWrite()) continue;
    const at::Tensor base = op.args[0].toTensor();
    for (size_t i = 0; i < op.returns.size() && i < schema.returns().size(); ++i) {
      if (!schema.returns()[i].alias_info()) continue;
      c10::IValue& ret = op.returns[i];
      if (ret.isTensor()) {
        const at::Tensor rebased = rebased_view(ret.toTensor(), base, callbacks);
        if (!rebased.defined()) continue;
        replaced.emplace(ret.toTensor().unsafeGetTensorImpl(), rebased);
        ret = rebased;
      } else if (ret.isTensorList()) {
        c10::List<at::Tensor> list = ret.toTensorList();
        for (size_t k = 0; k < list.size(); ++k) {
          const at::Tensor rebased = rebased_view(list.get(k), base, callbacks);
          if (!rebased.defined()) continue;
          replaced.emplace(list.get(k).unsafeGetTensorImpl(), rebased);
          list.set(k, rebased);
        }
      }
    }
  }
  return replaced.size();
}

}  // namespace

int lower_for_cpu_inference(std::vector<RecordedOp>& ops, const std::vector<FoldedBatchNorm>& folds,
                            const CpuLoweringCallbacks& callbacks) {
  const size_t rebased = rebase_views(ops, callbacks);
  const int shuffles = fuse_channel_shuffles(ops, callbacks);
  const TraceAccess access(ops);
  std::vector<FusedConvolution> convs;
  std::vector<FusedLinear> linears;
  // An op kept as ATen's counts as taken: neither lowered nor fused into another.
  std::vector<bool> taken(ops.size(), false);
  for (size_t i = 0; i < ops.size(); ++i) taken[i] = callbacks.keeps_aten(ops[i]);
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
  return static_cast<int>(convs.size() + linears.size() + rebased) + channels_last_ops + shuffles;
}

}  // namespace nimble

#include "csrc/passes/cpu_lowering.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <map>
#include <optional>
#include <unordered_map>

#include "csrc/kernels/cpu/prepacked_convolution.h"
#include "csrc/passes/cpu_layout_plan.h"
#include "csrc/passes/fused_convolution.h"
#include "csrc/passes/op_patterns.h"
#include "csrc/passes/trace_access.h"

namespace nimble {

namespace {

using kernels::ConvolutionEpilogue;
using kernels::ConvolutionGeometry;

// An activation oneDNN can run as a post-op: its unary attribute, scalars and algorithm.
std::optional<ConvolutionEpilogue> activation_of(const RecordedOp& op) {
  const auto& name = op.handle.operator_name();
  if (!name.overload_name.empty()) return std::nullopt;
  static const std::map<std::string, std::string> kUnary = {
      {"relu", "relu"},       {"silu", "swish"},        {"hardswish", "hardswish"},
      {"sigmoid", "sigmoid"}, {"tanh", "tanh"},         {"hardsigmoid", "hardsigmoid"},
      {"gelu", "gelu"},       {"hardtanh", "hardtanh"}, {"leaky_relu", "leaky_relu"}};
  std::string base = name.name.substr(name.name.rfind(':') + 1);
  if (!base.empty() && base.back() == '_') base.pop_back();
  if (name.name.rfind("aten::", 0) != 0 || !kUnary.count(base)) return std::nullopt;
  ConvolutionEpilogue epilogue;
  epilogue.activation = kUnary.at(base);
  if (base == "hardtanh" && op.args.size() == 3)
    epilogue.scalars = {op.args[1].toScalar(), op.args[2].toScalar()};
  if (base == "leaky_relu" && op.args.size() == 2) epilogue.scalars = {op.args[1].toScalar()};
  if (base == "gelu") epilogue.algorithm = op.args.size() == 2 ? op.args[1].toStringRef() : "none";
  return epilogue;
}

bool is_residual_add(const RecordedOp& op) {
  const auto& name = op.handle.operator_name();
  if ((name.name != "aten::add" && name.name != "aten::add_") || name.overload_name != "Tensor")
    return false;
  const c10::IValue& alpha = op.args[2];
  const bool unit =
      (alpha.isInt() && alpha.toInt() == 1) || (alpha.isDouble() && alpha.toDouble() == 1.0);
  if (!unit || !op.args[0].isTensor() || !op.args[1].isTensor()) return false;
  const at::Tensor& a = op.args[0].toTensor();
  const at::Tensor& b = op.args[1].toTensor();
  return a.sizes() == b.sizes() && a.scalar_type() == b.scalar_type() &&
         storage_of(a) != storage_of(b);
}

std::vector<int64_t> int_list(const c10::IValue& v) { return v.toIntVector(); }

// The convolution at `index` if the pass can lower it: 2-d, float32 on the CPU, weight and
// bias not computed by the trace.
std::optional<FusedConvolution> lowerable(const std::vector<RecordedOp>& ops, size_t index,
                                          const TraceAccess& access,
                                          const std::vector<FoldedBatchNorm>& folds) {
  const RecordedOp& op = ops[index];
  if (!is_plain_convolution(op) || !op.args[0].isTensor() || !op.args[1].isTensor() ||
      op.returns.size() != 1 || !op.returns[0].isTensor())
    return std::nullopt;
  FusedConvolution conv;
  conv.convolution = index;
  conv.input = op.args[0].toTensor();
  conv.weight = op.args[1].toTensor();
  if (op.args[2].isTensor()) conv.bias = op.args[2].toTensor();
  conv.result = op.returns[0].toTensor();
  const auto fits = [](const at::Tensor& t) {
    return t.device().is_cpu() && t.scalar_type() == at::kFloat && t.layout() == at::kStrided;
  };
  if (conv.input.dim() != 4 || conv.weight.dim() != 4 || !fits(conv.input) || !fits(conv.weight) ||
      (conv.bias.defined() && !fits(conv.bias)) ||
      access.producer.count(conv.weight.unsafeGetTensorImpl()) ||
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

// Extends `conv` with the residual add and the activation that follow it, where nothing
// else reads what they replace.
void fuse_epilogue(FusedConvolution& conv, const std::vector<RecordedOp>& ops,
                   const TraceAccess& access, const CpuLoweringCallbacks& callbacks,
                   std::vector<bool>& taken) {
  at::Tensor value = conv.result;
  while (true) {
    const std::optional<size_t> next = access.next_reader(value, conv.last());
    if (!next || taken[*next]) return;
    const RecordedOp& op = ops[*next];
    const bool in_place = writes_first_argument(op);
    const bool add =
        is_residual_add(op) && !conv.epilogue.add_residual && conv.epilogue.activation == "none";
    const std::optional<ConvolutionEpilogue> activation =
        conv.epilogue.activation == "none" ? activation_of(op) : std::nullopt;
    if ((!add && !activation) || op.returns.size() != 1 || !op.returns[0].isTensor()) return;
    // The replaced value must be read by this op alone (or be overwritten by it).
    if (!in_place && (access.read_after(value, *next) || callbacks.is_output(value))) return;
    at::Tensor other;
    if (add) {
      const at::Tensor& a = op.args[0].toTensor();
      const at::Tensor& b = op.args[1].toTensor();
      if (same_values(a, value)) {
        other = b;
      } else if (same_values(b, value) && !in_place) {
        other = a;
      } else {
        return;
      }
      if (other.dim() != 4 || other.scalar_type() != at::kFloat || !other.device().is_cpu()) return;
    } else if (!same_values(op.args[0].toTensor(), value)) {
      return;
    }
    if (add) {
      conv.epilogue.add_residual = true;
      conv.other = other;
    } else {
      conv.epilogue.activation = activation->activation;
      conv.epilogue.scalars = activation->scalars;
      conv.epilogue.algorithm = activation->algorithm;
    }
    conv.fused.push_back(*next);
    taken[*next] = true;
    const at::Tensor& returned = op.returns[0].toTensor();
    if (in_place) {
      if (!returned.is_same(value)) conv.aliases.push_back(returned);
    } else {
      value = returned;
      conv.result = returned;
    }
  }
}

// Whether the values the fused op reads stay as they were between the convolution and the
// place of the fused op (the last op it replaces).
bool inputs_unchanged(const FusedConvolution& conv, const TraceAccess& access) {
  for (const at::Tensor& t : {conv.input, conv.other}) {
    if (t.defined() && access.written_between(t, conv.convolution, conv.last(), conv.fused))
      return false;
  }
  return true;
}

RecordedOp make_fused_op(const FusedConvolution& conv,
                         const std::shared_ptr<kernels::NonFiniteWeights>& non_finite) {
  auto packed = c10::make_intrusive<kernels::PrepackedConvolution>(
      conv.weight, conv.bias, conv.sources, conv.geometry, conv.epilogue, conv.input,
      conv.keep_kernel_layout ? std::vector<int64_t>{} : conv.result.strides().vec(), non_finite);
  RecordedOp op{kernels::convolution_prepacked_op(), {}, {}};
  op.args = {conv.input, conv.other.defined() ? c10::IValue(conv.other) : c10::IValue(),
             c10::IValue(std::move(packed))};
  op.returns = {conv.result};
  return op;
}

}  // namespace

int lower_convolutions_for_cpu(std::vector<RecordedOp>& ops,
                               const std::vector<FoldedBatchNorm>& folds,
                               const CpuLoweringCallbacks& callbacks) {
  const TraceAccess access(ops);
  std::vector<FusedConvolution> convs;
  std::vector<bool> taken(ops.size(), false);
  for (size_t i = 0; i < ops.size(); ++i) {
    if (taken[i]) continue;
    std::optional<FusedConvolution> conv = lowerable(ops, i, access, folds);
    if (!conv) continue;
    std::vector<bool> tentative = taken;
    fuse_epilogue(*conv, ops, access, callbacks, tentative);
    if (inputs_unchanged(*conv, access)) {
      taken = std::move(tentative);
    } else {
      conv = lowerable(ops, i, access, folds);  // lowered alone, with nothing fused
    }
    taken[i] = true;
    convs.push_back(std::move(*conv));
  }
  auto conversions = plan_cpu_layouts(ops, convs, access, callbacks);

  std::vector<bool> drop(ops.size(), false);
  const auto non_finite = std::make_shared<kernels::NonFiniteWeights>();
  for (const FusedConvolution& conv : convs) {
    for (const at::Tensor& alias : conv.aliases) callbacks.redirect(alias, conv.result);
    drop[conv.convolution] = true;
    for (size_t f : conv.fused) drop[f] = true;
    drop[conv.last()] = false;
    ops[conv.last()] = make_fused_op(conv, non_finite);
  }
  std::vector<RecordedOp> kept;
  for (size_t i = 0; i < ops.size(); ++i) {
    if (!drop[i]) kept.push_back(std::move(ops[i]));
    auto after = conversions.find(i);
    if (after == conversions.end()) continue;
    for (RecordedOp& conversion : after->second) kept.push_back(std::move(conversion));
  }
  ops = std::move(kept);
  return static_cast<int>(convs.size());
}

}  // namespace nimble

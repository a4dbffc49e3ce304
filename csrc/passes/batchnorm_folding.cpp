#include "csrc/passes/batchnorm_folding.h"

#include <ATen/ATen.h>

#include <unordered_map>

namespace nimble {

namespace {

const at::Tensor& tensor_or_undefined(const c10::IValue& value) {
  static const at::Tensor kUndefined;
  return value.isTensor() ? value.toTensor() : kUndefined;
}

bool is_eval_batchnorm(const RecordedOp& op) {
  const auto& name = op.handle.operator_name();
  if (name.name == "aten::_native_batch_norm_legit_no_training") return true;
  // native_batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps)
  return name.name == "aten::native_batch_norm" && op.args.size() == 8 && op.args[5].isBool() &&
         !op.args[5].toBool() && op.args[3].isTensor() && op.args[4].isTensor();
}

bool is_plain_convolution(const RecordedOp& op) {
  // convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups)
  return op.handle.operator_name().name == "aten::convolution" &&
         op.handle.operator_name().overload_name.empty() && op.args.size() == 9 &&
         op.args[6].isBool() && !op.args[6].toBool();
}

}  // namespace

std::vector<FoldedBatchNorm> fold_batchnorm(
    std::vector<RecordedOp>& ops,
    const std::function<void(const at::Tensor&, const at::Tensor&)>& redirect) {
  // How many times each storage is read: a fold needs the conv output read by the BN only.
  std::unordered_map<const void*, int> reads;
  auto count = [&](const at::Tensor& t) {
    if (t.defined() && t.has_storage()) ++reads[t.storage().unsafeGetStorageImpl()];
  };
  for (const RecordedOp& op : ops) {
    for (const c10::IValue& arg : op.args) {
      if (arg.isTensor()) count(arg.toTensor());
      if (arg.isList()) {
        for (const c10::IValue& item : arg.toListRef()) {
          if (item.isTensor()) count(item.toTensor());
        }
      }
    }
  }
  std::unordered_map<const c10::TensorImpl*, size_t> producer;
  for (size_t i = 0; i < ops.size(); ++i) {
    for (const c10::IValue& ret : ops[i].returns) {
      if (ret.isTensor()) producer[ret.toTensor().unsafeGetTensorImpl()] = i;
    }
  }

  std::vector<FoldedBatchNorm> folds;
  std::vector<bool> drop(ops.size(), false);
  for (size_t i = 0; i < ops.size(); ++i) {
    RecordedOp& bn = ops[i];
    if (!is_eval_batchnorm(bn) || !bn.args[0].isTensor()) continue;
    const at::Tensor& y = bn.args[0].toTensor();
    auto it = producer.find(y.unsafeGetTensorImpl());
    if (it == producer.end() || drop[it->second]) continue;
    RecordedOp& conv = ops[it->second];
    if (!is_plain_convolution(conv) || reads[y.storage().unsafeGetStorageImpl()] != 1) continue;
    // The BN's statistics outputs (if any) must be unused: only its first output is kept.
    bool stats_used = false;
    for (size_t r = 1; r < bn.returns.size(); ++r) {
      const at::Tensor& t = tensor_or_undefined(bn.returns[r]);
      if (t.defined() && t.numel() > 0 && reads[t.storage().unsafeGetStorageImpl()] > 0)
        stats_used = true;
    }
    const at::Tensor& weight = conv.args[1].toTensor();
    if (stats_used || weight.dim() < 3 || !weight.is_floating_point()) continue;
    // A weight the trace computes (pruning's weight_orig * mask, a parametrization) is new on
    // every call: a fold made before the replay runs would read last call's value.
    const auto computed = [&](const c10::IValue& v) {
      return v.isTensor() && producer.count(v.toTensor().unsafeGetTensorImpl()) > 0;
    };
    if (computed(conv.args[1]) || computed(conv.args[2]) || computed(bn.args[1]) ||
        computed(bn.args[2]) || computed(bn.args[3]) || computed(bn.args[4])) {
      continue;
    }
    const bool legit =
        bn.handle.operator_name().name == "aten::_native_batch_norm_legit_no_training";
    const double eps = legit ? bn.args[6].toDouble() : bn.args[7].toDouble();
    folds.emplace_back(weight, tensor_or_undefined(conv.args[2]), tensor_or_undefined(bn.args[1]),
                       tensor_or_undefined(bn.args[2]), bn.args[3].toTensor(),
                       bn.args[4].toTensor(), eps);
    conv.args[1] = folds.back().folded_weight();
    conv.args[2] = folds.back().folded_bias();
    redirect(bn.returns[0].toTensor(), y);
    drop[i] = true;
  }
  std::vector<RecordedOp> kept;
  for (size_t i = 0; i < ops.size(); ++i) {
    if (!drop[i]) kept.push_back(std::move(ops[i]));
  }
  ops = std::move(kept);
  return folds;
}

}  // namespace nimble

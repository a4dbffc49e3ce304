#include "csrc/passes/batchnorm_folding.h"

#include <ATen/ATen.h>

#include <unordered_map>

#include "csrc/passes/op_patterns.h"

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

// Later ops read (and in-place ops return) the convolution's output where they recorded
// the batch norm's, so that the ops stay a consistent trace for the passes after this one.
void replace_tensors(std::vector<RecordedOp>& ops,
                     const std::unordered_map<const c10::TensorImpl*, at::Tensor>& replaced) {
  if (replaced.empty()) return;
  auto replace = [&](c10::IValue& value) {
    if (!value.isTensor()) return;
    auto it = replaced.find(value.toTensor().unsafeGetTensorImpl());
    if (it != replaced.end()) value = it->second;
  };
  for (RecordedOp& op : ops) {
    for (c10::IValue& arg : op.args) {
      replace(arg);
      if (arg.isTensorList()) {
        c10::List<at::Tensor> list = arg.toTensorList();
        for (size_t k = 0; k < list.size(); ++k) {
          auto it = replaced.find(list.get(k).unsafeGetTensorImpl());
          if (it != replaced.end()) list.set(k, it->second);
        }
      }
    }
    for (c10::IValue& ret : op.returns) replace(ret);
  }
}

}  // namespace

std::vector<FoldedBatchNorm> fold_batchnorm(
    std::vector<RecordedOp>& ops,
    const std::function<void(const at::Tensor&, const at::Tensor&)>& redirect,
    const std::function<bool(const at::Tensor&)>& is_output,
    const std::function<bool(const RecordedOp&)>& keeps) {
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
  std::unordered_map<const c10::TensorImpl*, at::Tensor> replaced;  // batch norm output: conv's
  for (size_t i = 0; i < ops.size(); ++i) {
    RecordedOp& bn = ops[i];
    if (!is_eval_batchnorm(bn) || !bn.args[0].isTensor() || keeps(bn)) continue;
    const at::Tensor& y = bn.args[0].toTensor();
    auto it = producer.find(y.unsafeGetTensorImpl());
    if (it == producer.end() || drop[it->second]) continue;
    RecordedOp& conv = ops[it->second];
    // The user reads a program output too: folding would hand them the batch norm's values.
    if (!is_plain_convolution(conv) || reads[y.storage().unsafeGetStorageImpl()] != 1 ||
        is_output(y) || keeps(conv)) {
      continue;
    }
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
    replaced[bn.returns[0].toTensor().unsafeGetTensorImpl()] = y;
    drop[i] = true;
  }
  replace_tensors(ops, replaced);
  std::vector<RecordedOp> kept;
  for (size_t i = 0; i < ops.size(); ++i) {
    if (!drop[i]) kept.push_back(std::move(ops[i]));
  }
  ops = std::move(kept);
  return folds;
}

}  // namespace nimble

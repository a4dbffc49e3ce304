#include "program/batchnorm_folding.h"

#include <ATen/ATen.h>
#include <ATen/core/LegacyTypeDispatch.h>

#include <unordered_map>

namespace nimble {

namespace {

const at::Tensor& tensor_or_undefined(const c10::IValue& value) {
  static const at::Tensor kUndefined;
  return value.isTensor() ? value.toTensor() : kUndefined;
}

bool is_eval_batchnorm(const TracedOp& op) {
  const auto& name = op.handle.operator_name();
  if (name.name == "aten::_native_batch_norm_legit_no_training") return true;
  // native_batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps)
  return name.name == "aten::native_batch_norm" && op.args.size() == 8 && op.args[5].isBool() &&
         !op.args[5].toBool() && op.args[3].isTensor() && op.args[4].isTensor();
}

bool is_plain_convolution(const TracedOp& op) {
  // convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups)
  return op.handle.operator_name().name == "aten::convolution" &&
         op.handle.operator_name().overload_name.empty() && op.args.size() == 9 &&
         op.args[6].isBool() && !op.args[6].toBool();
}

}  // namespace

FoldedBatchNorm::FoldedBatchNorm(at::Tensor weight, at::Tensor bias, at::Tensor gamma,
                                 at::Tensor beta, at::Tensor mean, at::Tensor var, double eps)
    : weight_(std::move(weight)),
      bias_(std::move(bias)),
      gamma_(std::move(gamma)),
      beta_(std::move(beta)),
      mean_(std::move(mean)),
      var_(std::move(var)),
      eps_(eps) {
  folded_weight_ = at::empty_like(weight_);
  folded_bias_ = at::empty({weight_.size(0)}, weight_.options());
  compute();
}

std::vector<at::Tensor> FoldedBatchNorm::sources() const {
  return {weight_, bias_, gamma_, beta_, mean_, var_};
}

void FoldedBatchNorm::compute() {
  at::NoGradGuard no_grad;
  at::Tensor scale = at::rsqrt(var_ + eps_);
  if (gamma_.defined()) scale = scale * gamma_;
  std::vector<int64_t> shape(weight_.dim(), 1);
  shape[0] = -1;
  folded_weight_.copy_(weight_ * scale.reshape(shape));
  at::Tensor shifted = bias_.defined() ? bias_ - mean_ : -mean_;
  at::Tensor bias = shifted * scale;
  if (beta_.defined()) bias = bias + beta_;
  folded_bias_.copy_(bias);
  versions_.clear();
  for (const at::Tensor& t : sources()) versions_.push_back(t.defined() ? t._version() : -1);
}

void FoldedBatchNorm::refresh_if_stale() {
  const std::vector<at::Tensor> now = sources();
  for (size_t i = 0; i < now.size(); ++i) {
    if (now[i].defined() && now[i]._version() != versions_[i]) {
      // The replay runs below autograd; the refresh is ordinary tensor math.
      at::AutoDispatchBelowADInplaceOrView below;
      compute();
      return;
    }
  }
}

std::vector<FoldedBatchNorm> fold_batchnorm(
    std::vector<TracedOp>& ops,
    const std::function<void(const at::Tensor&, const at::Tensor&)>& redirect) {
  // How many times each storage is read: a fold needs the conv output read by the BN only.
  std::unordered_map<const void*, int> reads;
  auto count = [&](const at::Tensor& t) {
    if (t.defined() && t.has_storage()) ++reads[t.storage().unsafeGetStorageImpl()];
  };
  for (const TracedOp& op : ops) {
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
    TracedOp& bn = ops[i];
    if (!is_eval_batchnorm(bn) || !bn.args[0].isTensor()) continue;
    const at::Tensor& y = bn.args[0].toTensor();
    auto it = producer.find(y.unsafeGetTensorImpl());
    if (it == producer.end() || drop[it->second]) continue;
    TracedOp& conv = ops[it->second];
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
  std::vector<TracedOp> kept;
  for (size_t i = 0; i < ops.size(); ++i) {
    if (!drop[i]) kept.push_back(std::move(ops[i]));
  }
  ops = std::move(kept);
  return folds;
}

}  // namespace nimble

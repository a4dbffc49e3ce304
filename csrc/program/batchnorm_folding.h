#pragma once
// Inference pass: a convolution whose only reader is an eval-mode batch norm becomes one
// convolution with folded weights, W' = W * g / sqrt(v + eps), b' = (b - m) * g /
// sqrt(v + eps) + beta. The folded tensors are derived state: a replay refreshes them
// whenever a source parameter or buffer changed since (its version counter moved), so
// fine-tuning or load_state_dict between calls is never replayed stale.
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <functional>
#include <vector>

namespace nimble {

struct TracedOp {
  c10::OperatorHandle handle;
  std::vector<c10::IValue> args;
  std::vector<c10::IValue> returns;
};

class FoldedBatchNorm {
 public:
  FoldedBatchNorm(at::Tensor weight, at::Tensor bias, at::Tensor gamma, at::Tensor beta,
                  at::Tensor mean, at::Tensor var, double eps);
  const at::Tensor& folded_weight() const { return folded_weight_; }
  const at::Tensor& folded_bias() const { return folded_bias_; }
  // Recomputes the folded tensors in place if any source changed since the last time.
  void refresh_if_stale();

 private:
  void compute();
  std::vector<at::Tensor> sources() const;

  at::Tensor weight_, bias_, gamma_, beta_, mean_, var_;  // bias/gamma/beta may be undefined
  double eps_;
  at::Tensor folded_weight_, folded_bias_;
  std::vector<int64_t> versions_;
};

// Rewrites `ops` in place and returns the folds. `redirect(bn_output, conv_output)` tells
// the caller that readers of the batch norm's output now read the convolution's.
std::vector<FoldedBatchNorm> fold_batchnorm(
    std::vector<TracedOp>& ops,
    const std::function<void(const at::Tensor&, const at::Tensor&)>& redirect);

}  // namespace nimble

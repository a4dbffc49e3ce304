#pragma once
// Convolution weights with an eval-mode batch norm folded in (passes/batchnorm_folding.h
// makes them): W' = W * g / sqrt(v + eps), b' = (b - m) * g / sqrt(v + eps) + beta. They are
// derived state of the program: a replay refreshes them whenever a source parameter or
// buffer changed since (its version counter moved, or its storage was swapped), so fine-tuning or
// load_state_dict between calls is never replayed stale.
#include <ATen/core/Tensor.h>

#include <vector>

#include "csrc/program/source_version.h"

namespace nimble {

class FoldedBatchNorm {
 public:
  FoldedBatchNorm(at::Tensor weight, at::Tensor bias, at::Tensor gamma, at::Tensor beta,
                  at::Tensor mean, at::Tensor var, double eps);
  const at::Tensor& folded_weight() const { return folded_weight_; }
  const at::Tensor& folded_bias() const { return folded_bias_; }
  // Recomputes the folded tensors in place if any source changed since the last time.
  void refresh_if_stale();
  // What the folded tensors are computed from: weight, bias, gamma, beta, mean, var.
  std::vector<at::Tensor> sources() const;

 private:
  void compute();

  at::Tensor weight_, bias_, gamma_, beta_, mean_, var_;  // bias/gamma/beta may be undefined
  double eps_;
  at::Tensor folded_weight_, folded_bias_;
  std::vector<SourceVersion> versions_;
};

}  // namespace nimble

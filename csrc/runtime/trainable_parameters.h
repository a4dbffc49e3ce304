#pragma once
// The host work of a training replay's call that grows with the model's parameters, in C++:
// a Python loop over them cost more than the rest of the call's host work together
// (mobilenet_v2's 158 parameters: ~10 us for the requires_grad check and ~20 us for the
// gradients' hand-over per step on a loaded Sapphire Rapids VM; a step waits for it before
// its graph launches).
#include <ATen/core/Tensor.h>

#include <utility>
#include <vector>

namespace nimble {

// Which parameters a training replay computes gradients for, as at prepare: freezing or
// unfreezing one changes no module dictionary, so the model watch cannot see it.
class TrainableParameters {
 public:
  explicit TrainableParameters(std::vector<at::Tensor> params);
  // Whether every parameter's requires_grad is as it was at construction.
  bool unchanged() const;

 private:
  std::vector<at::Tensor> params_;
  std::vector<bool> requires_grad_;
};

// The parameters a whole training step computes gradients for, in the order of its outputs
// after the loss.
class GradientTargets {
 public:
  explicit GradientTargets(std::vector<at::Tensor> params) : params_(std::move(params)) {}
  // `outputs[first + i]` becomes parameter i's `.grad` unless it already is (a graph hands
  // out the same gradient buffers every step), as `p.grad = g` sets it. Throws
  // std::invalid_argument unless there is one output per parameter from `first` on.
  void hand_over(const std::vector<at::Tensor>& outputs, size_t first) const;
  size_t size() const { return params_.size(); }

 private:
  std::vector<at::Tensor> params_;
};

}  // namespace nimble

#include "csrc/runtime/trainable_parameters.h"

#include <stdexcept>
#include <string>
#include <utility>

namespace nimble {

TrainableParameters::TrainableParameters(std::vector<at::Tensor> params)
    : params_(std::move(params)) {
  requires_grad_.reserve(params_.size());
  for (const at::Tensor& p : params_) requires_grad_.push_back(p.requires_grad());
}

bool TrainableParameters::unchanged() const {
  for (size_t i = 0; i < params_.size(); ++i) {
    if (params_[i].requires_grad() != requires_grad_[i]) return false;
  }
  return true;
}

void GradientTargets::hand_over(const std::vector<at::Tensor>& outputs, size_t first) const {
  if (outputs.size() != first + params_.size()) {
    throw std::invalid_argument("the step returned " + std::to_string(outputs.size()) +
                                " outputs for " + std::to_string(params_.size()) +
                                " gradients after " + std::to_string(first));
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    at::Tensor& grad = params_[i].mutable_grad();
    if (!grad.is_same(outputs[first + i])) grad = outputs[first + i];
  }
}

}  // namespace nimble

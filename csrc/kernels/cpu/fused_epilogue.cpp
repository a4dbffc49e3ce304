#include "csrc/kernels/cpu/fused_epilogue.h"

#include <ATen/ATen.h>

namespace nimble::kernels {

std::string FusedEpilogue::describe() const {
  std::string out = add_residual ? "add" : "";
  if (activation != "none") out += (out.empty() ? "" : "+") + activation;
  return out.empty() ? "none" : out;
}

void FusedEpilogue::activate_in_place(at::Tensor& y) const {
  if (activation == "relu") {
    y.relu_();
  } else if (activation == "hardtanh") {
    at::hardtanh_(y, *scalars.at(0), *scalars.at(1));
  } else if (activation == "swish") {
    at::silu_(y);
  } else if (activation == "hardswish") {
    at::hardswish_(y);
  } else if (activation == "gelu") {
    at::gelu_(y, algorithm.value_or("none"));
  } else if (activation == "sigmoid") {
    y.sigmoid_();
  } else if (activation == "tanh") {
    y.tanh_();
  } else if (activation == "leaky_relu") {
    at::leaky_relu_(y, *scalars.at(0));
  } else if (activation == "hardsigmoid") {
    at::hardsigmoid_(y);
  } else {
    TORCH_CHECK(activation == "none", "nimble: unknown fused activation ", activation);
  }
}

c10::List<std::optional<at::Scalar>> FusedEpilogue::scalar_list() const {
  c10::List<std::optional<at::Scalar>> list;
  for (const auto& s : scalars) list.push_back(s);
  return list;
}

FiniteWeights::FiniteWeights(std::shared_ptr<NonFiniteWeights> program)
    : program_(std::move(program)) {}

FiniteWeights::~FiniteWeights() {
  if (!finite_) --program_->count_;
}

void FiniteWeights::update(const at::Tensor& weight, const at::Tensor& bias) {
  const bool finite = weight.isfinite().all().item<bool>() &&
                      (!bias.defined() || bias.isfinite().all().item<bool>());
  if (finite != finite_) program_->count_ += finite ? -1 : 1;
  finite_ = finite;
}

}  // namespace nimble::kernels

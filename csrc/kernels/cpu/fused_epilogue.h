#pragma once
// What runs after a lowered convolution or matrix product (prepacked_convolution.h,
// prepacked_linear.h), in oneDNN's post-op terms: a residual add, then one activation.
#include <ATen/core/Tensor.h>

#include <optional>
#include <string>
#include <vector>

namespace nimble::kernels {

struct FusedEpilogue {
  bool add_residual = false;        // y = product + other, before the activation
  std::string activation = "none";  // oneDNN's unary attribute: relu, hardtanh, swish, ...
  std::vector<std::optional<at::Scalar>> scalars;  // the activation's (hardtanh's bounds)
  std::optional<std::string> algorithm;            // gelu: "none" or "tanh"
  std::string describe() const;
  // The activation as ATen's in-place op on `y`.
  void activate_in_place(at::Tensor& y) const;
  // The activation's scalars as oneDNN's ops take them.
  c10::List<std::optional<at::Scalar>> scalar_list() const;
};

}  // namespace nimble::kernels

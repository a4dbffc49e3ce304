#pragma once
// What runs after a lowered convolution or matrix product (prepacked_convolution.h,
// prepacked_linear.h), in oneDNN's post-op terms: a residual add, then one activation.
#include <ATen/core/Tensor.h>

#include <atomic>
#include <memory>
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

// How many of one program's prepacked products (convolutions and linear layers) hold a NaN or
// an infinity in their weight or bias (a folded batch norm of a negative variance, say).
// oneDNN's activations turn NaN into a number (relu gives 0) where eager keeps it; while any
// product of the program is non-finite, a NaN may flow from it into another one's input or
// residual, so none fuses its activation (ATen's runs after the call instead). A NaN in the
// program's inputs is not covered (docs/cpu.md).
class NonFiniteWeights {
 public:
  bool any() const { return count_.load() > 0; }

 private:
  friend class FiniteWeights;
  std::atomic<int> count_{0};
};

// One product's share of its program's NonFiniteWeights: whether its weight and bias, as last
// packed, are finite.
class FiniteWeights {
 public:
  explicit FiniteWeights(std::shared_ptr<NonFiniteWeights> program);
  ~FiniteWeights();
  FiniteWeights(const FiniteWeights&) = delete;
  FiniteWeights& operator=(const FiniteWeights&) = delete;
  // Reads the weight and bias (undefined: none) again, after a pack.
  void update(const at::Tensor& weight, const at::Tensor& bias);
  // Whether a oneDNN activation keeps eager's results: no product of the program non-finite.
  bool may_fuse_activation() const { return !program_->any(); }
  const std::shared_ptr<NonFiniteWeights>& program() const { return program_; }

 private:
  std::shared_ptr<NonFiniteWeights> program_;
  bool finite_ = true;
};

}  // namespace nimble::kernels

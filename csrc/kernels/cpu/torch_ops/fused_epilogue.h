#pragma once
// What runs after a lowered convolution or matrix product (prepacked_convolution.h,
// prepacked_linear.h): the epilogue (program/epilogue.h) in oneDNN's post-op terms, and
// whether its activation may be fused at all.
#include <ATen/core/Tensor.h>

#include <atomic>
#include <memory>
#include <optional>
#include <string>

#include "csrc/program/epilogue.h"

namespace nimble::kernels {

// The activation's arguments as oneDNN's pointwise ops take them: its scalars (hardtanh's
// bounds, leaky_relu's slope) and gelu's approximation ("none" or "tanh"; nullopt for the
// others). Its name is activation_name's.
c10::List<std::optional<at::Scalar>> onednn_scalars(const Epilogue& epilogue);
std::optional<std::string> onednn_algorithm(const Epilogue& epilogue);

// The epilogue whose activation an op's string argument names (activation_name's names),
// without a residual, its scalars torch's defaults for relu6 and leaky_relu (a caller with
// scalars of its own sets lo and hi); an error naming `op` and the names there are otherwise.
// Where a string from an op schema or from Python becomes an Activation.
Epilogue epilogue_of_name(const char* op, const std::string& activation);

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

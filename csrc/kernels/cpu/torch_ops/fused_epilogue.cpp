#include "csrc/kernels/cpu/torch_ops/fused_epilogue.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>

namespace nimble::kernels {

namespace {

// One read of the data: a float is finite iff its bits without the sign are below the
// exponent's all-ones pattern. `isfinite().all()` made four passes and two temporaries
// (vit_b_16: 112 ms of a 0.3 s build, every prepare).
bool all_finite(const at::Tensor& t) {
  if (t.scalar_type() != at::kFloat || !t.is_contiguous() || !t.device().is_cpu())
    return t.isfinite().all().item<bool>();
  const float* data = t.const_data_ptr<float>();
  std::atomic<bool> finite{true};
  at::parallel_for(0, t.numel(), int64_t{1} << 16, [&](int64_t begin, int64_t end) {
    uint32_t largest = 0;
    for (int64_t i = begin; i < end; ++i) {
      uint32_t bits;
      std::memcpy(&bits, data + i, sizeof bits);
      largest = std::max(largest, bits & 0x7fffffffu);
    }
    if (largest >= 0x7f800000u) finite.store(false, std::memory_order_relaxed);
  });
  return finite.load();
}

}  // namespace

c10::List<std::optional<at::Scalar>> onednn_scalars(const Epilogue& epilogue) {
  c10::List<std::optional<at::Scalar>> list;
  if (epilogue.activation == Activation::kClamp) {
    list.push_back(at::Scalar(epilogue.lo));
    list.push_back(at::Scalar(epilogue.hi));
  } else if (epilogue.activation == Activation::kLeakyRelu) {
    list.push_back(at::Scalar(epilogue.lo));
  }
  return list;
}

std::optional<std::string> onednn_algorithm(const Epilogue& epilogue) {
  if (epilogue.activation == Activation::kGeluErf) return "none";
  if (epilogue.activation == Activation::kGeluTanh) return "tanh";
  return std::nullopt;
}

Epilogue epilogue_of_name(const char* op, const std::string& activation) {
  const std::optional<Activation> known = activation_of_name(activation);
  if (!known) {
    std::string names;
    for (int a = 0; a <= static_cast<int>(Activation::kGeluTanh); ++a) {
      const std::string name = activation_name(static_cast<Activation>(a));
      if (names.find("'" + name + "'") == std::string::npos) names += " '" + name + "'";
    }
    TORCH_CHECK(false, op, ": unknown activation '", activation, "', expected one of", names);
  }
  Epilogue epilogue;
  epilogue.activation = *known;
  if (epilogue.activation == Activation::kClamp) epilogue.hi = 6.0;
  if (epilogue.activation == Activation::kLeakyRelu) epilogue.lo = 0.01;
  return epilogue;
}

FiniteWeights::FiniteWeights(std::shared_ptr<NonFiniteWeights> program)
    : program_(std::move(program)) {}

FiniteWeights::~FiniteWeights() {
  if (!finite_) --program_->count_;
}

void FiniteWeights::update(const at::Tensor& weight, const at::Tensor& bias) {
  const bool finite = all_finite(weight) && (!bias.defined() || all_finite(bias));
  if (finite != finite_) program_->count_ += finite ? -1 : 1;
  finite_ = finite;
}

}  // namespace nimble::kernels

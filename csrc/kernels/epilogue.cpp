#include "csrc/kernels/epilogue.h"

#include <array>
#include <utility>

namespace nimble::kernels {

namespace {

constexpr std::array<std::pair<Activation, const char*>, 11> kNames = {{
    {Activation::kNone, "none"},
    {Activation::kRelu, "relu"},
    {Activation::kClamp, "hardtanh"},
    {Activation::kLeakyRelu, "leaky_relu"},
    {Activation::kHardswish, "hardswish"},
    {Activation::kHardsigmoid, "hardsigmoid"},
    {Activation::kSilu, "swish"},
    {Activation::kSigmoid, "sigmoid"},
    {Activation::kTanh, "tanh"},
    {Activation::kGeluErf, "gelu"},  // first: the activation "gelu" names
    {Activation::kGeluTanh, "gelu"},
}};

}  // namespace

const char* activation_name(Activation activation) {
  for (const auto& [a, name] : kNames) {
    if (a == activation) return name;
  }
  return "none";
}

std::optional<Activation> activation_of_name(std::string_view name) {
  for (const auto& [a, known] : kNames) {
    if (name == known) return a;
  }
  return std::nullopt;
}

std::string describe(const Epilogue& epilogue) {
  std::string out = epilogue.residual ? "add" : "";
  if (epilogue.activation != Activation::kNone)
    out += (out.empty() ? "" : "+") + std::string(activation_name(epilogue.activation));
  return out.empty() ? "none" : out;
}

}  // namespace nimble::kernels

#include "csrc/program/epilogue.h"

#include <array>

namespace nimble {

namespace {

// Each activation's two names: at a string boundary (activation_name) and ATen's op.
struct Names {
  Activation activation;
  const char* name;
  const char* aten;  // without the in-place form's `_`; empty: no op of its own
};

constexpr std::array<Names, 11> kNames = {{
    {Activation::kNone, "none", ""},
    {Activation::kRelu, "relu", "relu"},
    {Activation::kClamp, "hardtanh", "hardtanh"},
    {Activation::kLeakyRelu, "leaky_relu", "leaky_relu"},
    {Activation::kHardswish, "hardswish", "hardswish"},
    {Activation::kHardsigmoid, "hardsigmoid", "hardsigmoid"},
    {Activation::kSilu, "swish", "silu"},
    {Activation::kSigmoid, "sigmoid", "sigmoid"},
    {Activation::kTanh, "tanh", "tanh"},
    {Activation::kGeluErf, "gelu", "gelu"},  // first: the activation "gelu" names
    {Activation::kGeluTanh, "gelu", "gelu"},
}};

}  // namespace

const char* activation_name(Activation activation) {
  for (const Names& names : kNames) {
    if (names.activation == activation) return names.name;
  }
  return "none";
}

std::optional<Activation> activation_of_name(std::string_view name) {
  for (const Names& names : kNames) {
    if (name == names.name) return names.activation;
  }
  return std::nullopt;
}

std::optional<Activation> activation_of_aten_name(std::string_view name) {
  if (name.empty()) return std::nullopt;
  for (const Names& names : kNames) {
    if (name == names.aten) return names.activation;
  }
  return std::nullopt;
}

std::string describe(const Epilogue& epilogue) {
  std::string out = epilogue.residual ? "add" : "";
  if (epilogue.activation != Activation::kNone)
    out += (out.empty() ? "" : "+") + std::string(activation_name(epilogue.activation));
  return out.empty() ? "none" : out;
}

}  // namespace nimble

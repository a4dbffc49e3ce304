#pragma once
// What a program does to a convolution's or matrix product's result right after it, that a
// kernel does before (or as) it stores the result: add a residual of the result's shape, then
// one activation. Part of the IR: the passes find it (passes/epilogue_fusion.h for the CPU
// lowering, passes/slot_epilogues.h for the tuned-kernel slot, recorded on the Program), and
// every kernel takes it as it is: nimble's channels-last kernels (cpu/channels_last/epilogue.h),
// the lowering's oneDNN calls (cpu/torch_ops/fused_epilogue.h), the NCHW tuning families and
// the CUDA families. Torch-free.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace nimble {

enum class Activation : int8_t {
  kNone,
  kRelu,
  kClamp,      // hardtanh / relu6: min(max(x, lo), hi)
  kLeakyRelu,  // x >= 0 ? x : lo * x
  kHardswish,
  kHardsigmoid,
  kSilu,
  kSigmoid,
  kTanh,
  kGeluErf,
  kGeluTanh,
};

struct Epilogue {
  Activation activation = Activation::kNone;
  // kClamp's bounds; kLeakyRelu's slope is lo. Doubles, as the recorded op holds them: every
  // kernel rounds them to its own type, as ATen does.
  double lo = 0.0, hi = 0.0;
  bool residual = false;  // y = result + residual, before the activation

  bool empty() const { return !residual && activation == Activation::kNone; }
  // One result with its residual (ignored without one), for kernels that apply it element by
  // element; kRelu and kClamp, the activations a tunable op's epilogue holds (tunable_op.h).
  float apply(float value, float residual_value) const {
    if (residual) value += residual_value;
    if (activation == Activation::kRelu) return value > 0 ? value : 0;
    if (activation == Activation::kClamp) {
      const float low = static_cast<float>(lo), high = static_cast<float>(hi);
      return value < low ? low : value > high ? high : value;
    }
    return value;
  }
};

// The activation's name where one crosses a boundary as a string: an op schema's argument
// (`nimble::batch_norm_nhwc`), a Python caller's (`PrepackedConvolution.make`), oneDNN's
// post-op attribute, which these are: "none", "relu", "hardtanh", "leaky_relu", "hardswish",
// "hardsigmoid", "swish", "sigmoid", "tanh", "gelu" (both approximations: oneDNN takes the
// approximation as an argument of its own).
const char* activation_name(Activation activation);
// The activation of that name (gelu: the exact one); nullopt for a name that is none of these.
std::optional<Activation> activation_of_name(std::string_view name);
// The activation ATen's op of that name computes, the in-place form's `_` dropped ("relu",
// "silu", "hardtanh", ...; "gelu": the exact one, ATen takes the approximation as an argument);
// nullopt for any other op. Where a recorded op becomes an Activation.
std::optional<Activation> activation_of_aten_name(std::string_view name);
// "none", "add", "relu", "add+hardtanh", ...
std::string describe(const Epilogue& epilogue);

}  // namespace nimble

#include "csrc/kernels/aten_epilogue.h"

#include <ATen/ATen.h>

namespace nimble::kernels {

void activate_in_place(const Epilogue& epilogue, at::Tensor& y) {
  switch (epilogue.activation) {
    case Activation::kNone:
      return;
    case Activation::kRelu:
      y.relu_();
      return;
    case Activation::kClamp:
      at::hardtanh_(y, epilogue.lo, epilogue.hi);
      return;
    case Activation::kLeakyRelu:
      at::leaky_relu_(y, epilogue.lo);
      return;
    case Activation::kHardswish:
      at::hardswish_(y);
      return;
    case Activation::kHardsigmoid:
      at::hardsigmoid_(y);
      return;
    case Activation::kSilu:
      at::silu_(y);
      return;
    case Activation::kSigmoid:
      y.sigmoid_();
      return;
    case Activation::kTanh:
      y.tanh_();
      return;
    case Activation::kGeluErf:
      at::gelu_(y, "none");
      return;
    case Activation::kGeluTanh:
      at::gelu_(y, "tanh");
      return;
  }
}

void apply_in_place(const Epilogue& epilogue, at::Tensor& y, const at::Tensor* residual) {
  if (epilogue.residual) y.add_(*residual);
  activate_in_place(epilogue, y);
}

}  // namespace nimble::kernels

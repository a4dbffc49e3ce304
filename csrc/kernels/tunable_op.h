#pragma once
// An op of a program that a kernel family can replace, described by what decides its kernel:
// the op, its shapes, layouts, dtype, device and attributes. Ops with equal signatures are one
// tuning task; the signature keys the tuning database across runs and machines.
#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>

#include <array>
#include <optional>
#include <string>
#include <vector>

#include "csrc/program/epilogue.h"
#include "csrc/program/program.h"

namespace nimble::kernels {

// A 2-D convolution (aten::convolution, not transposed): input [n, c, h, w], weight
// [k, c / groups, r, s], optional bias [k], and its epilogue. A linear layer (aten::addmm of
// a bias [k], an input [n, c] and a transposed weight [k, c]) is the 1x1 convolution of the
// input seen as [n, c, 1, 1]: kernel families see that convolution (every field below holds
// its 4-D form), while the reference, the signature and the op's stack keep the 2-D form.
struct TunableOp {
  enum class Kind { kConv2d, kLinear };
  Kind kind = Kind::kConv2d;
  bool out_variant = false;  // kLinear: aten::addmm.out, the result goes into its `out` argument
  c10::ScalarType dtype = c10::ScalarType::Float;
  c10::DeviceType device = c10::DeviceType::CPU;
  int64_t n = 0, c = 0, h = 0, w = 0, k = 0, r = 0, s = 0;
  std::array<int64_t, 2> stride{1, 1}, padding{0, 0}, dilation{1, 1};
  int64_t groups = 1;
  bool bias = false;
  std::vector<int64_t> input_strides, weight_strides;
  // What ATen returns, and so what a replacement must return.
  std::vector<int64_t> out_sizes, out_strides;
  Epilogue epilogue;

  int64_t out_h() const { return out_sizes.at(2); }
  int64_t out_w() const { return out_sizes.at(3); }
  bool depthwise() const { return groups > 1 && groups == c && k == c; }
  bool pointwise() const {
    return r == 1 && s == 1 && stride == std::array<int64_t, 2>{1, 1} &&
           padding == std::array<int64_t, 2>{0, 0};
  }
  double flops() const;  // 2 x multiply-adds
  std::string signature() const;

  // The same convolution without its epilogue.
  TunableOp without_epilogue() const {
    TunableOp op = *this;
    op.epilogue = Epilogue{};
    return op;
  }
  // Operands (input, weight, the bias when there is one, the residual when the epilogue adds
  // one), random, laid out as in the program.
  std::vector<at::Tensor> random_operands(uint64_t seed) const;
  // ATen's result on `operands` (the kernel the program would run: convolution, or addmm):
  // the reference every candidate is checked against, in the 4-D form.
  at::Tensor aten(at::TensorList operands) const;
  // A tensor of the output's sizes and strides, uninitialised.
  at::Tensor empty_output() const;
};

// A tunable op where it sits in a program: the convolution op, the ops right after it that its
// epilogue absorbs (they become no-ops when a kernel is bound), and the slot of the residual
// the epilogue adds.
struct TunableSite {
  TunableOp op;
  int index = -1;
  std::vector<int> absorbed;
  int residual_slot = -1;
};

// The op at `index` of `program` as a tunable op; nullopt when no kernel family could
// replace it (another op, a transposed or 1-D/3-D convolution, a dtype other than float). Its
// epilogue is the one the pass stage found (Program::epilogues, passes/slot_epilogues.h), where
// the built program allows it: a functional activation does not take over an `.out` buffer,
// and the residual is a transient slot ready before the op in every schedule the dependencies
// allow and unchanged until the add.
std::optional<TunableSite> tunable_site(const Program& program, int index);

// `base` seen with other sizes and strides, sharing its version counter as autograd's views
// do: a replay runs below the ADInplaceOrView key, where as_strided alone starts a new one,
// and kernels re-derive packed weights when the counter moves.
at::Tensor view_sharing_version(const at::Tensor& base, at::IntArrayRef sizes,
                                at::IntArrayRef strides);

// The operands of `op` on the boxed stack its program op is called with (aten::convolution's
// or aten::addmm's schema order, then the residual when the slot pushes one), in
// `random_operands`' order and 4-D form.
std::vector<at::Tensor> operands_from_stack(const TunableOp& op,
                                            const std::vector<c10::IValue>& stack);
// Leaves a kernel's (4-D) result on `stack` as the program op's return: in the op's own form,
// written into its `out` argument for an out variant.
void return_on_stack(const TunableOp& op, at::Tensor result, std::vector<c10::IValue>& stack);

}  // namespace nimble::kernels

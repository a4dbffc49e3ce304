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

#include "csrc/program/program.h"

namespace nimble::kernels {

// A 2-D convolution (aten::convolution, not transposed): input [n, c, h, w], weight
// [k, c / groups, r, s], optional bias [k].
struct TunableOp {
  c10::ScalarType dtype = c10::ScalarType::Float;
  c10::DeviceType device = c10::DeviceType::CPU;
  int64_t n = 0, c = 0, h = 0, w = 0, k = 0, r = 0, s = 0;
  std::array<int64_t, 2> stride{1, 1}, padding{0, 0}, dilation{1, 1};
  int64_t groups = 1;
  bool bias = false;
  std::vector<int64_t> input_strides, weight_strides;
  // What ATen returns, and so what a replacement must return.
  std::vector<int64_t> out_sizes, out_strides;

  int64_t out_h() const { return out_sizes.at(2); }
  int64_t out_w() const { return out_sizes.at(3); }
  bool depthwise() const { return groups > 1 && groups == c && k == c; }
  bool pointwise() const {
    return r == 1 && s == 1 && stride == std::array<int64_t, 2>{1, 1} &&
           padding == std::array<int64_t, 2>{0, 0};
  }
  double flops() const;  // 2 x multiply-adds
  std::string signature() const;

  // Operands (input, weight, and bias when there is one), random, laid out as in the program.
  std::vector<at::Tensor> random_operands(uint64_t seed) const;
  // ATen's result on `operands`: the reference every candidate is checked against.
  at::Tensor aten(at::TensorList operands) const;
  // A tensor of the output's sizes and strides, uninitialised.
  at::Tensor empty_output() const;
};

// The op at `index` of `program` as a tunable op; nullopt when no kernel family could
// replace it (another op, a transposed or 1-D/3-D convolution, a dtype other than float).
std::optional<TunableOp> tunable_op(const Program& program, int index);

// The operands of `op` on the boxed stack its program op is called with (aten::convolution's
// schema order), in `random_operands`' order.
std::vector<at::Tensor> operands_from_stack(const TunableOp& op,
                                            const std::vector<c10::IValue>& stack);

}  // namespace nimble::kernels

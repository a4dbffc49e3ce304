#pragma once
// Recorded ops the inference passes recognise, by their ATen schema.
#include "csrc/program/recorded_op.h"

namespace nimble {

// The op `name` (e.g. "aten::transpose") of overload `overload` ("" for the default one).
inline bool named(const RecordedOp& op, const char* name, const char* overload = "") {
  return op.handle.operator_name().name == name &&
         op.handle.operator_name().overload_name == overload;
}

// A scalar argument equal to one (an alpha or beta recorded as an int or a double).
inline bool is_one(const c10::IValue& v) {
  return (v.isInt() && v.toInt() == 1) || (v.isDouble() && v.toDouble() == 1.0);
}

// addmm(bias, input, mat2, beta=1, alpha=1): a linear layer's product and bias.
inline bool is_plain_addmm(const RecordedOp& op) {
  return named(op, "aten::addmm") && op.args.size() == 5 && is_one(op.args[3]) &&
         is_one(op.args[4]);
}

// cat(tensors, dim) of 4-d tensors along their channels.
inline bool is_channel_cat(const RecordedOp& op) {
  if (!named(op, "aten::cat") || op.args.size() != 2 || !op.args[0].isList() ||
      !op.args[1].isInt() || (op.args[1].toInt() != 1 && op.args[1].toInt() != -3))
    return false;
  for (const c10::IValue& t : op.args[0].toListRef())
    if (!t.isTensor() || t.toTensor().dim() != 4) return false;
  return true;
}

// convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding,
// groups), not transposed.
inline bool is_plain_convolution(const RecordedOp& op) {
  return op.handle.operator_name().name == "aten::convolution" &&
         op.handle.operator_name().overload_name.empty() && op.args.size() == 9 &&
         op.args[6].isBool() && !op.args[6].toBool();
}

// Whether the op writes its first argument in place (`relu_`, `add_`).
inline bool writes_first_argument(const RecordedOp& op) {
  const auto& arguments = op.handle.schema().arguments();
  return !arguments.empty() && arguments[0].alias_info() && arguments[0].alias_info()->isWrite();
}

// mean(self, dim, keepdim, dtype=None) of a 4-d tensor over its pixels: dim {2, 3} in any
// order or sign (global average pooling, squeeze-excitation).
inline bool is_spatial_mean(const RecordedOp& op) {
  const auto& name = op.handle.operator_name();
  if (name.name != "aten::mean" || name.overload_name != "dim" || op.args.size() != 4 ||
      !op.args[0].isTensor() || op.args[0].toTensor().dim() != 4 || !op.args[1].isIntList() ||
      !op.args[2].isBool() || !op.args[3].isNone())
    return false;
  const std::vector<int64_t> dims = op.args[1].toIntVector();
  if (dims.size() != 2) return false;
  const auto spatial = [](int64_t d) { return d == 2 || d == 3 || d == -1 || d == -2; };
  return spatial(dims[0]) && spatial(dims[1]) && (dims[0] + 4) % 4 != (dims[1] + 4) % 4;
}

}  // namespace nimble

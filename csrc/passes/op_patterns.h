#pragma once
// Recorded ops the inference passes recognise, by their ATen schema.
#include "csrc/program/recorded_op.h"

namespace nimble {

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

}  // namespace nimble

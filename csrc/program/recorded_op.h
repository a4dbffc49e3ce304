#pragma once
// One op as the capture recorded it: the builder's input, and what the passes that run
// before lowering (passes/batchnorm_folding.h, passes/noop_elimination.h) read and rewrite.
// Distinct from nimble/replay/capture.py's RecordedOp, the Python record this one is made from.
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/ivalue.h>

#include <vector>

namespace nimble {

struct RecordedOp {
  c10::OperatorHandle handle;
  std::vector<c10::IValue> args;     // the full boxed stack, in schema order
  std::vector<c10::IValue> returns;  // the values it returned at capture
  // Its position in the captured trace (ProgramBuilder::add_op's order), by which
  // BuildOptions::keep_aten_ops names it; -1 for an op a pass made.
  int trace_position = -1;
};

}  // namespace nimble

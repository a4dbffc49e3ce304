#pragma once
// Inference pass: ops whose result a replay can take from their input without running them.
// A copy (`clone`, `_to_copy` to the same dtype, device and layout) or an alias (`alias`,
// `detach`) qualifies when its result has the input's sizes and strides and neither storage
// is written after it, so no reader can tell the two apart.
// Eval-mode dropout never reaches a trace (torch returns its input above the dispatcher),
// so it needs no rule here; the tests check that it costs no op.
#include <ATen/core/Tensor.h>

#include <functional>
#include <vector>

#include "csrc/program/recorded_op.h"
#include "csrc/program/trace_pass_results.h"

namespace nimble {

// `keep(result)`: results that must stay distinct tensors (program outputs).
std::vector<NoopOp> find_noop_ops(const std::vector<RecordedOp>& ops,
                                  const std::function<bool(const at::Tensor&)>& keep);

}  // namespace nimble

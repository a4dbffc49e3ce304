#pragma once
// What the pass stage (passes/trace_passes.h) hands ProgramBuilder::finish besides the recorded
// ops it rewrote: state the program keeps, and ops the program leaves out.
#include <ATen/core/Tensor.h>

#include <vector>

#include "csrc/program/folded_batchnorm.h"

namespace nimble {

// A recorded op whose result a replay takes from its input without running it
// (passes/noop_elimination.h).
struct NoopOp {
  int op = 0;         // index into the recorded ops
  at::Tensor result;  // its only result
  at::Tensor source;  // the input readers of `result` may read instead
};

struct TracePassResults {
  // Convolution weights with batch norms folded in, which a replay refreshes.
  std::vector<FoldedBatchNorm> folds;
  // In trace order.
  std::vector<NoopOp> noops;
};

}  // namespace nimble

#pragma once
// What the pass stage (passes/trace_passes.h) hands ProgramBuilder::finish besides the recorded
// ops it rewrote: state the program keeps, and ops the program leaves out.
#include <ATen/core/Tensor.h>

#include <vector>

#include "csrc/program/epilogue.h"
#include "csrc/program/folded_batchnorm.h"

namespace nimble {

// A recorded op whose result a replay takes from its input without running it
// (passes/noop_elimination.h).
struct NoopOp {
  int op = 0;         // index into the recorded ops
  at::Tensor result;  // its only result
  at::Tensor source;  // the input readers of `result` may read instead
};

// An epilogue a tuned kernel may do for a tunable op (passes/slot_epilogues.h), in indices of
// the recorded ops; the built program keeps it as an OpEpilogue (program.h).
struct TraceEpilogue {
  int op = 0;
  Epilogue epilogue;
  std::vector<int> absorbed;  // the ops whose work it does, in trace order
  at::Tensor residual;        // what it adds, with epilogue.residual
  // Its activation is a functional op whose result is the op's own.
  bool takes_over_result = false;
};

struct TracePassResults {
  // Convolution weights with batch norms folded in, which a replay refreshes.
  std::vector<FoldedBatchNorm> folds;
  // In trace order.
  std::vector<NoopOp> noops;
  // By op, ascending.
  std::vector<TraceEpilogue> slot_epilogues;
};

}  // namespace nimble

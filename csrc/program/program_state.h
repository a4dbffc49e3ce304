#pragma once
// What a Program runs on, apart from the program itself: everything a replay may change.
// The Program (program.h) is fixed once built; its state holds the current value of every
// slot, the weights derived from parameters (folded batch norms), the tuned kernel bound to
// each op and the op arguments set between replays (an optimizer's learning rate). One
// Replay owns one program and one state; its executor runs the first on the second.
#include <ATen/core/ivalue.h>

#include <memory>
#include <utility>
#include <vector>

#include "csrc/program/folded_batchnorm.h"
#include "csrc/program/kernel_override.h"
#include "csrc/program/program.h"

namespace nimble {

struct OpState {
  // The tuned-kernel slot: when set, runs instead of the ATen kernel (see op_call.h).
  std::shared_ptr<const KernelOverride> kernel;
  // Arguments that replace the program's constants at these argument indices.
  std::vector<std::pair<int, c10::IValue>> args;
};

struct ProgramState {
  std::vector<c10::IValue> values;  // current value of every slot
  // Weights derived from parameters at prepare (refreshed when their sources change).
  std::vector<FoldedBatchNorm> folds;
  std::vector<OpState> ops;  // one per op of the program
};

// What the builder hands over: the program and the state it starts from.
struct BuiltProgram {
  Program program;
  ProgramState state;
};

}  // namespace nimble

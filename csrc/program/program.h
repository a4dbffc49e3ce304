#pragma once
// The program IR: a captured op trace over value slots, ready to replay. A Program is fixed
// once built; what changes from one replay to the next (slot values, folded weights, bound
// kernels, scalar arguments) is its ProgramState (program_state.h).
//
// A *slot* holds one value of the program. Stable slots hold the same tensor object on
// every replay (parameters, buffers, inputs, constants, preallocated `.out` buffers and
// views of those computed once at prepare); their tensors are baked into the op's
// argument list as constants. Transient slots are produced anew by an op on each replay
// (ops without a usable `.out` overload) and are released after their last reader.
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/ivalue.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "csrc/program/epilogue.h"

namespace nimble {

enum class SlotRole {
  kInput,      // copied from the caller's argument before each replay
  kState,      // a parameter or buffer of the module, used in place
  kConstant,   // any other tensor the trace read but did not produce
  kBuffer,     // preallocated output of an `.out` overload
  kView,       // view of a stable slot, computed once at prepare
  kTransient,  // produced by an op on every replay
};

const char* slot_role_name(SlotRole role);

struct SlotInfo {
  SlotRole role = SlotRole::kTransient;
  int producer = -1;              // op index that produces it (-1: from outside the trace)
  const void* storage = nullptr;  // storage identity at capture; equal => may alias
  bool mutated = false;           // some op writes it in place
  // The tensor's layout at capture (empty sizes, Undefined dtype: not a tensor). A replay
  // gives transient slots the same layout every time, so passes and kernels may rely on it.
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;
  c10::ScalarType dtype = c10::ScalarType::Undefined;
  c10::Device device = c10::Device(c10::DeviceType::CPU);
  bool is_stable() const { return role != SlotRole::kTransient; }
};

// One argument of an op's boxed stack.
struct Arg {
  enum class Kind { kConstant, kSlot, kTensorList, kOptionalTensorList };
  Kind kind = Kind::kConstant;
  c10::IValue constant;    // kConstant
  int slot = -1;           // kSlot
  std::vector<int> slots;  // lists: one slot per element, -1 for None (stable ones as well)
  std::vector<c10::IValue> list_constants;  // lists: element values for stable slots
};

struct OpNode {
  explicit OpNode(c10::OperatorHandle op) : handle(std::move(op)) {}
  c10::OperatorHandle handle;
  std::string name;           // e.g. "aten::convolution" (overload of the call)
  std::string captured_name;  // what the trace recorded, e.g. "aten::addmm" (before .out rewrite)
  c10::DispatchKeySet keys;   // computed once; below autograd
  std::vector<Arg> args;      // the full boxed stack, in schema order
  struct Output {
    int ret = 0;    // index into the op's returns
    int elem = -1;  // element of a returned Tensor[]; -1 for a single Tensor
    int slot = -1;
  };
  std::vector<Output> outputs;  // returned values the program keeps
  std::vector<int> release;     // transient slots whose last reader is this op
  std::vector<int> reads;       // slots read (for dependencies and messages)
  std::vector<int> writes;      // slots written in place or produced
};

// The epilogue a tuned kernel for op `op` may do (passes/slot_epilogues.h): the ops it
// absorbs become no-ops when one is bound.
struct OpEpilogue {
  int op = -1;
  Epilogue epilogue;
  std::vector<int> absorbed;  // ascending
  int residual_slot = -1;     // with epilogue.residual
  // Its activation is a functional op that takes the op's result over as its own, which a
  // result the op returns allows and an `.out` buffer does not.
  bool takes_over_result = false;
};

struct Program {
  std::vector<OpNode> ops;
  std::vector<SlotInfo> slots;
  std::vector<int> inputs;   // slots the caller's tensors are copied into
  std::vector<int> outputs;  // flattened program outputs
  // Per output: its storage is reused by the next replay (a buffer, a state, a view of
  // them), so a caller who keeps it needs a copy.
  std::vector<bool> output_reuses_storage;
  std::vector<int> mutated_inputs;  // positions in `inputs` written by the trace
  // Dependency edges (producer op, consumer op), from < to, from data flow and from
  // read/write order on aliased storage.
  std::vector<std::pair<int, int>> dependencies;

  // Bytes of `.out` buffers before and after they share storage.
  int64_t buffer_bytes_unplanned = 0;
  int64_t buffer_bytes = 0;

  // Per op the builder was given (in trace order): its index in `ops`, or -1 when it was
  // computed once at prepare (a view of stable tensors, an allocation). Lets callers find
  // the op behind a traced call, e.g. to update its scalar arguments.
  std::vector<int> op_of_traced;
  // By op, ascending: what the pass stage found for the tuned-kernel slot.
  std::vector<OpEpilogue> epilogues;

  size_t num_ops() const { return ops.size(); }
};

// The device a program runs on: the first accelerator among its tensor slots (CPU scalars
// may sit beside CUDA tensors), else the CPU.
inline c10::Device program_device(const Program& program) {
  for (const SlotInfo& slot : program.slots)
    if (slot.dtype != c10::ScalarType::Undefined && !slot.device.is_cpu()) return slot.device;
  return c10::Device(c10::DeviceType::CPU);
}

}  // namespace nimble

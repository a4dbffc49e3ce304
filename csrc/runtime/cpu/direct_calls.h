#pragma once
// Unboxed calls of nimble's own ops for the CPU replay: nimble::convolution_prepacked,
// linear_prepacked, max_pool2d_nhwc, cat_nhwc, channel_shuffle(_nhwc) and mean_hw_nhwc (the
// others, and ATen's, keep the boxed call of op_call.h). Called through the dispatcher, each op
// had its boxed stack built from the program's values (a reference count per argument), its
// constants copied in (int lists: reference counts; a prepacked object: a type check and
// several reference counts to unwrap it), a Tensor[] built on the heap, the dispatcher's table
// consulted and its result boxed and unboxed again. A direct call holds the constants unboxed
// once, when the executor is built, and calls the kernel with the program's current values;
// tensor lists are gathered on the call's own stack, so no call keeps another's tensors. The
// kernel is the same one (its own staleness checks included): only the way to it changes.
// (The boxed path redispatches below autograd, which runs no RecordFunction either: a
// profiler saw neither.)
#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>

#include <memory>
#include <vector>

#include "csrc/program/program.h"
#include "csrc/program/program_state.h"

namespace nimble {

class DirectCall {
 public:
  virtual ~DirectCall() = default;
  // The op's one result, computed from the current slot values.
  virtual at::Tensor call(const std::vector<c10::IValue>& values) const = 0;
  // The slot the result goes to.
  int out_slot() const { return out_slot_; }

 protected:
  explicit DirectCall(int out_slot) : out_slot_(out_slot) {}

 private:
  int out_slot_;
};

// The direct call of `op`, or null where it has none (another op, or a stack of another
// shape than the builder makes).
std::unique_ptr<const DirectCall> direct_call_for(const OpNode& op);

// Whether a replay may take the direct call of an op with this state now: no tuned kernel is
// bound to it and no argument of it is replaced (set_op_argument, register_scalars); both
// may change between replays without a new executor.
inline bool direct_call_allowed(const OpState& state) {
  return !state.kernel && state.args.empty();
}

}  // namespace nimble

#pragma once
// The one way an op of a Program is called, shared by every executor: build the boxed
// stack from baked constants and current slot values, call below autograd with the keys
// computed at prepare (or the tuned kernel bound to the op), keep the returned values, drop the
// values this op read last.
#include <ATen/core/List.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <vector>

#include "csrc/program/program.h"

namespace nimble {

inline void push_args(const OpNode& op, const std::vector<c10::IValue>& values,
                      std::vector<c10::IValue>& stack) {
  stack.clear();
  for (const Arg& arg : op.args) {
    switch (arg.kind) {
      case Arg::Kind::kConstant:
        stack.push_back(arg.constant);
        break;
      case Arg::Kind::kSlot:
        stack.push_back(values[arg.slot]);
        break;
      case Arg::Kind::kTensorList: {
        c10::List<at::Tensor> list;
        list.reserve(arg.slots.size());
        for (int slot : arg.slots) list.push_back(values[slot].toTensor());
        stack.emplace_back(std::move(list));
        break;
      }
      case Arg::Kind::kOptionalTensorList: {
        c10::List<std::optional<at::Tensor>> list;
        list.reserve(arg.slots.size());
        for (int slot : arg.slots) {
          if (slot < 0) {
            list.push_back(std::nullopt);
          } else {
            list.push_back(values[slot].toTensor());
          }
        }
        stack.emplace_back(std::move(list));
        break;
      }
    }
  }
  if (op.kernel)
    for (int slot : op.kernel->extra_slots()) stack.push_back(values[slot]);
}

// `release`: the values this op is the last to read (it depends on the schedule).
inline void keep_results(const OpNode& op, std::vector<c10::IValue>& values,
                         std::vector<c10::IValue>& stack, const std::vector<int>& release) {
  for (const OpNode::Output& out : op.outputs) {
    if (out.elem < 0) {
      values[out.slot] = std::move(stack[out.ret]);
    } else {
      values[out.slot] = stack[out.ret].toTensorList().get(out.elem);
    }
  }
  for (int slot : release) values[slot] = c10::IValue();
}

// The op's kernel on its boxed stack: the tuned kernel bound to its slot, else ATen's
// below autograd.
inline void invoke(const OpNode& op, std::vector<c10::IValue>& stack) {
  if (op.kernel) {
    op.kernel->call(stack);
  } else {
    op.handle.redispatchBoxed(op.keys, &stack);
  }
}

inline void call_op(const OpNode& op, std::vector<c10::IValue>& values,
                    std::vector<c10::IValue>& stack) {
  push_args(op, values, stack);
  invoke(op, stack);
  keep_results(op, values, stack, op.release);
}

}  // namespace nimble

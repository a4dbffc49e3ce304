#pragma once
// The one way an op of a Program is called, shared by every executor: build the boxed
// stack from baked constants, the op's replaced arguments and current slot values, call
// below autograd with the keys computed at prepare (or the tuned kernel bound to the op),
// keep the returned values, drop the values this op read last.
#include <ATen/core/List.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "csrc/program/program.h"
#include "csrc/program/program_state.h"

namespace nimble {

inline void push_args(const OpNode& op, const OpState& state,
                      const std::vector<c10::IValue>& values, std::vector<c10::IValue>& stack) {
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
  for (const auto& [index, value] : state.args) stack[index] = value;
  if (state.kernel)
    for (int slot : state.kernel->extra_slots()) stack.push_back(values[slot]);
}

[[noreturn]] inline void missing_return(const OpNode& op, const OpNode::Output& out,
                                        size_t returned) {
  throw std::runtime_error("op " + op.name + " left " + std::to_string(returned) +
                           " values on its stack and no tensor at return " +
                           std::to_string(out.ret) + ", where its capture returned one");
}

// `release`: the values this op is the last to read (it depends on the schedule). Every
// value kept is owned by the stack's copy of it: the builder hands no op with several
// returns to its `.out` overload, whose returned references would outlive the arguments
// they point into (program_builder.cpp, usable_out_variant).
inline void keep_results(const OpNode& op, std::vector<c10::IValue>& values,
                         std::vector<c10::IValue>& stack, const std::vector<int>& release) {
  for (const OpNode::Output& out : op.outputs) {
    if (static_cast<size_t>(out.ret) >= stack.size()) missing_return(op, out, stack.size());
    if (out.elem < 0) {
      if (!stack[out.ret].isTensor()) missing_return(op, out, stack.size());
      values[out.slot] = std::move(stack[out.ret]);
    } else {
      values[out.slot] = stack[out.ret].toTensorList().get(out.elem);
    }
  }
  for (int slot : release) values[slot] = c10::IValue();
}

// The op's kernel on its boxed stack: the tuned kernel bound to its slot, else ATen's
// below autograd.
inline void invoke(const OpNode& op, const OpState& state, std::vector<c10::IValue>& stack) {
  if (state.kernel) {
    state.kernel->call(stack);
  } else {
    op.handle.redispatchBoxed(op.keys, &stack);
  }
}

inline void call_op(const OpNode& op, const OpState& state, std::vector<c10::IValue>& values,
                    std::vector<c10::IValue>& stack) {
  push_args(op, state, values, stack);
  invoke(op, state, stack);
  keep_results(op, values, stack, op.release);
}

}  // namespace nimble

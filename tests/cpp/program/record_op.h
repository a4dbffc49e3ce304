#pragma once
// Test helper: runs an op eagerly through the dispatcher (full stack given) and records it
// into a ProgramBuilder, as the capture glue does for a traced call.
#include <ATen/core/dispatch/Dispatcher.h>

#include <utility>
#include <vector>

#include "csrc/program/program_builder.h"

namespace nimble::testing {

inline c10::IValue record(ProgramBuilder& builder, const char* name, const char* overload,
                          std::vector<c10::IValue> args) {
  auto handle = c10::Dispatcher::singleton().findSchemaOrThrow(name, overload);
  std::vector<c10::IValue> stack = args;
  handle.callBoxed(stack);
  builder.add_op(name, overload, std::move(args), stack);
  return stack.at(0);
}

}  // namespace nimble::testing

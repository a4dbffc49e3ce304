#pragma once
// How the program builder's stages read a recorded trace (program_builder.h): an op's name,
// the tensors inside one recorded value, and the slot the builder gave a recorded tensor.
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/ivalue.h>

#include <string>
#include <unordered_map>

namespace nimble {

// "aten::add.Tensor"; the bare name for the default overload.
inline std::string op_name(const c10::OperatorHandle& handle) {
  const auto& name = handle.operator_name();
  return name.overload_name.empty() ? name.name : name.name + "." + name.overload_name;
}

// Calls `f` on the tensor a value is, or on each tensor of a list or tuple it is.
template <typename F>
void for_each_tensor(const c10::IValue& value, F&& f) {
  if (value.isTensor()) {
    f(value.toTensor());
  } else if (value.isList()) {
    for (const c10::IValue& item : value.toListRef()) {
      if (item.isTensor()) f(item.toTensor());
    }
  } else if (value.isTuple()) {
    for (const c10::IValue& item : value.toTupleRef().elements()) {
      if (item.isTensor()) f(item.toTensor());
    }
  }
}

using SlotMap = std::unordered_map<const c10::TensorImpl*, int>;

// The slot a recorded tensor was given (after redirects by folds and dropped no-ops).
inline int slot_in(const SlotMap& slot_by_impl, const at::Tensor& t) {
  return slot_by_impl.at(t.unsafeGetTensorImpl());
}

}  // namespace nimble

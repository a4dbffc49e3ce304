#include "csrc/runtime/input_binding.h"

#include <set>

namespace nimble {

namespace {

bool same_storage(const at::Tensor& a, const at::Tensor& b) {
  return a.has_storage() && b.has_storage() && a.storage().is_alias_of(b.storage());
}

}  // namespace

InputBinding::InputBinding(const Program& program, const ProgramState& state, bool enabled)
    : eligible_(program.inputs.size(), enabled), views_(program.inputs.size()) {
  for (size_t i = 0; i < program.inputs.size(); ++i) {
    const at::Tensor& buffer = state.values[program.inputs[i]].toTensor();
    for (size_t s = 0; s < program.slots.size(); ++s) {
      if (program.slots[s].role == SlotRole::kView &&
          same_storage(state.values[s].toTensor(), buffer)) {
        views_[i].push_back(static_cast<int>(s));
      }
    }
    // An output on the input's storage would be handed out pointing at the caller's
    // memory, then swapped back under the caller's feet.
    for (int out : program.outputs) {
      const c10::IValue& value = state.values[out];
      if (program.slots[out].storage == program.slots[program.inputs[i]].storage ||
          (value.isTensor() && same_storage(value.toTensor(), buffer))) {
        eligible_[i] = false;
      }
    }
  }
}

InputBinding::Scope InputBinding::bind(const Program& program, const ProgramState& state,
                                       const std::vector<at::Tensor>& inputs) const {
  Scope scope;
  scope.bound_.assign(inputs.size(), false);
  std::set<const void*> storages;
  for (const at::Tensor& t : inputs) {
    if (t.has_storage() && !storages.insert(t.storage().unsafeGetStorageImpl()).second) {
      return scope;  // two inputs share memory: the program did not see that; copy
    }
  }
  // An input on one of the input buffers (an output handed out with copy_outputs=False
  // that views an input) would be read while the other inputs are copied over it.
  auto on_an_input_buffer = [&](const at::Tensor& user) {
    for (int slot : program.inputs) {
      if (same_storage(user, state.values[slot].toTensor())) return true;
    }
    return false;
  };
  for (size_t i = 0; i < inputs.size(); ++i) {
    const at::Tensor& buffer = state.values[program.inputs[i]].toTensor();
    const at::Tensor& user = inputs[i];
    if (!eligible_[i] || !user.is_cpu() || !user.has_storage() || user.is_conj() || user.is_neg() ||
        user.layout() != c10::kStrided || user.dtype() != buffer.dtype() ||
        user.sizes() != buffer.sizes() || user.strides() != buffer.strides() ||
        user.storage_offset() != buffer.storage_offset() || on_an_input_buffer(user)) {
      continue;
    }
    auto point = [&](const at::Tensor& t) {
      c10::TensorImpl* impl = t.unsafeGetTensorImpl();
      scope.restore_.emplace_back(impl, t.storage());
      impl->set_storage_keep_dtype(user.storage());
    };
    point(buffer);
    for (int view : views_[i]) point(state.values[view].toTensor());
    scope.bound_[i] = true;
  }
  return scope;
}

InputBinding::Scope::~Scope() {
  for (auto& [impl, storage] : restore_) impl->set_storage_keep_dtype(std::move(storage));
}

}  // namespace nimble

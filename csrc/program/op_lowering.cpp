// The stage of ProgramBuilder::finish that turns each kept recorded op into what the replay
// runs (program_builder.h): a view computed once, a buffer made once, or a program op whose
// stable arguments are baked in and whose functional results go into `.out` buffers where
// that is allowed.
#include <ATen/ATen.h>

#include <algorithm>
#include <optional>
#include <set>
#include <string>
#include <unordered_set>
#include <vector>

#include "csrc/errors.h"
#include "csrc/program/program_builder.h"
#include "csrc/program/recorded_values.h"

namespace nimble {

namespace {

// Ops that change a tensor's sizes, strides or storage in place. Replaying them on a
// tensor that outlives the replay would compound the change, so their targets must be
// produced anew on every replay.
bool changes_metadata_in_place(const std::string& name) {
  static const std::set<std::string> kOps = {
      "aten::as_strided_", "aten::resize_", "aten::resize_as_", "aten::squeeze_",
      "aten::unsqueeze_",  "aten::t_",      "aten::transpose_", "aten::swapdims_",
      "aten::swapaxes_",   "aten::set_",    "aten::detach_",    "aten::_resize_output_"};
  return kOps.count(name) > 0;
}

// Ops whose only effect is an allocation with unspecified contents: one buffer made at
// prepare serves every replay.
bool is_allocation(const std::string& qualified) {
  return qualified == "aten::empty.memory_format" || qualified == "aten::empty_strided";
}

bool is_tensor_type(const c10::TypePtr& type) { return type->kind() == c10::TypeKind::TensorType; }

// Tensor[] and Tensor?[] arguments are rebuilt from slots on each replay.
std::optional<Arg::Kind> tensor_list_kind(const c10::TypePtr& type) {
  if (type->kind() != c10::TypeKind::ListType) return std::nullopt;
  const c10::TypePtr& elem = type->containedType(0);
  if (is_tensor_type(elem)) return Arg::Kind::kTensorList;
  if (elem->kind() == c10::TypeKind::OptionalType && is_tensor_type(elem->containedType(0))) {
    return Arg::Kind::kOptionalTensorList;
  }
  return std::nullopt;
}

c10::DispatchKeySet keys_below_autograd(c10::DispatchKeySet keys) {
  keys = keys & c10::after_ADInplaceOrView_keyset;
  return keys.remove(c10::DispatchKey::Python).remove(c10::DispatchKey::PythonTLSSnapshot);
}

// The `.out` overload computing the same thing as a functional overload into
// caller-provided tensors: same leading arguments, then one written Tensor per return.
std::optional<c10::OperatorHandle> find_out_variant(const c10::OperatorHandle& functional) {
  const c10::FunctionSchema& schema = functional.schema();
  const auto& name = functional.operator_name();
  std::vector<std::string> candidates = {"out"};
  if (!name.overload_name.empty())
    candidates.insert(candidates.begin(), name.overload_name + "_out");
  for (const std::string& overload : candidates) {
    auto handle = c10::Dispatcher::singleton().findSchema({name.name, overload});
    if (!handle) continue;
    const c10::FunctionSchema& out = handle->schema();
    const size_t n = schema.arguments().size();
    if (out.arguments().size() != n + schema.returns().size()) continue;
    bool matches = true;
    for (size_t i = 0; i < n && matches; ++i) {
      const auto& a = schema.arguments()[i];
      const auto& b = out.arguments()[i];
      matches = a.name() == b.name() && *a.type() == *b.type();
    }
    for (size_t i = n; i < out.arguments().size() && matches; ++i) {
      const auto& b = out.arguments()[i];
      matches = is_tensor_type(b.type()) && b.alias_info() && b.alias_info()->isWrite();
    }
    if (matches) return handle;
  }
  return std::nullopt;
}

c10::DispatchKey backend_key(const at::Tensor& t) {
  return t.is_cuda() ? c10::DispatchKey::CUDA : c10::DispatchKey::CPU;
}

at::Tensor empty_like_exactly(const at::Tensor& t) {
  return at::empty_strided(t.sizes(), t.strides(), t.options());
}

// What one recorded op touches, in slots, and what that allows when lowering it.
struct OpAccess {
  c10::DispatchKeySet keys;               // of every tensor it touches, below autograd
  std::vector<int> reads;                 // every tensor argument
  std::vector<int> writes;                // arguments written in place, then produced values
  std::vector<OpNode::Output> produced;   // returned values it creates
  bool inputs_stable = true;              // every tensor argument is a stable slot
  bool writes_args = false;               // some argument is written in place
  bool returns_view = false;              // some return aliases an argument
  bool returns_changed = false;           // some op changes a produced value's shape in place
  bool returns_only_new_tensors = false;  // every return is one tensor it creates
};

OpAccess access_of(const RecordedOp& raw, int index, const Program& program,
                   const SlotMap& slot_by_impl, const std::unordered_set<int>& metadata_changed) {
  const c10::FunctionSchema& schema = raw.handle.schema();
  OpAccess access;
  for (size_t a = 0; a < raw.args.size(); ++a) {
    const auto* alias = schema.arguments()[a].alias_info();
    const bool written = alias && alias->isWrite();
    for_each_tensor(raw.args[a], [&](const at::Tensor& t) {
      if (!t.defined()) return;
      access.keys = access.keys | t.key_set();
      const int slot = slot_in(slot_by_impl, t);
      access.inputs_stable = access.inputs_stable && program.slots[slot].is_stable();
      access.reads.push_back(slot);
      if (written) access.writes.push_back(slot);
    });
  }
  access.writes_args = !access.writes.empty();
  access.returns_only_new_tensors = !raw.returns.empty();
  for (size_t r = 0; r < raw.returns.size(); ++r) {
    access.returns_view = access.returns_view || (schema.returns()[r].alias_info() &&
                                                  !schema.returns()[r].alias_info()->isWrite());
    access.returns_only_new_tensors = access.returns_only_new_tensors && raw.returns[r].isTensor();
    const c10::IValue& value = raw.returns[r];
    int elem = value.isTensor() ? -1 : 0;
    for_each_tensor(value, [&](const at::Tensor& t) {
      if (t.defined()) {
        access.keys = access.keys | t.key_set();
        const int slot = slot_in(slot_by_impl, t);
        if (program.slots[slot].producer == index) {
          access.produced.push_back({static_cast<int>(r), elem, slot});
          access.writes.push_back(slot);
          access.returns_changed = access.returns_changed || metadata_changed.count(slot);
        } else {
          access.returns_only_new_tensors = false;
        }
      }
      if (elem >= 0) ++elem;
    });
  }
  access.keys = keys_below_autograd(access.keys);
  return access;
}

// The op's arguments for the replay: stable tensors baked in as constants (lists of them
// too), transient ones as slots filled in at replay.
std::vector<Arg> lower_args(const RecordedOp& raw, const Program& program,
                            const std::vector<c10::IValue>& values, const SlotMap& slot_by_impl) {
  const c10::FunctionSchema& schema = raw.handle.schema();
  std::vector<Arg> args;
  for (size_t a = 0; a < raw.args.size(); ++a) {
    const c10::IValue& value = raw.args[a];
    Arg arg;
    if (value.isTensor() && value.toTensor().defined()) {
      const int slot = slot_in(slot_by_impl, value.toTensor());
      if (program.slots[slot].is_stable()) {
        arg.constant = values[slot];
      } else {
        arg.kind = Arg::Kind::kSlot;
        arg.slot = slot;
      }
    } else if (value.isList() && tensor_list_kind(schema.arguments()[a].type())) {
      arg.kind = *tensor_list_kind(schema.arguments()[a].type());
    } else {
      arg.constant = value;
    }
    if (arg.kind == Arg::Kind::kTensorList || arg.kind == Arg::Kind::kOptionalTensorList) {
      bool all_stable = true;
      for (const c10::IValue& item : value.toListRef()) {
        const bool present = item.isTensor() && item.toTensor().defined();
        const int slot = present ? slot_in(slot_by_impl, item.toTensor()) : -1;
        arg.slots.push_back(slot);
        arg.list_constants.push_back(slot >= 0 && program.slots[slot].is_stable() ? values[slot]
                                                                                  : c10::IValue());
        all_stable = all_stable && (slot < 0 || program.slots[slot].is_stable());
      }
      if (all_stable) {
        // Rebuild the list from replay values; the list type follows the schema.
        if (arg.kind == Arg::Kind::kTensorList) {
          c10::List<at::Tensor> list;
          for (const auto& v : arg.list_constants) list.push_back(v.toTensor());
          arg.constant = list;
        } else {
          c10::List<std::optional<at::Tensor>> list;
          for (const auto& v : arg.list_constants) {
            list.push_back(v.isTensor() ? std::optional<at::Tensor>(v.toTensor()) : std::nullopt);
          }
          arg.constant = list;
        }
        arg.kind = Arg::Kind::kConstant;
        arg.slots.clear();
        arg.list_constants.clear();
      }
    }
    args.push_back(std::move(arg));
  }
  return args;
}

// The `.out` overload to lower a functional op to, if it has a native kernel for the op's
// backend and the options allow it; none for an op writing its arguments or returning
// views, and none where a program output lives: a fresh result each replay can be handed
// to the caller as it is, where a buffer would need a copy (memory and time eager does not
// spend). None for an op with several returns either: its `.out` kernel returns
// `std::tuple<Tensor&, ...>`, which the boxed call reads only after it has destroyed the
// arguments those references point into. That is safe only while every out tensor has
// another owner, and a kernel that gives an out argument a new tensor instead of writing
// into it (cuDNN's batch norm does, for its reserve) leaves the stack holding a freed
// tensor: the heap-use-after-free seen at the first CUDA prepare, and a result in memory
// the program never reads.
std::optional<c10::OperatorHandle> usable_out_variant(
    const RecordedOp& raw, const OpAccess& access, const Program& program,
    const std::vector<c10::IValue>& capture_values, const std::set<const void*>& output_storages,
    const BuildOptions& options) {
  const bool makes_output = std::any_of(
      access.produced.begin(), access.produced.end(),
      [&](const auto& out) { return output_storages.count(program.slots[out.slot].storage) > 0; });
  // The `.out` overload takes one written tensor per return, in return order: an undefined
  // return has no produced value, and the call would find its stack short of arguments.
  bool one_buffer_per_return = access.produced.size() == raw.handle.schema().returns().size();
  for (size_t r = 0; r < access.produced.size() && one_buffer_per_return; ++r) {
    one_buffer_per_return =
        access.produced[r].ret == static_cast<int>(r) && access.produced[r].elem < 0;
  }
  const bool one_return = raw.handle.schema().returns().size() == 1;
  if (!options.use_out_variants || !one_return || access.writes_args || access.returns_view ||
      !access.returns_only_new_tensors || access.returns_changed || access.produced.empty() ||
      !one_buffer_per_return || makes_output) {
    return std::nullopt;
  }
  std::optional<c10::OperatorHandle> out_variant = find_out_variant(raw.handle);
  const at::Tensor& first = capture_values[access.produced[0].slot].toTensor();
  int64_t produced_bytes = 0;
  for (const auto& out : access.produced)
    produced_bytes += capture_values[out.slot].toTensor().nbytes();
  if (out_variant &&
      (!out_variant->hasKernelForDispatchKey(backend_key(first)) ||
       (options.out_variant_max_bytes > 0 && produced_bytes > options.out_variant_max_bytes))) {
    return std::nullopt;
  }
  return out_variant;
}

}  // namespace

std::unordered_set<int> ProgramBuilder::metadata_changed_slots() const {
  std::unordered_set<int> changed;
  for (const RecordedOp& raw : raw_ops_) {
    const std::string name = raw.handle.operator_name().name;
    if (!changes_metadata_in_place(name) || !raw.args.at(0).isTensor()) continue;
    const int slot = slot_in(slot_by_impl_, raw.args[0].toTensor());
    const SlotRole role = slots_[slot].role;
    if (role == SlotRole::kInput || role == SlotRole::kState || role == SlotRole::kConstant) {
      throw UnsupportedOp(std::string("nimble cannot replay op ") + op_name(raw.handle) +
                          ": it changes the shape or strides of a model " + slot_role_name(role) +
                          " in place");
    }
    changed.insert(slot);
  }
  return changed;
}

void ProgramBuilder::lower_ops(BuiltProgram& built, const std::vector<bool>& dropped,
                               const std::unordered_set<int>& metadata_changed,
                               const std::set<const void*>& output_storages,
                               const BuildOptions& options) const {
  Program& program = built.program;
  std::vector<c10::IValue>& values = built.state.values;
  std::vector<c10::IValue> stack;
  program.op_of_traced.assign(raw_ops_.size(), -1);
  for (size_t index = 0; index < raw_ops_.size(); ++index) {
    if (dropped[index]) continue;
    const RecordedOp& raw = raw_ops_[index];
    const OpAccess access =
        access_of(raw, static_cast<int>(index), program, slot_by_impl_, metadata_changed);

    // Views of stable tensors: computed once, here, on the replay's own tensors.
    if (options.precompute_views && access.returns_view && !access.writes_args &&
        access.inputs_stable && !access.returns_changed && access.returns_only_new_tensors) {
      stack.clear();
      for (const Arg& arg : lower_args(raw, program, values, slot_by_impl_))
        stack.push_back(arg.constant);
      raw.handle.redispatchBoxed(access.keys, &stack);
      for (const auto& out : access.produced) {
        values[out.slot] = stack[out.ret];
        program.slots[out.slot].role = SlotRole::kView;
      }
      continue;
    }
    // Pure allocations: one buffer, made now.
    if (is_allocation(op_name(raw.handle)) && !access.returns_changed &&
        access.produced.size() == 1) {
      const int slot = access.produced[0].slot;
      values[slot] = empty_like_exactly(capture_values_[slot].toTensor());
      program.slots[slot].role = SlotRole::kBuffer;
      continue;
    }

    OpNode node(raw.handle);
    node.captured_name = op_name(raw.handle);
    node.keys = access.keys;
    node.reads = access.reads;
    node.writes = access.writes;
    node.args = lower_args(raw, program, values, slot_by_impl_);
    // Functional ops with a native `.out` kernel write into preallocated buffers.
    if (const auto out_variant =
            usable_out_variant(raw, access, program, capture_values_, output_storages, options)) {
      node.handle = *out_variant;
      for (const auto& out : access.produced) {
        at::Tensor buffer = empty_like_exactly(capture_values_[out.slot].toTensor());
        values[out.slot] = buffer;
        program.slots[out.slot].role = SlotRole::kBuffer;
        Arg arg;
        arg.constant = buffer;
        node.args.push_back(std::move(arg));
      }
    } else {
      node.outputs = access.produced;
    }
    node.name = op_name(node.handle);
    for (int slot : access.writes) {
      if (std::find(access.reads.begin(), access.reads.end(), slot) != access.reads.end())
        program.slots[slot].mutated = true;
    }
    program.op_of_traced[index] = static_cast<int>(program.ops.size());
    program.ops.push_back(std::move(node));
  }
}

}  // namespace nimble

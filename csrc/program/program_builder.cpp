#include "csrc/program/program_builder.h"

#include <ATen/ATen.h>
#include <ATen/core/LegacyTypeDispatch.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <map>
#include <set>
#include <sstream>
#include <unordered_set>

#include "csrc/errors.h"
#include "csrc/passes/batchnorm_folding.h"
#include "csrc/passes/cpu_lowering.h"
#include "csrc/passes/memory_plan.h"
#include "csrc/passes/noop_elimination.h"
#include "csrc/program/dependencies.h"

namespace nimble {

const char* slot_role_name(SlotRole role) {
  switch (role) {
    case SlotRole::kInput:
      return "input";
    case SlotRole::kState:
      return "state";
    case SlotRole::kConstant:
      return "constant";
    case SlotRole::kBuffer:
      return "buffer";
    case SlotRole::kView:
      return "view";
    case SlotRole::kTransient:
      return "transient";
  }
  return "?";
}

namespace {

std::string op_name(const c10::OperatorHandle& handle) {
  const auto& name = handle.operator_name();
  return name.overload_name.empty() ? name.name : name.name + "." + name.overload_name;
}

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

using SlotMap = std::unordered_map<const c10::TensorImpl*, int>;

// The slot a recorded tensor was given (after redirects by folds and dropped no-ops).
int slot_in(const SlotMap& slot_by_impl, const at::Tensor& t) {
  return slot_by_impl.at(t.unsafeGetTensorImpl());
}

}  // namespace

int ProgramBuilder::new_slot(const at::Tensor& tensor, SlotRole role) {
  SlotInfo info;
  info.role = role;
  info.storage =
      tensor.defined() && tensor.has_storage() ? tensor.storage().unsafeGetStorageImpl() : nullptr;
  if (tensor.defined()) {
    info.sizes = tensor.sizes().vec();
    info.strides = tensor.strides().vec();
    info.dtype = tensor.scalar_type();
    info.device = tensor.device();
  }
  slots_.push_back(info);
  capture_values_.emplace_back(tensor);
  const int slot = static_cast<int>(slots_.size()) - 1;
  slot_by_impl_[tensor.unsafeGetTensorImpl()] = slot;
  return slot;
}

int ProgramBuilder::slot_of(const at::Tensor& tensor) {
  auto it = slot_by_impl_.find(tensor.unsafeGetTensorImpl());
  if (it != slot_by_impl_.end()) return it->second;
  if (tensor.defined() && tensor.has_storage()) {
    const void* storage = tensor.storage().unsafeGetStorageImpl();
    for (size_t s = 0; s < slots_.size(); ++s) {
      if (slots_[s].storage != storage || slots_[s].role == SlotRole::kConstant) continue;
      const at::Tensor& known = capture_values_[s].toTensor();
      if (known.sizes() == tensor.sizes() && known.strides() == tensor.strides() &&
          known.storage_offset() == tensor.storage_offset() &&
          known.scalar_type() == tensor.scalar_type()) {
        slot_by_impl_[tensor.unsafeGetTensorImpl()] = static_cast<int>(s);
        return static_cast<int>(s);
      }
    }
  }
  return new_slot(tensor, SlotRole::kConstant);
}

int ProgramBuilder::add_input(const at::Tensor& tensor) {
  TORCH_CHECK(!slot_by_impl_.count(tensor.unsafeGetTensorImpl()),
              "the same tensor was given twice as a program input");
  const int slot = new_slot(tensor, SlotRole::kInput);
  inputs_.push_back(slot);
  return slot;
}

void ProgramBuilder::add_state(const at::Tensor& tensor) {
  if (!slot_by_impl_.count(tensor.unsafeGetTensorImpl())) new_slot(tensor, SlotRole::kState);
}

c10::OperatorHandle find_op(const std::string& qualified_name, const std::string& overload) {
  auto handle = c10::Dispatcher::singleton().findSchema({qualified_name, overload});
  if (!handle) {
    throw UnsupportedOp("nimble cannot replay op " + qualified_name + "." + overload +
                        ": it has no registered C++ schema");
  }
  return *handle;
}

void ProgramBuilder::add_op(const std::string& qualified_name, const std::string& overload,
                            std::vector<c10::IValue> args, std::vector<c10::IValue> returns) {
  const c10::OperatorHandle handle = find_op(qualified_name, overload);
  const c10::FunctionSchema& schema = handle.schema();
  if (args.size() != schema.arguments().size() || returns.size() != schema.returns().size()) {
    std::ostringstream msg;
    msg << "op " << op_name(handle) << " expects " << schema.arguments().size() << " arguments and "
        << schema.returns().size() << " returns, the trace recorded " << args.size() << " and "
        << returns.size();
    throw UnsupportedOp(msg.str());
  }
  for (const c10::IValue& arg : args)
    for_each_tensor(arg, [&](const at::Tensor& t) {
      if (t.defined()) slot_of(t);
    });
  const int index = static_cast<int>(raw_ops_.size());
  for (size_t r = 0; r < returns.size(); ++r) {
    const c10::IValue& value = returns[r];
    const bool tensor_like = value.isTensor() || value.isTensorList() || value.isNone() ||
                             (value.isList() && value.toListRef().empty());
    if (!tensor_like) {
      throw NotStatic("nimble cannot replay op " + op_name(handle) + ": it returns a " +
                      value.tagKind() +
                      " computed while the model runs, which a replay cannot "
                      "reproduce without running Python");
    }
    for_each_tensor(value, [&](const at::Tensor& t) {
      if (t.defined() && !slot_by_impl_.count(t.unsafeGetTensorImpl())) {
        slots_[new_slot(t, SlotRole::kTransient)].producer = index;
      }
    });
  }
  raw_ops_.push_back(RecordedOp{handle, std::move(args), std::move(returns)});
}

void ProgramBuilder::set_outputs(const std::vector<at::Tensor>& outputs) {
  outputs_.clear();
  for (const at::Tensor& t : outputs) outputs_.push_back(slot_of(t));
}

// The stages of `finish`, in the order it runs them (program_builder.h says what each
// guarantees).

std::vector<FoldedBatchNorm> ProgramBuilder::fold_batchnorms() {
  std::vector<FoldedBatchNorm> folds =
      fold_batchnorm(raw_ops_, [&](const at::Tensor& from, const at::Tensor& to) {
        redirect_reads(from, to);
      });
  // Folded weights are new constants; op indices moved, so producers are found anew.
  renumber_rewritten_ops();
  return folds;
}

void ProgramBuilder::lower_for_cpu(const std::vector<FoldedBatchNorm>& folds) {
  const std::set<const void*> outputs = output_storages();
  CpuLoweringCallbacks callbacks;
  callbacks.is_output = [&](const at::Tensor& t) {
    return t.has_storage() && outputs.count(t.storage().unsafeGetStorageImpl()) > 0;
  };
  std::set<const void*> inputs;
  for (int slot : inputs_) inputs.insert(slots_[slot].storage);
  callbacks.is_input = [&](const at::Tensor& t) {
    return t.has_storage() && inputs.count(t.storage().unsafeGetStorageImpl()) > 0;
  };
  callbacks.redirect = [&](const at::Tensor& from, const at::Tensor& to) {
    redirect_reads(from, to);
  };
  if (lower_for_cpu_inference(raw_ops_, folds, callbacks) > 0) renumber_rewritten_ops();
}

void ProgramBuilder::redirect_reads(const at::Tensor& from, const at::Tensor& to) {
  const int old_slot = slot_by_impl_.at(from.unsafeGetTensorImpl());
  const int new_slot = slot_by_impl_.at(to.unsafeGetTensorImpl());
  slot_by_impl_[from.unsafeGetTensorImpl()] = new_slot;
  std::replace(outputs_.begin(), outputs_.end(), old_slot, new_slot);
}

bool ProgramBuilder::on_cpu() const {
  return std::all_of(slots_.begin(), slots_.end(), [](const SlotInfo& slot) {
    return slot.dtype == c10::ScalarType::Undefined || slot.device.is_cpu();
  });
}

void ProgramBuilder::renumber_rewritten_ops() {
  for (SlotInfo& slot : slots_) {
    if (slot.role == SlotRole::kTransient) slot.producer = -1;
  }
  // In trace order: a tensor a pass introduced is produced before it is read.
  for (size_t i = 0; i < raw_ops_.size(); ++i) {
    for (const c10::IValue& arg : raw_ops_[i].args)
      for_each_tensor(arg, [&](const at::Tensor& t) {
        if (t.defined()) slot_of(t);
      });
    for (const c10::IValue& ret : raw_ops_[i].returns)
      for_each_tensor(ret, [&](const at::Tensor& t) {
        if (!t.defined()) return;
        auto known = slot_by_impl_.find(t.unsafeGetTensorImpl());
        SlotInfo& slot = slots_[known != slot_by_impl_.end() ? known->second
                                                             : new_slot(t, SlotRole::kTransient)];
        if (slot.role == SlotRole::kTransient && slot.producer < 0)
          slot.producer = static_cast<int>(i);
      });
  }
}

BuiltProgram ProgramBuilder::start_program() const {
  BuiltProgram built;
  built.program.inputs = inputs_;
  built.program.outputs = outputs_;
  built.program.slots = slots_;
  built.state.values.resize(slots_.size());
  for (size_t s = 0; s < slots_.size(); ++s) {
    if (slots_[s].role != SlotRole::kTransient) built.state.values[s] = capture_values_[s];
  }
  return built;
}

std::set<const void*> ProgramBuilder::output_storages() const {
  std::set<const void*> storages;
  for (int slot : outputs_) storages.insert(slots_[slot].storage);
  return storages;
}

std::vector<bool> ProgramBuilder::drop_noops(const std::set<const void*>& output_storages,
                                             Program& program) {
  std::vector<bool> dropped(raw_ops_.size(), false);
  // An output on the result's storage (the result or a view of it) must not become a
  // view of the source: returned without a copy, it would let the caller write a
  // parameter or an input.
  const auto noops = find_noop_ops(raw_ops_, [&](const at::Tensor& t) {
    return output_storages.count(t.storage().unsafeGetStorageImpl()) > 0;
  });
  for (const NoopOp& noop : noops) {
    const int source = slot_in(slot_by_impl_, noop.source);
    slot_by_impl_[noop.result.unsafeGetTensorImpl()] = source;
    dropped[noop.op] = true;
    // Views of the result are computed on the source from now on: their slots alias the
    // source's storage, for the dependencies and the memory plan alike (else a reader of
    // such a view would not wait for the source's producer, and the view would keep
    // pointing at the source's old memory when the pool moves it).
    const void* result_storage = noop.result.storage().unsafeGetStorageImpl();
    const void* source_storage = program.slots[source].storage;
    for (SlotInfo& slot : program.slots) {
      if (slot.storage == result_storage) slot.storage = source_storage;
    }
  }
  return dropped;
}

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

namespace {

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

namespace {

// Every transient slot that some op reads and that is no program output is released by
// its last reader, and by no other op; returned values nobody reads are not kept at all.
void assign_releases(Program& program) {
  std::vector<int> last_reader(program.slots.size(), -1);
  for (size_t i = 0; i < program.ops.size(); ++i) {
    for (const Arg& arg : program.ops[i].args) {
      if (arg.kind == Arg::Kind::kSlot) last_reader[arg.slot] = static_cast<int>(i);
      for (int slot : arg.slots) {
        if (slot >= 0) last_reader[slot] = static_cast<int>(i);
      }
    }
  }
  std::vector<bool> is_output(program.slots.size(), false);
  for (int slot : program.outputs) is_output[slot] = true;
  for (OpNode& op : program.ops) {
    op.outputs.erase(std::remove_if(op.outputs.begin(), op.outputs.end(),
                                    [&](const OpNode::Output& out) {
                                      return last_reader[out.slot] < 0 && !is_output[out.slot];
                                    }),
                     op.outputs.end());
  }
  for (size_t s = 0; s < program.slots.size(); ++s) {
    if (program.slots[s].is_stable() || is_output[s] || last_reader[s] < 0) continue;
    program.ops[last_reader[s]].release.push_back(static_cast<int>(s));
  }
}

// The program's dependency edges (program/dependencies.h) over capture-time storages:
// slots on one storage may alias. Seeded random ops share the generator, a storage of its
// own that each of them writes, so they keep their trace order.
std::vector<std::pair<int, int>> compute_dependencies(const Program& program) {
  constexpr int kGenerator = -1;
  std::map<const void*, int> id_of;
  auto storage_id = [&](int slot) {
    return id_of.emplace(program.slots[slot].storage, static_cast<int>(id_of.size())).first->second;
  };
  std::vector<StorageAccess> accesses(program.ops.size());
  for (size_t i = 0; i < program.ops.size(); ++i) {
    const OpNode& node = program.ops[i];
    for (int slot : node.reads) accesses[i].reads.push_back(storage_id(slot));
    for (int slot : node.writes) accesses[i].writes.push_back(storage_id(slot));
    if (node.handle.hasTag(at::Tag::nondeterministic_seeded))
      accesses[i].writes.push_back(kGenerator);
  }
  return dependency_edges(accesses);
}

// `output_reuses_storage` has one entry per output, true where the output lives on
// storage the next replay writes again; `mutated_inputs` lists the inputs whose storage
// the trace writes in place (directly or through a view), which must be copied back to
// the caller. A view an op returns writes nothing: an input that is only viewed is not
// copied back (a copy into an expanded caller tensor would even fail).
void classify_inputs_and_outputs(Program& program) {
  auto storage_of = [&](int slot) { return program.slots[slot].storage; };
  std::set<const void*> written;
  for (size_t s = 0; s < program.slots.size(); ++s) {
    if (program.slots[s].mutated) written.insert(storage_of(static_cast<int>(s)));
  }
  std::set<const void*> stable_storage;
  for (size_t s = 0; s < program.slots.size(); ++s) {
    if (program.slots[s].is_stable()) stable_storage.insert(storage_of(static_cast<int>(s)));
  }
  for (int slot : program.outputs) {
    program.output_reuses_storage.push_back(stable_storage.count(storage_of(slot)) > 0);
  }
  for (size_t i = 0; i < program.inputs.size(); ++i) {
    if (written.count(storage_of(program.inputs[i])))
      program.mutated_inputs.push_back(static_cast<int>(i));
  }
}

// `.out` buffers whose lifetimes cannot overlap in any schedule the dependencies allow
// share storage (passes/memory_plan.h); with `share` false, only measured.
void plan_memory(Program& program, std::vector<c10::IValue>& values, bool share) {
  const MemoryPlan plan = plan_buffer_memory(program, values, share);
  program.buffer_bytes_unplanned = plan.buffer_bytes_before;
  program.buffer_bytes = plan.buffer_bytes_after;
}

}  // namespace

BuiltProgram ProgramBuilder::finish(const BuildOptions& options) {
  std::vector<FoldedBatchNorm> folds;
  const bool lower_cpu = options.lower_for_cpu && on_cpu();
  if (options.fold_batchnorm || lower_cpu) folds = fold_batchnorms();
  if (lower_cpu) lower_for_cpu(folds);
  BuiltProgram built = start_program();
  built.state.folds = std::move(folds);
  Program& program = built.program;
  const std::set<const void*> outputs = output_storages();
  const std::vector<bool> dropped = options.drop_noop_ops
                                        ? drop_noops(outputs, program)
                                        : std::vector<bool>(raw_ops_.size(), false);
  const std::unordered_set<int> metadata_changed = metadata_changed_slots();

  // What runs at prepare (precomputed views, buffers, shared storages) runs as a replay's
  // ops do: below autograd, outside any Python mode.
  c10::impl::ExcludeDispatchKeyGuard no_python(c10::DispatchKey::Python);
  at::AutoDispatchBelowADInplaceOrView below_autograd;
  lower_ops(built, dropped, metadata_changed, outputs, options);
  assign_releases(program);
  program.dependencies = compute_dependencies(program);
  classify_inputs_and_outputs(program);
  plan_memory(program, built.state.values, options.plan_memory);
  built.state.ops.resize(program.ops.size());
  return built;
}

}  // namespace nimble

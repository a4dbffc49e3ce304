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
#include "csrc/program/dependencies.h"
#include "csrc/program/memory_plan.h"
#include "csrc/program/recorded_values.h"

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

// Recording: slots for the tensors the trace holds, the ops as recorded.

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
    // A SymInt return is a size (flash and cuDNN attention return their max sequence
    // lengths): it comes from shapes, which a static model keeps, and a replay ignores it.
    const bool size =
        value.isInt() && schema.returns()[r].real_type()->kind() == c10::TypeKind::SymIntType;
    if (!tensor_like && !size) {
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
  raw_ops_.push_back(RecordedOp{handle, std::move(args), std::move(returns), index});
}

void ProgramBuilder::set_outputs(const std::vector<at::Tensor>& outputs) {
  outputs_.clear();
  for (const at::Tensor& t : outputs) outputs_.push_back(slot_of(t));
}

// The pass interface (passes/trace_passes.h).

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

std::set<const void*> ProgramBuilder::output_storages() const {
  std::set<const void*> storages;
  for (int slot : outputs_) storages.insert(slots_[slot].storage);
  return storages;
}

std::set<const void*> ProgramBuilder::input_storages() const {
  std::set<const void*> storages;
  for (int slot : inputs_) storages.insert(slots_[slot].storage);
  return storages;
}

// Building: the stages of `finish`, in the order it runs them (program_builder.h says what
// each guarantees; the lowering of recorded ops into program ops is in op_lowering.cpp).

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

std::vector<bool> ProgramBuilder::drop_noops(const std::vector<NoopOp>& noops, Program& program) {
  std::vector<bool> dropped(raw_ops_.size(), false);
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

std::vector<OpEpilogue> ProgramBuilder::place_epilogues(const std::vector<TraceEpilogue>& found,
                                                        const Program& program) const {
  std::vector<OpEpilogue> placed;
  for (const TraceEpilogue& e : found) {
    OpEpilogue op;
    op.op = program.op_of_traced[e.op];
    op.epilogue = e.epilogue;
    op.takes_over_result = e.takes_over_result;
    for (int absorbed : e.absorbed) op.absorbed.push_back(program.op_of_traced[absorbed]);
    if (op.op < 0 || std::count(op.absorbed.begin(), op.absorbed.end(), -1) > 0) continue;
    if (e.epilogue.residual) op.residual_slot = slot_in(slot_by_impl_, e.residual);
    placed.push_back(std::move(op));
  }
  return placed;
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
// share storage (program/memory_plan.h); with `share` false, only measured.
void plan_memory(Program& program, std::vector<c10::IValue>& values, bool share) {
  const MemoryPlan plan = plan_buffer_memory(program, values, share);
  program.buffer_bytes_unplanned = plan.buffer_bytes_before;
  program.buffer_bytes = plan.buffer_bytes_after;
}

}  // namespace

BuiltProgram ProgramBuilder::finish(const BuildOptions& options, TracePassResults passes) {
  BuiltProgram built = start_program();
  built.state.folds = std::move(passes.folds);
  Program& program = built.program;
  const std::set<const void*> outputs = output_storages();
  const std::vector<bool> dropped = drop_noops(passes.noops, program);
  const std::unordered_set<int> metadata_changed = metadata_changed_slots();

  // What runs at prepare (precomputed views, buffers, shared storages) runs as a replay's
  // ops do: below autograd, outside any Python mode.
  c10::impl::ExcludeDispatchKeyGuard no_python(c10::DispatchKey::Python);
  at::AutoDispatchBelowADInplaceOrView below_autograd;
  lower_ops(built, dropped, metadata_changed, outputs, options);
  program.epilogues = place_epilogues(passes.slot_epilogues, program);
  assign_releases(program);
  program.dependencies = compute_dependencies(program);
  classify_inputs_and_outputs(program);
  plan_memory(program, built.state.values, options.plan_memory);
  built.state.ops.resize(program.ops.size());
  return built;
}

}  // namespace nimble

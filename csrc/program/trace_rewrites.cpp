// The stages of ProgramBuilder::finish that rewrite the recorded trace before it is lowered
// (program_builder.h): batch norms folded, convolutions lowered for the CPU, no-op copies
// dropped; readers of what they removed read what replaces it.
#include <ATen/core/Tensor.h>

#include <algorithm>
#include <set>
#include <vector>

#include "csrc/passes/batchnorm_folding.h"
#include "csrc/passes/cpu_lowering.h"
#include "csrc/passes/noop_elimination.h"
#include "csrc/program/program_builder.h"
#include "csrc/program/recorded_values.h"

namespace nimble {

std::vector<FoldedBatchNorm> ProgramBuilder::fold_batchnorms(const std::set<int>& keep_aten) {
  const std::set<const void*> outputs = output_storages();
  std::vector<FoldedBatchNorm> folds = fold_batchnorm(
      raw_ops_, [&](const at::Tensor& from, const at::Tensor& to) { redirect_reads(from, to); },
      [&](const at::Tensor& t) {
        return t.has_storage() && outputs.count(t.storage().unsafeGetStorageImpl()) > 0;
      },
      [&](const RecordedOp& op) { return keep_aten.count(op.trace_position) > 0; });
  // Folded weights are new constants; op indices moved, so producers are found anew.
  renumber_rewritten_ops();
  return folds;
}

void ProgramBuilder::lower_for_cpu(const std::vector<FoldedBatchNorm>& folds,
                                   const BuildOptions& options) {
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
  callbacks.tuned = &options.tuned_convolutions;
  callbacks.keep_aten = &options.keep_aten_ops;
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

}  // namespace nimble

#include "csrc/passes/trace_passes.h"

#include <ATen/core/Tensor.h>

#include <set>
#include <utility>
#include <vector>

#include "csrc/passes/batchnorm_folding.h"
#include "csrc/passes/cpu_lowering.h"
#include "csrc/passes/noop_elimination.h"
#include "csrc/passes/slot_epilogues.h"

namespace nimble {
namespace {

bool on_storage(const std::set<const void*>& storages, const at::Tensor& t) {
  return t.has_storage() && storages.count(t.storage().unsafeGetStorageImpl()) > 0;
}

// Eval-mode batch norms after convolutions are gone from the recorded ops; readers of their
// outputs read the convolutions' outputs; producers match the remaining ops.
std::vector<FoldedBatchNorm> fold_batchnorms(ProgramBuilder& builder,
                                             const std::set<int>& keep_aten) {
  const std::set<const void*> outputs = builder.output_storages();
  std::vector<FoldedBatchNorm> folds = fold_batchnorm(
      builder.recorded_ops(),
      [&](const at::Tensor& from, const at::Tensor& to) { builder.redirect_reads(from, to); },
      [&](const at::Tensor& t) { return on_storage(outputs, t); },
      [&](const RecordedOp& op) { return keep_aten.count(op.trace_position) > 0; });
  // Folded weights are new constants; op indices moved, so producers are found anew.
  builder.renumber_rewritten_ops();
  return folds;
}

// Convolutions and linear layers of a CPU program are prepacked oneDNN calls.
void lower_for_cpu(ProgramBuilder& builder, const std::vector<FoldedBatchNorm>& folds,
                   const BuildOptions& options) {
  const std::set<const void*> outputs = builder.output_storages();
  const std::set<const void*> inputs = builder.input_storages();
  CpuLoweringCallbacks callbacks;
  callbacks.is_output = [&](const at::Tensor& t) { return on_storage(outputs, t); };
  callbacks.is_input = [&](const at::Tensor& t) { return on_storage(inputs, t); };
  callbacks.redirect = [&](const at::Tensor& from, const at::Tensor& to) {
    builder.redirect_reads(from, to);
  };
  callbacks.tuned = &options.tuned_convolutions;
  callbacks.keep_aten = &options.keep_aten_ops;
  if (lower_for_cpu_inference(builder.recorded_ops(), folds, callbacks) > 0)
    builder.renumber_rewritten_ops();
}

}  // namespace

TracePassResults run_trace_passes(ProgramBuilder& builder, const BuildOptions& options) {
  TracePassResults results;
  const bool lower_cpu = options.lower_for_cpu && builder.on_cpu();
  if (options.fold_batchnorm || lower_cpu)
    results.folds = fold_batchnorms(builder, options.keep_aten_ops);
  if (lower_cpu) lower_for_cpu(builder, results.folds, options);
  const std::set<const void*> outputs = builder.output_storages();
  const auto is_output = [&](const at::Tensor& t) { return on_storage(outputs, t); };
  // An output on the result's storage (the result or a view of it) must not become a view of
  // the source: returned without a copy, it would let the caller write a parameter or an input.
  if (options.drop_noop_ops) results.noops = find_noop_ops(builder.recorded_ops(), is_output);
  results.slot_epilogues = find_slot_epilogues(builder.recorded_ops(), results.noops, is_output);
  return results;
}

}  // namespace nimble

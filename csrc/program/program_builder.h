#pragma once
// Turns a captured op trace into a replayable Program.
//
// The capture glue feeds the builder the tensors that live across replays (inputs,
// parameters, buffers), then every op the trace recorded with its full argument list
// (schema order) and its returned values, then the flattened outputs. Tensors are
// identified by their TensorImpl, so the capture must keep every tensor it recorded
// alive until `finish`.
#include <ATen/core/Tensor.h>

#include <string>
#include <unordered_map>
#include <vector>

#include "program/program.h"
#include "program/recorded_op.h"

namespace nimble {

struct BuildOptions {
  // Rewrite functional ops to their `.out` overload into preallocated buffers.
  bool use_out_variants = true;
  // Only ops whose results are at most this many bytes get `.out` buffers (0: any size).
  // Buffers stay allocated between replays; larger results are better allocated and
  // freed as eager does, which keeps the replay's peak memory at eager's.
  int64_t out_variant_max_bytes = 0;
  // Compute views of stable tensors once, at prepare.
  bool precompute_views = true;
  // Fold eval-mode batch norms into the convolutions before them.
  bool fold_batchnorm = false;
  // Let `.out` buffers whose lifetimes cannot overlap share storage.
  bool plan_memory = true;
  // Drop copies and aliases readers cannot tell from their input (noop_elimination.h).
  bool drop_noop_ops = true;
};

// The dispatcher's handle for an op overload; std::invalid_argument naming it if none.
c10::OperatorHandle find_op(const std::string& qualified_name, const std::string& overload);

class ProgramBuilder {
 public:
  int add_input(const at::Tensor& tensor);
  void add_state(const at::Tensor& tensor);
  // `qualified_name` like "aten::add", `overload` like "Tensor" ("" for the default).
  void add_op(const std::string& qualified_name, const std::string& overload,
              std::vector<c10::IValue> args, std::vector<c10::IValue> returns);
  void set_outputs(const std::vector<at::Tensor>& outputs);
  Program finish(const BuildOptions& options);

 private:
  // Known slot, the slot of an identical alias (same storage, offset, sizes, strides and
  // dtype: autograd hands saved tensors back in new tensor objects), or a new constant.
  int slot_of(const at::Tensor& tensor);
  int new_slot(const at::Tensor& tensor, SlotRole role);

  std::vector<RecordedOp> raw_ops_;
  std::vector<SlotInfo> slots_;
  std::vector<c10::IValue> capture_values_;  // the tensor each slot held at capture
  std::unordered_map<const c10::TensorImpl*, int> slot_by_impl_;
  std::vector<int> inputs_;
  std::vector<int> outputs_;
};

}  // namespace nimble

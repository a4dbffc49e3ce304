#pragma once
// Turns a captured op trace into a replayable Program.
//
// The capture glue feeds the builder the tensors that live across replays (inputs,
// parameters, buffers), then every op the trace recorded with its full argument list
// (schema order) and its returned values, then the flattened outputs. Tensors are
// identified by their TensorImpl, so the capture must keep every tensor it recorded
// alive until `finish`.
//
// Between the two, the pass stage (passes/trace_passes.h) rewrites the recorded ops through
// the builder's pass interface below; `finish` builds the program from what it left.
#include <ATen/core/Tensor.h>

#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "csrc/program/build_options.h"
#include "csrc/program/folded_batchnorm.h"
#include "csrc/program/program.h"
#include "csrc/program/program_state.h"
#include "csrc/program/recorded_op.h"
#include "csrc/program/trace_pass_results.h"

namespace nimble {

// The dispatcher's handle for an op overload; UnsupportedOp (errors.h) naming it if none.
c10::OperatorHandle find_op(const std::string& qualified_name, const std::string& overload);

class ProgramBuilder {
 public:
  int add_input(const at::Tensor& tensor);
  void add_state(const at::Tensor& tensor);
  // `qualified_name` like "aten::add", `overload` like "Tensor" ("" for the default).
  // UnsupportedOp for an op without a C++ schema, NotStatic for one returning a number.
  void add_op(const std::string& qualified_name, const std::string& overload,
              std::vector<c10::IValue> args, std::vector<c10::IValue> returns);
  void set_outputs(const std::vector<at::Tensor>& outputs);

  // The pass interface: what the pass stage reads and rewrites between recording and `finish`.
  // The recorded ops, in trace order.
  std::vector<RecordedOp>& recorded_ops() { return raw_ops_; }
  // Whether every tensor the trace holds lives on the CPU.
  bool on_cpu() const;
  // The storages program outputs live on, and those of program inputs.
  std::set<const void*> output_storages() const;
  std::set<const void*> input_storages() const;
  // Readers of `from` read `to` (its slot), program outputs included.
  void redirect_reads(const at::Tensor& from, const at::Tensor& to);
  // After a pass rewrote the recorded ops: tensors they introduced have slots (results as
  // transients), and transient slots name the op that now produces them.
  void renumber_rewritten_ops();

  // The program of the recorded ops as the pass stage left them; `passes` is what it found.
  BuiltProgram finish(const BuildOptions& options, TracePassResults passes = {});

 private:
  // Known slot, the slot of an identical alias (same storage, offset, sizes, strides and
  // dtype: autograd hands saved tensors back in new tensor objects), or a new constant.
  int slot_of(const at::Tensor& tensor);
  int new_slot(const at::Tensor& tensor, SlotRole role);

  // The stages of `finish`, in the order it runs them (the lowering of recorded ops is
  // defined in op_lowering.cpp).
  // The program's slots, inputs and outputs as recorded; every stable slot holds its
  // capture-time tensor; no ops yet.
  BuiltProgram start_program() const;
  // Per recorded op, whether it is dropped as a no-op (`noops`, found by the pass stage);
  // readers of a dropped op's result read its source instead, and slots on its storage (views
  // of it) count as on the source's.
  std::vector<bool> drop_noops(const std::vector<NoopOp>& noops, Program& program);
  // Slots whose sizes, strides or storage some op changes in place; UnsupportedOp if one is an
  // input, state or constant, which a replay would change again on every call.
  std::unordered_set<int> metadata_changed_slots() const;
  // Each kept recorded op becomes, in trace order, a precomputed view (kView slots, values
  // set), a buffer made now (a kBuffer slot), or an op of the program (into `.out`
  // buffers where that is allowed); `op_of_traced` maps recorded ops to program ops and
  // slots written in place are marked `mutated`.
  void lower_ops(BuiltProgram& built, const std::vector<bool>& dropped,
                 const std::unordered_set<int>& metadata_changed,
                 const std::set<const void*>& output_storages, const BuildOptions& options) const;
  // The pass stage's epilogues in program ops and slots; none whose ops the program left out.
  std::vector<OpEpilogue> place_epilogues(const std::vector<TraceEpilogue>& found,
                                          const Program& program) const;

  std::vector<RecordedOp> raw_ops_;
  std::vector<SlotInfo> slots_;
  std::vector<c10::IValue> capture_values_;  // the tensor each slot held at capture
  std::unordered_map<const c10::TensorImpl*, int> slot_by_impl_;
  std::vector<int> inputs_;
  std::vector<int> outputs_;
};

}  // namespace nimble

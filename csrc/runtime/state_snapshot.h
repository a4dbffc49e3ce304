#pragma once
// What a graph backend's warm-up and recording must leave as they found it. A CUDA graph
// executor runs its program once before capture (library handles, lazily made state), and
// the CPU twin of the graph also runs it to record it: without a snapshot, building such an
// executor would apply an optimizer step, move batch-norm running statistics, write the
// inputs the trace mutates and advance the random generators. The snapshot holds a copy of
// every tensor that outlives a replay (parameters, buffers, optimizer state, inputs,
// constants) and that some op writes, declared or not (`native_batch_norm` updates its
// running statistics without an alias annotation), and the states of the generators the
// program draws from (the default ones, and those passed to ops as arguments); `restore` puts
// everything back in place (same tensors, same storages). What no op writes is not copied: an
// inference program's weights are not.
#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

#include <utility>
#include <vector>

#include "csrc/program/program.h"
#include "csrc/program/program_state.h"

namespace nimble {

// The generators passed to ops of `program` as arguments, each once, in op order.
std::vector<at::Generator> explicit_generators(const Program& program);

class StateSnapshot {
 public:
  // Copies, from `state`, the input, state and constant tensors that ops of `program`
  // write, and the states of the default generators of the CPU and of the program's device
  // and of the generators the program's ops are given (`torch.randn(..., generator=g)`).
  StateSnapshot(const Program& program, const ProgramState& state);

  // Writes the copies back (into the same tensors) and the generators' states.
  void restore();

  int num_tensors() const { return static_cast<int>(tensors_.size()); }
  int num_generators() const { return static_cast<int>(generators_.size()); }

 private:
  std::vector<std::pair<at::Tensor, at::Tensor>> tensors_;  // (live tensor, its copy)
  std::vector<std::pair<at::Generator, at::Tensor>> generators_;
};

}  // namespace nimble

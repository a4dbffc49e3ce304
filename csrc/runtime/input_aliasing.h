#pragma once
// The capture ran on inputs of its own, apart from each other and from the model's
// parameters and buffers. A call whose tensors overlap in memory replays like eager only
// where no write can show through the overlap; this refuses, before anything runs, a
// call where
//   - an input the trace writes overlaps another input that the trace reads after that
//     write begins (or returns, or writes too); inputs are then copied apart, so the
//     other one would keep the value eager no longer has. An overlap read only before
//     the first write, or within the writing op as the very same view (`x.add_(y)` with
//     y = x), reads what eager reads and replays;
//   - an input the trace writes overlaps itself (an expanded tensor: eager refuses the
//     write too);
//   - an input overlaps a parameter or buffer and the trace writes either of them (the
//     stream schedule orders ops by the capture's storages, where those were apart);
//   - an input whose strides differ from the prepared ones is written in place, or is
//     copied and the copy written: eager's layout-dependent ops (`contiguous()`,
//     `reshape`) return the input itself for one layout and a copy for another, so on the
//     call's layout eager might write a copy where the trace writes the input, or the
//     input where the trace writes a copy.
// Inputs that only share memory for reading are fine: they read the same values as eager.
#include <ATen/core/Tensor.h>

#include <vector>

#include "csrc/program/program.h"
#include "csrc/program/program_state.h"

namespace nimble {

class InputAliasing {
 public:
  explicit InputAliasing(const Program& program);

  // Throws BadInput (errors.h) naming the tensors. Costs a few pointer compares per
  // written input or written state; nothing for programs that write neither.
  void check(const Program& program, const ProgramState& state,
             const std::vector<at::Tensor>& inputs) const;

 private:
  struct InputUse {
    int first_write = -1;  // index of the first op writing the input's storage; -1: none
    int last_use = -1;     // index of the last op touching it; ops.size(): an output
  };
  std::vector<InputUse> uses_;       // per input
  std::vector<int> written_inputs_;  // positions in `inputs`
  std::vector<int> layout_bound_;    // inputs whose strides must stay those of prepare
  std::vector<int> states_;          // state slots
  std::vector<int> written_states_;  // state slots the trace writes
};

}  // namespace nimble

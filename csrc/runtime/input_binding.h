#pragma once
// Lets a CPU replay read the caller's input tensors in place instead of copying them
// into the program's input buffers: for one replay, the buffers' TensorImpls (and the
// views computed from them at prepare) point at the caller's storage; afterwards they
// point back at their own. An in-place write of the model then lands in the caller's
// tensor directly, as in eager. Inputs whose layout differs from the prepared one, that
// share storage with another input or lie on an input buffer, or that an output
// aliases, are copied as before.
#include <ATen/core/Tensor.h>

#include <utility>
#include <vector>

#include "csrc/program/program.h"
#include "csrc/program/program_state.h"

namespace nimble {

class InputBinding {
 public:
  InputBinding(const Program& program, const ProgramState& state, bool enabled);

  class Scope {
   public:
    Scope() = default;
    Scope(Scope&& other) noexcept
        : restore_(std::move(other.restore_)), bound_(std::move(other.bound_)) {
      other.restore_.clear();
    }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;
    Scope& operator=(Scope&&) = delete;
    ~Scope();
    bool bound(size_t input) const { return input < bound_.size() && bound_[input]; }

   private:
    friend class InputBinding;
    std::vector<std::pair<c10::TensorImpl*, c10::Storage>> restore_;
    std::vector<bool> bound_;
  };

  Scope bind(const Program& program, const ProgramState& state,
             const std::vector<at::Tensor>& inputs) const;

 private:
  std::vector<bool> eligible_;           // per input
  std::vector<std::vector<int>> views_;  // per input: stable views of its buffer
};

}  // namespace nimble

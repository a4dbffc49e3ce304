#pragma once
// What the two families of the kernels the CPU lowering runs (prepacked_family.cpp for
// convolutions, prepacked_linear_family.cpp for linear layers) share: CPU float32 ops of one
// kind, the knobs `kernel` (the names the op has), `threads`, then nimble's kernel parameters,
// each parameter knob's first value (0, "rule") the kernel's own rule. The kernels that have
// no parameters (oneDNN, Winograd, ATen) run only with all of them there, so their configs
// differing only in parameters are one, and the lowering's untuned choice (the rule's kernel
// on every thread, the rule's parameters) is one config: where tuning starts.
#include <optional>
#include <string>
#include <vector>

#include "csrc/kernels/kernel_family.h"

namespace nimble::kernels {

class PrepackedFamilyBase : public KernelFamily {
 public:
  PrepackedFamilyBase(std::string name, TunableOp::Kind kind)
      : name_(std::move(name)), kind_(kind) {}

  std::string name() const final { return name_; }
  bool supports(const TunableOp& op) const final;
  bool fuses_epilogue() const final { return true; }
  std::vector<tuning::Knob> knobs(const TunableOp& op) const final;
  std::vector<KnobRule> rules(const TunableOp& op) const final;
  std::vector<int> default_choices(const TunableOp& op) const final;

 protected:
  // The op's kernels, in the `kernel` knob's order.
  virtual std::vector<std::string> kernel_names(const TunableOp& op) const = 0;
  // Which of them take none of the parameter knobs.
  virtual bool takes_no_parameters(const std::string& kernel) const = 0;
  // The knobs of nimble's kernels' parameters for the op, in order after kernel and threads.
  virtual std::vector<tuning::Knob> parameter_knobs(const TunableOp& op) const = 0;
  // The kernel the lowering's rule runs the op on; none where it does not lower it.
  virtual std::optional<std::string> rule_kernel(const TunableOp& op) const = 0;

 private:
  std::string name_;
  TunableOp::Kind kind_;
};

}  // namespace nimble::kernels

#pragma once
// The tuning space of one tunable op over every family that supports it: a categorical knob
// "family", then each family's knobs named "<family>.<knob>", active only under their family
// (conditional knobs), so that one task covers every way to compute the op and the tuner's
// model latency counts the op once.
#include <memory>
#include <string>

#include "csrc/kernels/kernel_family.h"

namespace nimble::kernels {

class KernelSpace {
 public:
  KernelSpace(TunableOp op, const Families& families);
  bool empty() const { return families_.empty(); }
  const TunableOp& op() const { return op_; }
  const tuning::KnobSpace& knobs() const { return knobs_; }
  const KernelFamily& family(const tuning::Config& config) const;
  // The config of the first family with default_choices (what runs untuned); empty: none.
  tuning::Config default_config() const;
  // Throws when the family cannot build the config.
  std::unique_ptr<TunedKernel> build(const tuning::Config& config) const;
  // "family=im2col_gemm im2col_gemm.tile=256 ...": the active knobs.
  std::string describe(const tuning::Config& config) const { return knobs_.describe(config); }

 private:
  TunableOp op_;
  Families families_;  // those supporting op_, in the "family" knob's order
  tuning::KnobSpace knobs_;
};

}  // namespace nimble::kernels

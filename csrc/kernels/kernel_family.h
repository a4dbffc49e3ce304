#pragma once
// A kernel family: a way to compute one kind of op with knobs to tune (an algorithm among
// PyTorch's own backends, or one of nimble's kernel templates). The tuner sees a family only
// through its knobs; the slot only through the kernels it builds. CUDA families plug in beside
// the CPU ones by supporting ops whose device is CUDA.
#include <ATen/core/Tensor.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "csrc/kernels/tunable_op.h"
#include "tuning/space/config.h"
#include "tuning/space/knob.h"
#include "tuning/space/knob_space.h"

namespace nimble::kernels {

// One configured kernel for one tunable op. `run` takes the op's operands (TunableOp's order)
// and returns what ATen would: same sizes, strides, dtype and device. A kernel may cache data
// derived from its operands (packed weights) and must notice when they change (version
// counters); it is never run concurrently with itself.
class TunedKernel {
 public:
  virtual ~TunedKernel() = default;
  virtual at::Tensor run(at::TensorList operands) const = 0;
};

// The values a config gives one family's knobs, by the family's own knob names.
class KnobValues {
 public:
  KnobValues(const tuning::KnobSpace& space, const tuning::Config& config, std::string prefix)
      : space_(space), config_(config), prefix_(std::move(prefix)) {}
  int64_t value(const std::string& name) const {
    const int i = space_.knob_index(prefix_ + name);
    return space_.knobs()[i].value(config_.at(i));
  }
  std::string label(const std::string& name) const {
    const int i = space_.knob_index(prefix_ + name);
    return space_.knobs()[i].label(config_.at(i));
  }

 private:
  const tuning::KnobSpace& space_;
  const tuning::Config& config_;
  std::string prefix_;
};

// A rule a config of one family's knobs must follow to be in an op's space (a kernel that
// could not launch, say): `holds` sees the family's knob values in knobs(op)'s order.
struct KnobRule {
  std::string description;
  std::function<bool(const std::vector<int64_t>& values)> holds;
};

class KernelFamily {
 public:
  virtual ~KernelFamily() = default;
  virtual std::string name() const = 0;
  virtual bool supports(const TunableOp& op) const = 0;
  // Whether its kernels apply the op's epilogue themselves (before storing a result); else
  // the epilogue runs as a separate pass after the kernel.
  virtual bool fuses_epilogue() const { return false; }
  // The family's knobs for `op` (names without the family prefix; at least one value each).
  virtual std::vector<tuning::Knob> knobs(const TunableOp& op) const = 0;
  virtual std::vector<KnobRule> rules(const TunableOp&) const { return {}; }
  // The choice of each of knobs(op) (indices, in its order) that is what runs where nothing is
  // tuned (the CPU lowering's rule), where this family has it; empty: none. Tuning starts there
  // (KernelSpace::default_config), so that it never starts below the default.
  virtual std::vector<int> default_choices(const TunableOp&) const { return {}; }
  // Throws (a failed compile, an unsupported combination) rather than return a wrong kernel.
  virtual std::unique_ptr<TunedKernel> build(const TunableOp& op,
                                             const KnobValues& knobs) const = 0;
};

using Families = std::vector<std::shared_ptr<const KernelFamily>>;

// The families nimble has for ops on the CPU (csrc/kernels/cpu/).
Families cpu_families();
// The families for ops on a CUDA GPU (csrc/kernels/cuda/), in a build with CUDA, else none.
// Their compiled kernels are cached in `cubin_directory` (none when empty).
Families cuda_families(const std::string& cubin_directory);
// Where CUDA families cache compiled kernels for the tuning database at `database`: beside it,
// "<database>.cubins".
std::string cubin_directory_for(const std::string& database);
// Every family nimble has, for any device.
Families all_families(const std::string& cubin_directory = "");

}  // namespace nimble::kernels

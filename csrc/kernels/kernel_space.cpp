#include "csrc/kernels/kernel_space.h"

#include <stdexcept>

#include "csrc/kernels/aten_epilogue.h"

namespace nimble::kernels {
namespace {

// A family's kernel for the bare convolution, then the epilogue as a pass of its own.
class EpilogueAfter : public TunedKernel {
 public:
  EpilogueAfter(Epilogue epilogue, std::unique_ptr<TunedKernel> kernel)
      : epilogue_(epilogue), kernel_(std::move(kernel)) {}
  at::Tensor run(at::TensorList operands) const override {
    const size_t bare = operands.size() - (epilogue_.residual ? 1 : 0);
    at::Tensor y = kernel_->run(operands.slice(0, bare));
    apply_in_place(epilogue_, y, epilogue_.residual ? &operands.back() : nullptr);
    return y;
  }

 private:
  Epilogue epilogue_;
  std::unique_ptr<TunedKernel> kernel_;
};

}  // namespace

KernelSpace::KernelSpace(TunableOp op, const Families& families) : op_(std::move(op)) {
  std::vector<std::string> names;
  for (const auto& f : families) {
    if (!f->supports(op_)) continue;
    families_.push_back(f);
    names.push_back(f->name());
  }
  if (families_.empty()) return;
  knobs_.add_knob(tuning::Knob::categorical("family", names));
  for (size_t index = 0; index < families_.size(); ++index) {
    const KernelFamily& f = *families_[index];
    const size_t first = knobs_.knobs().size();
    const auto own = f.knobs(op_);
    for (const tuning::Knob& knob : own) {
      const std::string name = f.name() + "." + knob.name();
      knobs_.add_knob(knob.renamed(name));
      knobs_.add_condition(name, "family", {f.name()});
    }
    for (const KnobRule& rule : f.rules(op_)) {
      const auto family = static_cast<int64_t>(index);
      knobs_.add_constraint(
          f.name() + ": " + rule.description,
          [family, first, count = own.size(), holds = rule.holds](const std::vector<int64_t>& v) {
            if (v[0] != family) return true;
            return holds(std::vector<int64_t>(v.begin() + first, v.begin() + first + count));
          });
    }
  }
}

const KernelFamily& KernelSpace::family(const tuning::Config& config) const {
  if (families_.empty() || config.empty() || config[0] < 0 ||
      config[0] >= static_cast<int>(families_.size()))
    throw std::invalid_argument("config " + tuning::config_to_json(config) +
                                " names no kernel family of this op");
  return *families_[config[0]];
}

tuning::Config KernelSpace::default_config() const {
  for (size_t index = 0; index < families_.size(); ++index) {
    const std::vector<int> own = families_[index]->default_choices(op_);
    if (own.empty()) continue;
    tuning::Config config(knobs_.knobs().size(), 0);
    config[0] = static_cast<int>(index);
    const int first = knobs_.knob_index(families_[index]->name() + "." +
                                        families_[index]->knobs(op_).at(0).name());
    for (size_t i = 0; i < own.size(); ++i) config[first + i] = own[i];
    if (knobs_.valid(config)) return config;
  }
  return {};
}

std::unique_ptr<TunedKernel> KernelSpace::build(const tuning::Config& config) const {
  if (!knobs_.valid(config))
    throw std::invalid_argument("config " + tuning::config_to_json(config) +
                                " is not a valid config of this op's kernel space");
  const KernelFamily& f = family(config);
  const KnobValues values(knobs_, config, f.name() + ".");
  if (op_.epilogue.empty() || f.fuses_epilogue()) return f.build(op_, values);
  return std::make_unique<EpilogueAfter>(op_.epilogue, f.build(op_.without_epilogue(), values));
}

}  // namespace nimble::kernels

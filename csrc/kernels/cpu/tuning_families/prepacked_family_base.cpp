#include "csrc/kernels/cpu/tuning_families/prepacked_family_base.h"

#include <algorithm>

#include "csrc/kernels/cpu/tuning_families/cpu_kernel_support.h"

namespace nimble::kernels {

bool PrepackedFamilyBase::supports(const TunableOp& op) const {
  return op.device == c10::DeviceType::CPU && op.kind == kind_ &&
         op.dtype == c10::ScalarType::Float;
}

std::vector<tuning::Knob> PrepackedFamilyBase::knobs(const TunableOp& op) const {
  std::vector<tuning::Knob> out = {tuning::Knob::categorical("kernel", kernel_names(op)),
                                   threads_knob()};
  for (tuning::Knob& knob : parameter_knobs(op)) out.push_back(std::move(knob));
  return out;
}

std::vector<KnobRule> PrepackedFamilyBase::rules(const TunableOp& op) const {
  const std::vector<std::string> names = kernel_names(op);
  std::vector<KnobRule> out;
  for (size_t index = 0; index < names.size(); ++index) {
    if (!takes_no_parameters(names[index])) continue;
    const auto kernel = static_cast<int64_t>(index);
    out.push_back(
        {names[index] + " takes no kernel parameters", [kernel](const std::vector<int64_t>& v) {
           return v[0] != kernel ||
                  std::all_of(v.begin() + 2, v.end(), [](int64_t x) { return x == 0; });
         }});
  }
  return out;
}

std::vector<int> PrepackedFamilyBase::default_choices(const TunableOp& op) const {
  const std::optional<std::string> rule = rule_kernel(op);
  if (!rule) return {};
  const std::vector<std::string> names = kernel_names(op);
  const auto found = std::find(names.begin(), names.end(), *rule);
  if (found == names.end()) return {};
  std::vector<int> out(knobs(op).size(), 0);
  out[0] = static_cast<int>(found - names.begin());
  out[1] = threads_knob().size() - 1;
  return out;
}

}  // namespace nimble::kernels

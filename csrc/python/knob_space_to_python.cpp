// A knob space laid out as a trace file holds it (nimble/tuning/trace.py): knobs with their
// kinds, values and conditions, and every valid configuration.
#include <pybind11/stl.h>

#include "csrc/python/bindings.h"

namespace py = pybind11;

namespace nimble::python {
namespace {

using tuning::Config;
using tuning::Knob;
using tuning::KnobSpace;

// The categorical knob before `k` whose choices switch it on and off, and those choices; none
// when `k` is always active. Read through active(), the only view KnobSpace gives of it.
std::pair<int, std::vector<std::string>> condition_of(const KnobSpace& space, int k) {
  const auto& knobs = space.knobs();
  for (int p = 0; p < k; ++p) {
    if (knobs[p].ordered()) continue;
    Config config(knobs.size(), 0);
    std::vector<std::string> on;
    for (int v = 0; v < knobs[p].size(); ++v) {
      config[p] = v;
      if (space.active(config, k)) on.push_back(knobs[p].label(v));
    }
    if (static_cast<int>(on.size()) < knobs[p].size()) return {p, on};
  }
  return {-1, {}};
}

// Every valid config: each active knob over its values, inactive knobs at their first.
void enumerate(const KnobSpace& space, Config& config, size_t k, std::vector<Config>& out) {
  if (k == space.knobs().size()) {
    if (space.valid(config)) out.push_back(config);
    return;
  }
  const int n = space.active(config, static_cast<int>(k)) ? space.knobs()[k].size() : 1;
  for (int v = 0; v < n; ++v) {
    config[k] = v;
    enumerate(space, config, k + 1, out);
  }
  config[k] = 0;
}

}  // namespace

py::dict space_to_python(const KnobSpace& space) {
  static const char* kinds[] = {"int", "pow2", "choice"};
  py::list knobs;
  for (int k = 0; k < static_cast<int>(space.knobs().size()); ++k) {
    const Knob& knob = space.knobs()[k];
    py::dict d;
    d["name"] = knob.name();
    d["kind"] = kinds[static_cast<int>(knob.kind())];
    std::vector<int64_t> values;
    std::vector<std::string> labels;
    for (int i = 0; i < knob.size(); ++i) {
      values.push_back(knob.value(i));
      labels.push_back(knob.label(i));
    }
    if (knob.ordered())
      d["values"] = values;
    else
      d["labels"] = labels;
    const auto [parent, on] = condition_of(space, k);
    if (parent >= 0) {
      d["parent"] = space.knobs()[parent].name();
      d["parent_labels"] = on;
    }
    knobs.append(d);
  }
  Config config(space.knobs().size(), 0);
  std::vector<Config> configs;
  enumerate(space, config, 0, configs);
  py::dict out;
  out["knobs"] = knobs;
  out["configs"] = configs;
  std::vector<std::string> described;
  for (const Config& c : configs) described.push_back(space.describe(c));
  out["described"] = described;
  return out;
}

}  // namespace nimble::python

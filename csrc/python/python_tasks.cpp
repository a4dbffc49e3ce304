// Tasks defined in Python for nimble._C.tuning.tune: knobs from tuples, a measure callable
// timed under the tuner's repeat policy, constraints as callables.
#include <pybind11/stl.h>

#include <chrono>
#include <memory>

#include "csrc/python/bindings.h"

namespace py = pybind11;

namespace nimble::python {

using namespace nimble::tuning;

namespace {

// Times a Python callable: measure(config: dict[str, int | str]) -> seconds of one run; an
// exception is a failed candidate (its type name tells compile errors from run errors).
class PythonMeasurer : public Measurer {
 public:
  PythonMeasurer(py::object measure, KnobSpace space)
      : measure_(std::move(measure)), space_(std::move(space)) {}
  ~PythonMeasurer() override {
    py::gil_scoped_acquire gil;
    measure_ = py::object();
  }
  std::vector<MeasureResult> measure(const std::vector<Config>& batch,
                                     const RepeatPolicy& repeats) override {
    std::vector<MeasureResult> out(batch.size());
    py::gil_scoped_acquire gil;
    for (size_t i = 0; i < batch.size(); ++i) {
      const auto start = std::chrono::steady_clock::now();
      py::dict config;
      for (size_t k = 0; k < batch[i].size(); ++k) {
        const Knob& knob = space_.knobs()[k];
        if (knob.kind() == KnobKind::kCategorical)
          config[py::str(knob.name())] = knob.label(batch[i][k]);
        else
          config[py::str(knob.name())] = knob.value(batch[i][k]);
      }
      try {
        time_with_policy(
            repeats, [&] { return measure_(config).cast<double>(); }, out[i]);
      } catch (py::error_already_set& e) {
        // Ctrl-C inside measure() must stop the run, not count as a failed candidate: raise
        // the interrupt again for the check after this slot.
        if (e.matches(PyExc_KeyboardInterrupt)) PyErr_SetInterrupt();
        out[i].seconds.clear();
        out[i].error = e.matches(PyExc_TimeoutError) ? MeasureError::kTimeout
                       : e.matches(PyExc_SyntaxError) || e.matches(PyExc_ImportError)
                           ? MeasureError::kCompile
                           : MeasureError::kRuntime;
        out[i].message = e.what();
      }
      out[i].cost_seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
    return out;
  }

 private:
  py::object measure_;
  KnobSpace space_;  // to name the knobs of a config for Python
};

Knob knob_from_spec(const py::tuple& spec) {
  const auto name = spec[0].cast<std::string>();
  const auto kind = spec[1].cast<std::string>();
  if (kind == "int")
    return Knob::integer_range(name, spec[2].cast<int64_t>(), spec[3].cast<int64_t>(),
                               spec.size() > 4 ? spec[4].cast<int64_t>() : 1);
  if (kind == "pow2")
    return Knob::power_of_two_range(name, spec[2].cast<int64_t>(), spec[3].cast<int64_t>());
  if (kind == "choice") return Knob::categorical(name, spec[2].cast<std::vector<std::string>>());
  throw std::invalid_argument("knob kind must be 'int', 'pow2' or 'choice', not '" + kind + "'");
}

}  // namespace

std::vector<Task> tasks_from_python(const py::list& specs) {
  std::vector<Task> tasks;
  for (const auto& item : specs) {
    const auto spec = item.cast<py::dict>();
    Task t;
    t.name = spec["name"].cast<std::string>();
    t.signature = spec.contains("signature") ? spec["signature"].cast<std::string>() : t.name;
    t.group = spec.contains("group") ? spec["group"].cast<std::string>() : "";
    t.flops = spec["flops"].cast<double>();
    t.weight = spec.contains("weight") ? spec["weight"].cast<double>() : 1.0;
    if (spec.contains("baseline_seconds"))
      t.baseline_seconds = spec["baseline_seconds"].cast<double>();
    for (const auto& k : spec["knobs"].cast<py::list>())
      t.space.add_knob(knob_from_spec(k.cast<py::tuple>()));
    if (spec.contains("constraints")) {
      for (const auto& c : spec["constraints"].cast<py::list>()) {
        auto holder = std::make_shared<py::object>(c.cast<py::object>());
        t.space.add_constraint("python constraint", [holder](const std::vector<int64_t>& v) {
          py::gil_scoped_acquire gil;
          return (*holder)(v).cast<bool>();
        });
      }
    }
    t.measurer = std::make_shared<PythonMeasurer>(spec["measure"].cast<py::object>(), t.space);
    tasks.push_back(std::move(t));
  }
  return tasks;
}

}  // namespace nimble::python

#pragma once
// Each concept binds itself into nimble._C from its own translation unit, so that a
// change to one binding recompiles only that file.
#include <pybind11/pybind11.h>

#include <memory>
#include <string>
#include <vector>

#include "tuning/task/task.h"
#include "tuning/tuner/model_tuner.h"
#include "tuning/tuner/tuning_report.h"

namespace nimble::python {
void bind_runtime(pybind11::module_& m);
void bind_scheduling(pybind11::module_& m);
void bind_tuning(pybind11::module_& m);
void bind_kernels(pybind11::module_& m);
void bind_model_watch(pybind11::module_& m);
// Parts of nimble._C.tuning that bind_tuning hands its submodule to.
void bind_simulator(pybind11::module_& tuning);
void bind_tuning_database(pybind11::module_& tuning);
void bind_belief(pybind11::module_& tuning);

// Shared by the tuning entry points (nimble._C.tuning and nimble._C.kernels); defined in
// tuning_to_python.cpp and run_callbacks.cpp.
pybind11::dict tuning_report_to_dict(const tuning::TuningReport& report);
// A number, or None where it is not finite (a latency never reached).
pybind11::object finite_or_none(double v);
// Checks for Ctrl-C and calls `callback` (None: nothing) with a dict per slot.
tuning::ProgressCallback python_progress(const pybind11::object& callback);
// The per-item callback of a loop run from Python without the GIL (python_progress's check,
// for any item): takes the GIL, checks for Ctrl-C, and calls `each` (None: nothing) with
// `to_python(item)`. `each` must outlive the loop.
template <typename Item, typename ToPython>
auto python_each(const pybind11::object& each, ToPython to_python) {
  return [&each, to_python](const Item& item) {
    pybind11::gil_scoped_acquire gil;
    if (PyErr_CheckSignals() != 0) throw pybind11::error_already_set();
    if (!each.is_none()) each(to_python(item));
  };
}

// A measure pool written in Python (nimble/tuning/distributed.py): an object with capacity() ->
// int, submit(ticket, task, configs, repeats: dict) and take() -> (ticket, results | None,
// wall_seconds), results as measured_batch_to_python gives them. None: no pool.
std::unique_ptr<tuning::MeasurePool> python_measure_pool(const pybind11::object& pool);
// A batch's results as plain tuples (seconds, error, message, cost_seconds, cut_short), to
// cross process boundaries; and the repeat settings as a dict, both ways.
pybind11::list measured_batch_to_python(const std::vector<tuning::MeasureResult>& results);
tuning::RepeatSettings repeat_settings_from_python(const pybind11::dict& d);
pybind11::dict repeat_settings_to_python(const tuning::RepeatSettings& r);
// Binds `measure(signature, configs, repeats: dict)` of a class with such a method (measurers
// by signature, for workers and the trace recorder), the GIL released while it measures.
template <typename Class, typename... Options>
void def_measure(pybind11::class_<Class, Options...>& cls) {
  cls.def(
      "measure",
      [](Class& m, const std::string& signature, const std::vector<tuning::Config>& configs,
         const pybind11::dict& repeats) {
        const tuning::RepeatSettings settings = repeat_settings_from_python(repeats);
        std::vector<tuning::MeasureResult> results;
        {
          pybind11::gil_scoped_release release;
          results = m.measure(signature, configs, settings);
        }
        return measured_batch_to_python(results);
      },
      pybind11::arg("signature"), pybind11::arg("configs"), pybind11::arg("repeats"));
}
// Tasks defined in Python (python_tasks.cpp): dicts with name, flops, knobs, measure and
// optional signature, group, weight, baseline_seconds, constraints.
std::vector<tuning::Task> tasks_from_python(const pybind11::list& specs);
// A knob space as a trace holds it (knob_space_to_python.cpp): {"knobs": [{name, kind, values or
// labels, parent, parent_labels}], "configs": every valid config, "described": each as text}.
pybind11::dict space_to_python(const tuning::KnobSpace& space);
// nimble._C.kernels.ContextRecorder, the trace recorder's measurers of a lowered replay.
void bind_context_trace(pybind11::module_& kernels);
}  // namespace nimble::python

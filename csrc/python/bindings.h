#pragma once
// Each concept binds itself into nimble._C from its own translation unit, so that a
// change to one binding recompiles only that file.
#include <pybind11/pybind11.h>

#include <memory>

#include "tuning/tuner/model_tuner.h"
#include "tuning/tuner/tuning_report.h"

namespace nimble::python {
void bind_runtime(pybind11::module_& m);
void bind_scheduling(pybind11::module_& m);
void bind_tuning(pybind11::module_& m);
void bind_kernels(pybind11::module_& m);

// Shared by the tuning entry points (bind_tuning.cpp).
pybind11::dict tuning_report_to_dict(const tuning::TuningReport& report);
// Checks for Ctrl-C and calls `callback` (None: nothing) with a dict per slot.
tuning::ProgressCallback python_progress(const pybind11::object& callback);

// A measure pool written in Python (nimble/tuning/distributed.py): an object with capacity() -> int,
// submit(ticket, task, configs, repeats: dict) and take() -> (ticket, results | None,
// wall_seconds), results as measured_batch_to_python gives them. None: no pool.
std::unique_ptr<tuning::MeasurePool> python_measure_pool(const pybind11::object& pool);
// A batch's results as plain tuples (seconds, error, message, cost_seconds, cut_short), to
// cross process boundaries; and the repeat settings as a dict, both ways.
pybind11::list measured_batch_to_python(const std::vector<tuning::MeasureResult>& results);
tuning::RepeatSettings repeat_settings_from_python(const pybind11::dict& d);
}  // namespace nimble::python

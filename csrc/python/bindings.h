#pragma once
// Each concept binds itself into nimble._C from its own translation unit, so that a
// change to one binding recompiles only that file.
#include <pybind11/pybind11.h>

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
}  // namespace nimble::python

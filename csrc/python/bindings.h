#pragma once
// Each concept binds itself into nimble._C from its own translation unit, so that a
// change to one binding recompiles only that file.
#include <pybind11/pybind11.h>

namespace nimble::python {
void bind_runtime(pybind11::module_& m);
void bind_scheduling(pybind11::module_& m);
void bind_tuning(pybind11::module_& m);
}  // namespace nimble::python

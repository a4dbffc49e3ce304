// What a run started from Python calls back into Python while it holds no GIL: the per-slot
// progress (and the Ctrl-C check), and a measure pool written in Python.
#include <pybind11/stl.h>

#include "csrc/python/bindings.h"

namespace py = pybind11;

namespace nimble::python {

using namespace nimble::tuning;

namespace {

MeasureResult measure_result_from_python(const py::handle& item) {
  const auto t = item.cast<py::tuple>();
  MeasureResult r;
  r.seconds = t[0].cast<std::vector<double>>();
  r.error = measure_error_from_string(t[1].cast<std::string>());
  r.message = t[2].cast<std::string>();
  r.cost_seconds = t[3].cast<double>();
  r.cut_short = t[4].cast<bool>();
  return r;
}

// The tuner's side of a pool written in Python; every call takes the GIL, which the run
// released.
class PythonMeasurePool : public MeasurePool {
 public:
  explicit PythonMeasurePool(py::object pool) : pool_(std::move(pool)) {}
  ~PythonMeasurePool() override {
    py::gil_scoped_acquire gil;
    pool_ = py::object();
  }
  int capacity() override {
    py::gil_scoped_acquire gil;
    return pool_.attr("capacity")().cast<int>();
  }
  void submit(MeasureRequest request) override {
    py::gil_scoped_acquire gil;
    pool_.attr("submit")(request.ticket, request.task, request.configs,
                         repeat_settings_to_python(request.repeats));
  }
  MeasuredRequest take() override {
    py::gil_scoped_acquire gil;
    if (PyErr_CheckSignals() != 0) throw py::error_already_set();
    const auto t = pool_.attr("take")().cast<py::tuple>();
    MeasuredRequest out;
    out.ticket = t[0].cast<long>();
    if (!t[1].is_none())
      for (const auto& item : t[1]) out.results.push_back(measure_result_from_python(item));
    out.wall_seconds = t[2].cast<double>();
    return out;
  }

 private:
  py::object pool_;
};

}  // namespace

std::unique_ptr<MeasurePool> python_measure_pool(const py::object& pool) {
  if (pool.is_none()) return nullptr;
  return std::make_unique<PythonMeasurePool>(pool);
}

// The per-slot callback of a run started from Python: checks for Ctrl-C (the run holds no GIL,
// so Python cannot see the signal otherwise) and calls the user's progress callable, if any.
// An exception from either ends the run there and reaches the caller; every batch measured so
// far is already in the database.
ProgressCallback python_progress(const py::object& callback) {
  return [callback](const ProgressEvent& e) {
    py::gil_scoped_acquire gil;
    if (PyErr_CheckSignals() != 0) throw py::error_already_set();
    if (callback.is_none()) return;
    py::dict d;
    d["slot"] = e.slot;
    d["task"] = e.task;
    d["task_trials"] = e.task_trials;
    d["trials"] = e.trials;
    d["tuning_seconds"] = e.tuning_seconds;
    d["model_ms"] = e.model_seconds * 1e3;
    d["task_ms"] = e.task_seconds * 1e3;
    d["task_start_ms"] = e.task_start_seconds * 1e3;
    py::dict gains;
    for (const auto& [task, ms] : e.expected_gain_ms) gains[py::str(task)] = ms;
    d["expected_gain_ms"] = gains;
    callback(d);
  };
}

}  // namespace nimble::python

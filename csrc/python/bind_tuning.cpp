// nimble._C.tuning: the auto-tuner (tuning/) for Python: tuning of Python-defined tasks and
// the survey stop here; simulated runs and scheduler comparisons (bind_simulator.cpp), the
// tuning database (bind_tuning_database.cpp) and the belief model's pieces (bind_belief.cpp)
// bind themselves into the same submodule. Long runs release the GIL; Python callbacks
// (progress, measure, constraints) take it back while they run.
#include <pybind11/functional.h>
#include <pybind11/stl.h>

#include <limits>
#include <optional>

#include "csrc/python/bindings.h"
#include "csrc/python/run_options.h"
#include "tuning/database/tuning_database.h"
#include "tuning/scheduler/scheduler_factory.h"
#include "tuning/tuner/model_tuner.h"

namespace py = pybind11;

namespace nimble::python {

using namespace nimble::tuning;

void bind_tuning(py::module_& m) {
  py::module_ t = m.def_submodule("tuning", "The auto-tuner: schedulers, search, database");
  t.def("scheduler_names", &scheduler_names, "Names accepted wherever a scheduler is chosen.");
  t.def(
      "fixed_repeats",
      [](int repeats) {
        RepeatSettings r;
        r.adaptive = false;
        r.fixed_repeats = repeats;
        return repeat_settings_to_python(r);
      },
      py::arg("repeats"),
      "Repeat settings (as a measurer's `repeats` argument) for exactly `repeats` timings.");

  const double inf = std::numeric_limits<double>::infinity();

  t.def(
      "tune",
      [](const py::list& task_specs, const std::string& scheduler, double slot_seconds,
         long budget_trials, double budget_seconds, long early_stop_trials, std::optional<double> c,
         bool survey_stop, double phi, double goal_ms, bool adaptive, bool cold_filter,
         int batch_size, double peak_gflops, std::optional<std::string> database,
         std::string device, std::string run, uint64_t seed, const py::object& progress) {
        const RunOptions r =
            run_options(slot_seconds, budget_trials, budget_seconds, early_stop_trials, c,
                        survey_stop, phi, goal_ms, adaptive, cold_filter, batch_size, 10, 500, 200);
        TunerOptions o;
        SchedulerOptions s;
        r.apply(o, s);
        o.peak_gflops = peak_gflops;
        o.device = std::move(device);
        o.run = std::move(run);
        o.seed = seed;
        s.seed = seed + 1;
        auto sched = make_scheduler(scheduler, s);
        std::vector<Task> tasks = tasks_from_python(task_specs);
        std::optional<TuningDatabase> db;
        if (database) db.emplace(*database);
        ModelTuner tuner(std::move(tasks), o, db ? &*db : nullptr);
        const ProgressCallback callback = python_progress(progress);
        TuningReport report;
        {
          py::gil_scoped_release release;
          report = tuner.run(*sched, callback);
        }
        return tuning_report_to_dict(report);
      },
      py::arg("tasks"), py::arg("scheduler") = "dynatune", py::arg("slot_seconds") = 5.0,
      py::arg("budget_trials") = 0, py::arg("budget_seconds") = inf,
      py::arg("early_stop_trials") = 100, py::arg("c") = py::none(), py::arg("survey_stop") = true,
      py::arg("phi") = -0.25, py::arg("goal_ms") = 0.0, py::arg("adaptive") = true,
      py::arg("cold_filter") = true, py::arg("batch_size") = 8, py::arg("peak_gflops") = 1000.0,
      py::arg("database") = py::none(), py::arg("device") = "cpu", py::arg("run") = "run",
      py::arg("seed") = 0, py::arg("progress") = py::none(),
      "Tune tasks defined in Python. Each task is a dict: name, flops, knobs (tuples "
      "(name, 'int', lo, hi[, step]) / (name, 'pow2', lo, hi) / (name, 'choice', [labels])), "
      "measure(config) -> seconds of one run (raise to fail), optional signature, weight, "
      "baseline_seconds, group, constraints (callables on the knob values).");

  py::class_<SurveyStop>(t, "SurveyStop",
                         "Trimmer's survey stop: goal, or the improvement rate's plateau")
      .def(py::init([](double phi, int patience, double goal_ms) {
             SurveyStopOptions o;
             o.phi = phi;
             o.patience = patience;
             o.goal_seconds = goal_ms * 1e-3;
             return SurveyStop(o);
           }),
           py::arg("phi") = -0.25, py::arg("patience") = 2, py::arg("goal_ms") = 0.0)
      .def("after_epoch", &SurveyStop::after_epoch, py::arg("model_seconds"),
           py::arg("tuning_seconds"),
           "After an epoch (or a round): why tuning should stop, or None.");

  bind_simulator(t);
  bind_tuning_database(t);
  bind_belief(t);
}

}  // namespace nimble::python

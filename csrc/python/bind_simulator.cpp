// nimble._C.tuning's simulator: tuning runs on simulated models, scheduler comparisons over
// seeds, and a simulated model's measurers for workers.
#include <pybind11/functional.h>
#include <pybind11/stl.h>

#include <limits>
#include <optional>

#include "csrc/python/bindings.h"
#include "csrc/python/run_options.h"
#include "tuning/database/tuning_database.h"
#include "tuning/scheduler/scheduler_factory.h"
#include "tuning/simulator/simulation.h"

namespace py = pybind11;

namespace nimble::python {

using namespace nimble::tuning;

namespace {

SimulationOptions simulation_options(const std::string& scheduler, uint64_t seed, int tasks,
                                     long trials_per_task, const RunOptions& run) {
  SimulationOptions o = default_simulation_options();
  run.apply(o.tuner, o.scheduler_options);
  o.scheduler = scheduler;
  o.model.seed = seed;
  o.model.tasks = tasks;
  o.trials_per_task = trials_per_task;
  return o;
}

}  // namespace

void bind_simulator(py::module_& t) {
  const double inf = std::numeric_limits<double>::infinity();

  t.def(
      "simulate",
      [](const std::string& scheduler, uint64_t seed, int tasks, long trials_per_task,
         double slot_seconds, long budget_trials, double budget_seconds, long early_stop_trials,
         std::optional<double> c, bool survey_stop, double phi, double goal_ms, bool adaptive,
         bool cold_filter, int batch_size, int mcmc_walkers, int mcmc_steps, int mcmc_samples,
         std::optional<std::string> database, bool resume, const py::object& progress,
         const py::object& pool, bool finish_when_cold) {
        RunOptions run = run_options(slot_seconds, budget_trials, budget_seconds, early_stop_trials,
                                     c, survey_stop, phi, goal_ms, adaptive, cold_filter,
                                     batch_size, mcmc_walkers, mcmc_steps, mcmc_samples);
        run.finish_when_cold = finish_when_cold;
        SimulationOptions o = simulation_options(scheduler, seed, tasks, trials_per_task, run);
        o.tuner.resume = resume;
        make_scheduler(scheduler, o.scheduler_options);  // an unknown name fails before the run
        std::optional<TuningDatabase> db;
        if (database) db.emplace(*database);
        const ProgressCallback callback = python_progress(progress);
        const std::unique_ptr<MeasurePool> measure_pool = python_measure_pool(pool);
        TuningReport report;
        {
          py::gil_scoped_release release;
          report = run_simulation(o, db ? &*db : nullptr, callback, measure_pool.get());
        }
        return tuning_report_to_dict(report);
      },
      py::arg("scheduler") = "dynatune", py::arg("seed") = 0, py::arg("tasks") = 12,
      py::arg("trials_per_task") = 400, py::arg("slot_seconds") = 20.0,
      py::arg("budget_trials") = 0, py::arg("budget_seconds") = inf,
      py::arg("early_stop_trials") = 200, py::arg("c") = py::none(), py::arg("survey_stop") = false,
      py::arg("phi") = -0.25, py::arg("goal_ms") = 0.0, py::arg("adaptive") = true,
      py::arg("cold_filter") = true, py::arg("batch_size") = 8, py::arg("mcmc_walkers") = 10,
      py::arg("mcmc_steps") = 500, py::arg("mcmc_samples") = 200, py::arg("database") = py::none(),
      py::arg("resume") = true, py::arg("progress") = py::none(), py::arg("pool") = py::none(),
      py::arg("finish_when_cold") = false,
      "Tune a simulated model (see docs/tuning.md); returns the report as a dict. `pool`: "
      "measure on workers (nimble.tuning.distributed) instead of in this process.");

  py::class_<SimulatedModelMeasurer>(
      t, "SimulatedModelMeasurer",
      "A simulated model's measurers, rebuilt from its seed where a worker measures: "
      "measure(signature, configs, repeats) -> results as the tuner's pool takes them back.")
      .def(py::init<uint64_t, int, double>(), py::arg("seed"), py::arg("tasks"),
           py::arg("peak_gflops") = 1000.0)
      .def("signatures", &SimulatedModelMeasurer::signatures)
      .def(
          "measure",
          [](SimulatedModelMeasurer& m, const std::string& signature,
             const std::vector<Config>& configs, const py::dict& repeats) {
            const RepeatSettings settings = repeat_settings_from_python(repeats);
            std::vector<MeasureResult> results;
            {
              py::gil_scoped_release release;
              results = m.measure(signature, configs, settings);
            }
            return measured_batch_to_python(results);
          },
          py::arg("signature"), py::arg("configs"), py::arg("repeats"));

  t.def(
      "compare",
      [](std::vector<std::string> schedulers, std::vector<uint64_t> seeds, int tasks,
         long trials_per_task, double slot_seconds, long budget_trials, double budget_seconds,
         long early_stop_trials, std::optional<double> c, bool adaptive, bool cold_filter,
         int batch_size, int mcmc_walkers, int mcmc_steps, int mcmc_samples, int threads,
         bool finish_when_cold) {
        if (schedulers.empty()) schedulers = scheduler_names();
        RunOptions run = run_options(slot_seconds, budget_trials, budget_seconds, early_stop_trials,
                                     c, false, -0.25, 0, adaptive, cold_filter, batch_size,
                                     mcmc_walkers, mcmc_steps, mcmc_samples);
        run.finish_when_cold = finish_when_cold;
        const SimulationOptions base =
            simulation_options(schedulers[0], 0, tasks, trials_per_task, run);
        for (const auto& name : schedulers) make_scheduler(name, base.scheduler_options);
        Comparison c_result;
        {
          py::gil_scoped_release release;
          c_result = compare_schedulers(schedulers, seeds, base, threads);
        }
        py::dict d;
        py::list rows;
        for (const auto& r : c_result.rows) {
          py::dict row;
          row["scheduler"] = r.scheduler;
          row["time_to_95_s"] = finite_or_none(r.median_time_to_95);
          row["time_to_99_s"] = finite_or_none(r.median_time_to_99);
          row["final_ms"] = r.median_final_ms;
          row["speedup_vs_sequential"] = finite_or_none(r.median_speedup_vs_sequential);
          row["overhead_share"] = r.median_overhead_share;
          row["scheduler_ms_per_slot"] = r.median_scheduler_ms_per_slot;
          row["cold_time_share"] = r.median_cold_time_share;
          rows.append(row);
        }
        py::list runs;
        for (const auto& r : c_result.runs) {
          py::dict run_dict = tuning_report_to_dict(r.report);
          run_dict["seed"] = r.seed;
          run_dict["time_to_95_s"] = finite_or_none(r.time_to_95);
          run_dict["time_to_99_s"] = finite_or_none(r.time_to_99);
          runs.append(run_dict);
        }
        d["rows"] = rows;
        d["runs"] = runs;
        d["table"] = comparison_table(c_result);
        return d;
      },
      py::arg("schedulers") = std::vector<std::string>{},
      py::arg("seeds") = std::vector<uint64_t>{0, 1, 2, 3, 4}, py::arg("tasks") = 12,
      py::arg("trials_per_task") = 400, py::arg("slot_seconds") = 20.0,
      py::arg("budget_trials") = 0, py::arg("budget_seconds") = inf,
      py::arg("early_stop_trials") = 200, py::arg("c") = py::none(), py::arg("adaptive") = true,
      py::arg("cold_filter") = true, py::arg("batch_size") = 8, py::arg("mcmc_walkers") = 10,
      py::arg("mcmc_steps") = 500, py::arg("mcmc_samples") = 200, py::arg("threads") = 2,
      py::arg("finish_when_cold") = false,
      "Every scheduler on the same simulated models, one per seed; medians over seeds. "
      "finish_when_cold: a task finishes once every candidate left is cold (docs/tuning.md).");
}

}  // namespace nimble::python

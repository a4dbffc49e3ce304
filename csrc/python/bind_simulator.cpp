// nimble._C.tuning's simulator: tuning runs on simulated models, scheduler comparisons over
// seeds (on synthetic models or on recorded traces), a simulated model's measurers for workers,
// and a replay's task spaces laid out for the trace recorder (nimble/tuning/trace.py).
#include <pybind11/functional.h>
#include <pybind11/stl.h>

#include <limits>
#include <optional>

#include "csrc/kernels/kernel_family.h"
#include "csrc/python/bindings.h"
#include "csrc/python/run_options.h"
#include "csrc/runtime/replay.h"
#include "csrc/slot/program_tasks.h"
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

template <typename T>
std::vector<T> list_of(const py::dict& d, const char* key) {
  return d.contains(key) ? d[key].cast<std::vector<T>>() : std::vector<T>{};
}

// A trace as nimble/tuning/trace.py reads it from its file: {"model", "device", "tasks": [...]},
// each task with its knobs and one entry per recorded configuration in parallel lists.
std::shared_ptr<const Trace> trace_from_python(const py::dict& d) {
  auto trace = std::make_shared<Trace>();
  trace->model = d.contains("model") ? d["model"].cast<std::string>() : "";
  trace->device = d.contains("device") ? d["device"].cast<std::string>() : "";
  const bool lowered = d.contains("lowered") && d["lowered"].cast<bool>();
  trace->warm_ups = d.contains("warm_ups") ? d["warm_ups"].cast<int>() : (lowered ? 2 : 0);
  for (const py::handle item : d["tasks"].cast<py::list>()) {
    const auto t = item.cast<py::dict>();
    TraceTask task;
    task.name = t["name"].cast<std::string>();
    task.signature = t["signature"].cast<std::string>();
    task.group = t.contains("group") ? t["group"].cast<std::string>() : "";
    task.flops = t["flops"].cast<double>();
    task.weight = t["weight"].cast<double>();
    task.baseline_seconds = t["baseline_seconds"].is_none()
                                ? std::numeric_limits<double>::infinity()
                                : t["baseline_seconds"].cast<double>();
    for (const py::handle k : t["knobs"].cast<py::list>()) {
      const auto kd = k.cast<py::dict>();
      TraceKnob knob{kd["name"].cast<std::string>(),
                     kd["kind"].cast<std::string>(),
                     list_of<int64_t>(kd, "values"),
                     list_of<std::string>(kd, "labels"),
                     "",
                     {}};
      if (kd.contains("parent") && !kd["parent"].is_none()) {
        knob.parent = kd["parent"].cast<std::string>();
        knob.parent_labels = list_of<std::string>(kd, "parent_labels");
      }
      task.knobs.push_back(std::move(knob));
    }
    const auto configs = list_of<Config>(t, "configs");
    const auto seconds = list_of<py::object>(t, "seconds");
    const auto noise = list_of<double>(t, "noise");
    const auto setup = list_of<double>(t, "setup_seconds");
    const auto repeat = list_of<double>(t, "repeat_seconds");
    const auto errors = list_of<std::string>(t, "error");
    for (const size_t n :
         {seconds.size(), noise.size(), setup.size(), repeat.size(), errors.size()})
      if (n != configs.size())
        throw std::invalid_argument("trace task '" + task.name +
                                    "': its per-configuration lists "
                                    "differ in length");
    for (size_t i = 0; i < configs.size(); ++i) {
      TracePoint p;
      p.config = configs[i];
      p.error = measure_error_from_string(errors[i]);
      p.seconds = seconds[i].is_none() ? 0 : seconds[i].cast<double>();
      p.noise = noise[i];
      p.setup_seconds = setup[i];
      p.repeat_seconds = repeat[i];
      if (p.error != MeasureError::kNone) p.message = "recorded: " + errors[i];
      task.points.push_back(std::move(p));
    }
    if (task.knobs.empty())
      throw std::invalid_argument("trace task '" + task.name + "' has no knob");
    if (t.contains("start") && !t["start"].is_none()) task.start = t["start"].cast<Config>();
    trace->tasks.push_back(std::move(task));
  }
  return trace;
}

py::dict comparison_to_python(const Comparison& c) {
  py::dict d;
  py::list rows;
  for (const auto& r : c.rows) {
    py::dict row;
    row["scheduler"] = r.scheduler;
    row["time_to_95_s"] = finite_or_none(r.median_time_to_95);
    row["time_to_99_s"] = finite_or_none(r.median_time_to_99);
    row["time_to_95_spread_s"] =
        py::make_tuple(finite_or_none(r.min_time_to_95), finite_or_none(r.max_time_to_95));
    row["time_to_99_spread_s"] =
        py::make_tuple(finite_or_none(r.min_time_to_99), finite_or_none(r.max_time_to_99));
    row["final_ms"] = r.median_final_ms;
    row["speedup_vs_sequential"] = finite_or_none(r.median_speedup_vs_sequential);
    row["overhead_share"] = r.median_overhead_share;
    row["scheduler_ms_per_slot"] = r.median_scheduler_ms_per_slot;
    row["cold_time_share"] = r.median_cold_time_share;
    row["unfinished_runs"] = r.unfinished_runs;
    rows.append(row);
  }
  py::list runs;
  for (const auto& r : c.runs) {
    py::dict run_dict = tuning_report_to_dict(r.report);
    run_dict["seed"] = r.seed;
    run_dict["time_to_95_s"] = finite_or_none(r.time_to_95);
    run_dict["time_to_99_s"] = finite_or_none(r.time_to_99);
    run_dict["remeasured_final_ms"] = r.remeasured_final_seconds * 1e3;
    py::list remeasured;
    for (const CurvePoint& p : r.remeasured_curve)
      remeasured.append(py::make_tuple(p.seconds, p.trials, p.model_seconds * 1e3));
    run_dict["remeasured_curve"] = remeasured;
    runs.append(run_dict);
  }
  d["rows"] = rows;
  d["runs"] = runs;
  d["table"] = comparison_table(c);
  d["reference_ms"] = c.trace_reference_seconds * 1e3;
  d["own_reference_ms"] = c.own_reference_seconds * 1e3;
  d["budget_seconds"] = c.budget_seconds;
  d["slot_seconds"] = c.slot_seconds;
  return d;
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

  py::class_<SimulatedModelMeasurer> simulated(
      t, "SimulatedModelMeasurer",
      "A simulated model's measurers, rebuilt from its seed where a worker measures: "
      "measure(signature, configs, repeats) -> results as the tuner's pool takes them back.");
  simulated
      .def(py::init<uint64_t, int, double>(), py::arg("seed"), py::arg("tasks"),
           py::arg("peak_gflops") = 1000.0)
      .def("signatures", &SimulatedModelMeasurer::signatures);
  def_measure(simulated);

  t.def(
      "compare",
      [](std::vector<std::string> schedulers, std::vector<uint64_t> seeds, int tasks,
         long trials_per_task, std::optional<double> slot, long budget_trials,
         double budget_seconds, long early_stop_trials, std::optional<double> c, bool adaptive,
         bool cold_filter, int batch_size, int mcmc_walkers, int mcmc_steps, int mcmc_samples,
         int threads, bool finish_when_cold, const py::object& trace, int mcmc_warm_steps,
         double complete_share, double reference_ms, double repeat_cost_slot_share,
         bool retime_cut_short_rule, bool transfer_by_destination, bool complete_untried_only) {
        if (schedulers.empty()) schedulers = scheduler_names();
        // On a trace, no slot given: one batch of its median task (default_trace_slot_seconds).
        const double slot_seconds = slot ? *slot : trace.is_none() ? 20.0 : 0.0;
        RunOptions run = run_options(slot_seconds, budget_trials, budget_seconds, early_stop_trials,
                                     c, false, -0.25, 0, adaptive, cold_filter, batch_size,
                                     mcmc_walkers, mcmc_steps, mcmc_samples);
        run.finish_when_cold = finish_when_cold;
        run.mcmc_warm_steps = mcmc_warm_steps;
        run.complete_share = complete_share;
        run.repeat_cost_slot_share = repeat_cost_slot_share;
        run.retime_cut_short_rule = retime_cut_short_rule;
        run.transfer_by_destination = transfer_by_destination;
        run.complete_untried_only = complete_untried_only;
        SimulationOptions base = simulation_options(schedulers[0], 0, tasks, trials_per_task, run);
        if (!trace.is_none()) base.trace = trace_from_python(trace.cast<py::dict>());
        for (const auto& name : schedulers) make_scheduler(name, base.scheduler_options);
        Comparison c_result;
        {
          py::gil_scoped_release release;
          c_result = compare_schedulers(schedulers, seeds, base, threads, reference_ms * 1e-3);
        }
        return comparison_to_python(c_result);
      },

      py::arg("schedulers") = std::vector<std::string>{},
      py::arg("seeds") = std::vector<uint64_t>{0, 1, 2, 3, 4}, py::arg("tasks") = 12,
      py::arg("trials_per_task") = 400, py::arg("slot_seconds") = py::none(),
      py::arg("budget_trials") = 0, py::arg("budget_seconds") = inf,
      py::arg("early_stop_trials") = 200, py::arg("c") = py::none(), py::arg("adaptive") = true,
      py::arg("cold_filter") = true, py::arg("batch_size") = 8, py::arg("mcmc_walkers") = 10,
      py::arg("mcmc_steps") = 500, py::arg("mcmc_samples") = 200, py::arg("threads") = 2,
      py::arg("finish_when_cold") = false, py::arg("trace") = py::none(),
      py::arg("mcmc_warm_steps") = 40, py::arg("complete_share") = 0.1,
      py::arg("reference_ms") = 0.0, py::arg("repeat_cost_slot_share") = 1.0,
      py::arg("retime_cut_short_rule") = true, py::arg("transfer_by_destination") = true,
      py::arg("complete_untried_only") = true,
      "Every scheduler on the same simulated models, one per seed; medians over seeds. "
      "finish_when_cold: a task finishes once every candidate left is cold (docs/tuning.md). "
      "trace: a recorded model (nimble.tuning.trace.load) replayed instead, every seed on it with "
      "its own noise, against a budget of a third of exhausting it and slots of one batch of its "
      "median task unless they are given. reference_ms (> 0, on a trace): score against it instead "
      "of the best of these runs (own_reference_ms), to judge variants against one bar.");

  t.def(
      "trace_budget_seconds",
      [](const py::dict& trace, bool adaptive) {
        SimulationOptions o = default_simulation_options();
        o.tuner.adaptive_evaluator = adaptive;
        return default_trace_budget_seconds(*trace_from_python(trace), o);
      },
      py::arg("trace"), py::arg("adaptive") = true,
      "A quarter of what finishing every task of the trace takes (docs/tuning.md, \"Comparing\").");

  t.def(
      "trace_slot_seconds",
      [](const py::dict& trace, bool adaptive) {
        SimulationOptions o = default_simulation_options();
        o.tuner.adaptive_evaluator = adaptive;
        return default_trace_slot_seconds(*trace_from_python(trace), o);
      },
      py::arg("trace"), py::arg("adaptive") = true,
      "What one batch of the search costs on the trace's median task: a comparison's slot.");

  t.def(
      "trace_spaces",
      [](const Replay& replay) {
        py::list out;
        for (const slot::ProgramTask& p :
             slot::program_tasks(replay.program(), kernels::all_families())) {
          py::dict d = space_to_python(p.space->knobs());
          d["name"] = p.name;
          d["signature"] = p.space->op().signature();
          d["group"] = p.space->op().depthwise() ? "depthwise" : "conv";
          d["flops"] = p.space->op().flops();
          d["weight"] = static_cast<double>(p.sites.size());
          out.append(d);
        }
        return out;
      },
      py::arg("replay"),
      "The replay's tuning tasks as the tuner sees them, each with its knobs (conditions "
      "included) and every valid configuration: what a trace records.");
}

}  // namespace nimble::python

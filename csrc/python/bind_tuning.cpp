// nimble._C.tuning: the auto-tuner (tuning/) for Python: simulated runs and scheduler
// comparisons, tuning of Python-defined tasks, the tuning database, and the belief model's
// pieces (curve fit, ensemble sampler) for inspection. Long runs release the GIL; Python
// callbacks (progress, measure, constraints) take it back while they run.
#include <pybind11/functional.h>
#include <pybind11/stl.h>

#include <chrono>
#include <cmath>
#include <limits>
#include <optional>

#include "csrc/python/bindings.h"
#include "tuning/belief/belief_model.h"
#include "tuning/database/tuning_database.h"
#include "tuning/scheduler/scheduler_factory.h"
#include "tuning/simulator/simulation.h"
#include "tuning/tuner/model_tuner.h"

namespace py = pybind11;

namespace nimble::python {

using namespace nimble::tuning;

namespace {

py::object finite_or_none(double v) { return std::isfinite(v) ? py::cast(v) : py::none(); }

py::list curve_to_list(const std::vector<CurvePoint>& curve) {
  py::list out;
  for (const auto& p : curve)
    out.append(py::make_tuple(p.seconds, p.trials, p.model_seconds * 1e3));
  return out;
}

}  // namespace

py::list measured_batch_to_python(const std::vector<MeasureResult>& results) {
  py::list out;
  for (const MeasureResult& r : results)
    out.append(
        py::make_tuple(r.seconds, to_string(r.error), r.message, r.cost_seconds, r.cut_short));
  return out;
}

RepeatSettings repeat_settings_from_python(const py::dict& d) {
  RepeatSettings r;
  r.adaptive = d["adaptive"].cast<bool>();
  r.best_seconds = d["best_seconds"].cast<double>();
  r.fixed_repeats = d["fixed_repeats"].cast<int>();
  r.evaluator.min_repeats = d["min_repeats"].cast<int>();
  r.evaluator.max_repeats = d["max_repeats"].cast<int>();
  r.evaluator.target_relative_error = d["target_relative_error"].cast<double>();
  r.evaluator.slower_than_best_factor = d["slower_than_best_factor"].cast<double>();
  r.evaluator.one_sample_cut_factor = d["one_sample_cut_factor"].cast<double>();
  r.evaluator.confidence_z = d["confidence_z"].cast<double>();
  return r;
}

namespace {

py::dict repeat_settings_to_python(const RepeatSettings& r) {
  py::dict d;
  d["adaptive"] = r.adaptive;
  d["best_seconds"] = r.best_seconds;
  d["fixed_repeats"] = r.fixed_repeats;
  d["min_repeats"] = r.evaluator.min_repeats;
  d["max_repeats"] = r.evaluator.max_repeats;
  d["target_relative_error"] = r.evaluator.target_relative_error;
  d["slower_than_best_factor"] = r.evaluator.slower_than_best_factor;
  d["one_sample_cut_factor"] = r.evaluator.one_sample_cut_factor;
  d["confidence_z"] = r.evaluator.confidence_z;
  return d;
}

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

py::dict tuning_report_to_dict(const TuningReport& r) {
  py::dict d;
  d["scheduler"] = r.scheduler;
  d["stop_reason"] = r.stop_reason;
  d["curve"] = curve_to_list(r.curve);  // (seconds, trials, model_ms)
  d["epochs"] = curve_to_list(r.epochs);
  d["slots"] = r.slots;
  d["trials"] = r.trials;
  d["tuning_seconds"] = r.tuning_seconds;
  d["slot_seconds"] = r.slot_seconds;
  d["scheduler_wall_seconds"] = r.scheduler_wall_seconds;
  d["search_wall_seconds"] = r.search_wall_seconds;
  d["initial_model_ms"] = finite_or_none(r.initial_model_seconds * 1e3);
  d["final_model_ms"] = finite_or_none(r.final_model_seconds * 1e3);
  d["cold_time_share"] = r.cold_time_share;
  d["failed_time_share"] = r.failed_time_share;
  d["cut_short"] = r.cut_short;
  d["repeats"] = r.repeats;
  d["measure_seconds"] = r.measure_seconds;
  d["cold_seconds"] = r.cold_seconds;
  d["failed_seconds"] = r.failed_seconds;
  py::list tasks;
  for (const auto& t : r.tasks) {
    py::dict task;
    task["name"] = t.name;
    task["signature"] = t.signature;
    task["trials"] = t.trials;
    task["failures"] = t.failures;
    task["slots"] = t.slots;
    task["best_ms"] = finite_or_none(t.best_seconds * 1e3);
    task["baseline_ms"] = finite_or_none(t.baseline_seconds * 1e3);
    task["best_config"] = t.best_config;
    task["finished"] = t.finished;
    task["cold_proposals_replaced"] = t.cold.proposals_replaced;
    task["cold_seconds"] = t.cold.cold_seconds;
    task["measure_seconds"] = t.cold.total_seconds;
    tasks.append(task);
  }
  d["tasks"] = tasks;
  return d;
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
    callback(d);
  };
}

namespace {

py::dict record_to_dict(const DatabaseRecord& r) {
  py::dict d;
  d["run"] = r.run;
  d["signature"] = r.signature;
  d["device"] = r.device;
  d["config"] = r.config;
  d["seconds"] = r.result.seconds;
  d["error"] = to_string(r.result.error);
  d["message"] = r.result.message;
  d["cost_seconds"] = r.result.cost_seconds;
  d["recorded_at"] = r.recorded_at;
  return d;
}

// Options shared by simulate(), compare() and tune(), from keyword arguments.
struct RunOptions {
  double slot_seconds = 20;
  long budget_trials = 0;
  double budget_seconds = std::numeric_limits<double>::infinity();
  long early_stop_trials = 200;
  std::optional<double> c;
  bool survey_stop = false;
  double phi = -0.25;
  double goal_ms = 0;
  bool adaptive = true;
  bool cold_filter = true;
  bool finish_when_cold = false;
  int batch_size = 8;
  int mcmc_walkers = 10;
  int mcmc_steps = 500;
  int mcmc_samples = 200;
  uint64_t seed = 0;

  void apply(TunerOptions& t, SchedulerOptions& s) const {
    t.slot_seconds = slot_seconds;
    t.budget_trials = budget_trials;
    t.budget_seconds = budget_seconds;
    t.early_stop_trials = early_stop_trials;
    t.survey.stop_on_rate = survey_stop;
    t.survey.phi = phi;
    t.survey.goal_seconds = goal_ms * 1e-3;
    t.adaptive_evaluator = adaptive;
    t.search.cold_filter.enabled = cold_filter;
    t.search.finish_when_all_cold = finish_when_cold;
    t.search.batch_size = batch_size;
    if (c) s.dynatune.c = *c;
    s.dynatune.belief.mcmc.walkers = mcmc_walkers;
    s.dynatune.belief.mcmc.steps = mcmc_steps;
    s.dynatune.belief.mcmc.samples = mcmc_samples;
  }
};

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

}  // namespace

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

  const auto run_options = [](double slot_seconds, long budget_trials, double budget_seconds,
                              long early_stop_trials, std::optional<double> c, bool survey_stop,
                              double phi, double goal_ms, bool adaptive, bool cold_filter,
                              int batch_size, int mcmc_walkers, int mcmc_steps, int mcmc_samples) {
    RunOptions o;
    o.slot_seconds = slot_seconds;
    o.budget_trials = budget_trials;
    o.budget_seconds = budget_seconds;
    o.early_stop_trials = early_stop_trials;
    o.c = c;
    o.survey_stop = survey_stop;
    o.phi = phi;
    o.goal_ms = goal_ms;
    o.adaptive = adaptive;
    o.cold_filter = cold_filter;
    o.batch_size = batch_size;
    o.mcmc_walkers = mcmc_walkers;
    o.mcmc_steps = mcmc_steps;
    o.mcmc_samples = mcmc_samples;
    return o;
  };
  const double inf = std::numeric_limits<double>::infinity();

  t.def(
      "simulate",
      [run_options](const std::string& scheduler, uint64_t seed, int tasks, long trials_per_task,
                    double slot_seconds, long budget_trials, double budget_seconds,
                    long early_stop_trials, std::optional<double> c, bool survey_stop, double phi,
                    double goal_ms, bool adaptive, bool cold_filter, int batch_size,
                    int mcmc_walkers, int mcmc_steps, int mcmc_samples,
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
      "Tune a simulated model (see tuning/README.md); returns the report as a dict. `pool`: "
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
      [run_options](std::vector<std::string> schedulers, std::vector<uint64_t> seeds, int tasks,
                    long trials_per_task, double slot_seconds, long budget_trials,
                    double budget_seconds, long early_stop_trials, std::optional<double> c,
                    bool adaptive, bool cold_filter, int batch_size, int mcmc_walkers,
                    int mcmc_steps, int mcmc_samples, int threads, bool finish_when_cold) {
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
      "finish_when_cold: a task finishes once every candidate left is cold (tuning/README.md).");

  t.def(
      "tune",
      [run_options](const py::list& task_specs, const std::string& scheduler, double slot_seconds,
                    long budget_trials, double budget_seconds, long early_stop_trials,
                    std::optional<double> c, bool survey_stop, double phi, double goal_ms,
                    bool adaptive, bool cold_filter, int batch_size, double peak_gflops,
                    std::optional<std::string> database, std::string device, std::string run,
                    uint64_t seed, const py::object& progress) {
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

  py::class_<TuningDatabase>(t, "TuningDatabase", "SQLite store of every measurement")
      .def(py::init<const std::string&>(), py::arg("path"))
      .def_property_readonly("path", &TuningDatabase::path)
      .def("count", &TuningDatabase::count)
      .def("signatures", &TuningDatabase::signatures, py::arg("device"))
      .def(
          "records",
          [](const TuningDatabase& db, const std::string& sig, const std::string& device) {
            py::list out;
            for (const auto& r : db.records(sig, device)) out.append(record_to_dict(r));
            return out;
          },
          py::arg("signature"), py::arg("device"))
      .def(
          "best",
          [](const TuningDatabase& db, const std::string& sig, const std::string& device) {
            const auto r = db.best(sig, device);
            return r ? py::object(record_to_dict(*r)) : py::object(py::none());
          },
          py::arg("signature"), py::arg("device"),
          "The fastest successful measurement of a task on a device, or None.")
      .def("export_jsonl", &TuningDatabase::export_json_lines, py::arg("path"))
      .def("import_jsonl", &TuningDatabase::import_json_lines, py::arg("path"));

  t.def(
      "fit_log_power",
      [](const std::vector<double>& xs, const std::vector<double>& ys, double max_ceiling) {
        const CurveFit f = fit_log_power(xs, ys, max_ceiling);
        return py::make_tuple(f.params.a, f.params.b, f.params.c, f.rmse);
      },
      py::arg("xs"), py::arg("ys"), py::arg("max_ceiling") = inf,
      "Least-squares log-power curve a / (1 + (x / e^b)^c): returns (a, b, c, rmse).");
  t.def(
      "predict_belief",
      [](const std::vector<double>& history, int horizon, int walkers, int steps, int samples,
         uint64_t seed) {
        BeliefOptions o;
        o.mcmc.walkers = walkers;
        o.mcmc.steps = steps;
        o.mcmc.samples = samples;
        std::mt19937_64 rng(seed);
        const BeliefPrediction b = predict_belief(history, horizon, o, rng);
        py::dict d;
        d["valid"] = b.valid;
        d["best"] = b.best;
        d["mean"] = b.mean;
        d["stddev"] = b.stddev;
        d["expected_improvement"] = b.expected_improvement;
        d["segment_start"] = b.segment_start;
        d["acceptance_fraction"] = b.acceptance_fraction;
        return d;
      },
      py::arg("history"), py::arg("horizon"), py::arg("walkers") = 10, py::arg("steps") = 500,
      py::arg("samples") = 200, py::arg("seed") = 0,
      "DynaTune's belief about a best-so-far curve normalized by the device peak.");
  t.def(
      "sample_ensemble",
      [](const py::function& log_prob, const std::vector<double>& start, int walkers, int steps,
         int samples, uint64_t seed) {
        EnsembleOptions o;
        o.walkers = walkers;
        o.steps = steps;
        o.samples = samples;
        o.init_scale = 0.1;
        std::mt19937_64 rng(seed);
        const Eigen::VectorXd x0 = Eigen::Map<const Eigen::VectorXd>(start.data(), start.size());
        const EnsembleResult r = sample_ensemble(
            [&](const Eigen::VectorXd& x) {
              return log_prob(std::vector<double>(x.data(), x.data() + x.size())).cast<double>();
            },
            x0, o, rng);
        std::vector<std::vector<double>> out;
        for (const auto& s : r.samples) out.emplace_back(s.data(), s.data() + s.size());
        return py::make_tuple(out, r.acceptance_fraction);
      },
      py::arg("log_prob"), py::arg("start"), py::arg("walkers") = 10, py::arg("steps") = 500,
      py::arg("samples") = 200, py::arg("seed") = 0,
      "Goodman-Weare stretch-move ensemble sampler: returns (samples, acceptance fraction).");
}

}  // namespace nimble::python

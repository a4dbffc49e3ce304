// nimble._C.kernels: the tuned-kernel slot for Python. A prepared replay's tunable ops as
// tuning tasks, the tuner run on them (real kernels, measured here), and the binding of the
// database's winners into the replay. Long work releases the GIL.
#include <pybind11/functional.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include <limits>
#include <map>
#include <optional>
#include <stdexcept>

#include "csrc/kernels/kernel_family.h"
#include "csrc/python/bindings.h"
#include "csrc/slot/context_measurer.h"
#include "csrc/slot/kernel_binding.h"
#include "csrc/slot/lowering_choices.h"
#include "csrc/slot/program_tasks.h"
#include "tuning/scheduler/scheduler_factory.h"

namespace py = pybind11;

namespace nimble::python {
namespace {

kernels::MeasureOptions measure_options(double min_repeat_seconds, double timeout_seconds,
                                        uint64_t seed) {
  kernels::MeasureOptions o;
  o.min_repeat_seconds = min_repeat_seconds;
  o.timeout_seconds = timeout_seconds;
  o.seed = seed;
  return o;
}

// A replay's tunable ops' measurers by signature, where a worker measures for a tuner elsewhere
// (nimble/tuning/distributed.py): the worker prepared the same model, so it has the same tasks.
class ReplayMeasurer {
 public:
  ReplayMeasurer(const Replay& replay, const kernels::MeasureOptions& options) {
    const auto flusher = kernels::make_flusher(options);
    for (const slot::ProgramTask& t :
         slot::program_tasks(replay.program(), kernels::all_families()))
      measurers_.emplace(t.space->op().signature(),
                         std::make_shared<kernels::KernelMeasurer>(t.space, options, flusher));
  }
  std::vector<tuning::MeasureResult> measure(const std::string& signature,
                                             const std::vector<tuning::Config>& configs,
                                             const tuning::RepeatSettings& repeats) {
    return find(signature).measure(configs, *tuning::make_repeat_policy(repeats));
  }
  // ATen's kernel of the op, timed as its candidates are (the baseline they must beat).
  double baseline_seconds(const std::string& signature, int repeats) {
    return find(signature).baseline_seconds(repeats);
  }

 private:
  kernels::KernelMeasurer& find(const std::string& signature) {
    const auto it = measurers_.find(signature);
    if (it == measurers_.end())
      throw std::invalid_argument("this replay has no tunable op with signature " + signature);
    return *it->second;
  }

  std::map<std::string, std::shared_ptr<kernels::KernelMeasurer>> measurers_;
};

// The config's layout: each knob's name and choices, in config order.
py::list knob_labels(const tuning::KnobSpace& space) {
  py::list knobs;
  for (const tuning::Knob& knob : space.knobs()) {
    std::vector<std::string> labels;
    for (int i = 0; i < knob.size(); ++i) labels.push_back(knob.label(i));
    knobs.append(py::make_tuple(knob.name(), labels));
  }
  return knobs;
}

}  // namespace

void bind_kernels(py::module_& m) {
  py::module_ k = m.def_submodule("kernels", "The tuned-kernel slot: tasks, tuning, binding");

  k.def(
      "device_key",
      [](const std::string& device) { return slot::device_key(c10::Device(device).type()); },
      py::arg("device") = "cpu",
      "What tuning records are keyed by on this machine (CPU model and thread count).");

  k.def(
      "tasks",
      [](const Replay& replay) {
        py::list out;
        for (const slot::ProgramTask& t :
             slot::program_tasks(replay.program(), kernels::all_families())) {
          py::dict d;
          d["name"] = t.name;
          d["signature"] = t.space->op().signature();
          std::vector<int> ops;
          std::vector<std::vector<int>> absorbed;
          for (const auto& site : t.sites) {
            ops.push_back(site.index);
            absorbed.push_back(site.absorbed);
          }
          d["ops"] = ops;
          d["absorbed"] = absorbed;
          d["flops"] = t.space->op().flops();
          d["space_size"] = t.space->knobs().size();
          const tuning::Knob& family = t.space->knobs().knobs()[0];
          std::vector<std::string> families;
          for (int i = 0; i < family.size(); ++i) families.push_back(family.label(i));
          d["families"] = families;
          d["knobs"] = knob_labels(t.space->knobs());
          out.append(d);
        }
        return out;
      },
      py::arg("replay"), "The replay's tunable ops grouped by signature.");

  k.def(
      "tune",
      [](Replay& replay, const std::string& scheduler, double budget_seconds, long budget_trials,
         double slot_seconds, long early_stop_trials, bool survey_stop, std::optional<double> c,
         bool adaptive, bool cold_filter, int batch_size, double peak_gflops,
         std::optional<std::string> database, const std::string& run, bool resume,
         double min_repeat_seconds, double timeout_seconds, uint64_t seed,
         const py::object& progress, const py::object& on_baseline, const py::object& pool,
         bool finish_when_cold, const std::optional<std::vector<at::Tensor>>& inputs) {
        tuning::TunerOptions o;
        tuning::SchedulerOptions s;
        o.budget_seconds = budget_seconds;
        o.budget_trials = budget_trials;
        o.slot_seconds = slot_seconds;
        o.early_stop_trials = early_stop_trials;
        o.survey.stop_on_rate = survey_stop;
        o.adaptive_evaluator = adaptive;
        o.search.cold_filter.enabled = cold_filter;
        o.search.finish_when_all_cold = finish_when_cold;
        o.search.batch_size = batch_size;
        o.peak_gflops = peak_gflops;
        o.device = slot::device_key(program_device(replay.program()).type());
        o.run = run;
        o.resume = resume;
        o.seed = seed;
        if (c) s.dynatune.c = *c;
        s.seed = seed + 1;
        auto sched = tuning::make_scheduler(scheduler, s);
        std::optional<tuning::TuningDatabase> db;
        if (database) db.emplace(*database);
        const auto measure = measure_options(min_repeat_seconds, timeout_seconds, seed);
        const tuning::ProgressCallback callback = python_progress(progress);
        const std::unique_ptr<tuning::MeasurePool> measure_pool = python_measure_pool(pool);
        if (inputs && measure_pool)
          throw std::invalid_argument("tuning in context measures in this process: no pool");
        std::vector<slot::ProgramTask> tasks;
        std::vector<slot::ContextTask> lowered;
        if (inputs) {
          lowered = slot::context_tasks(replay);
        } else {
          tasks = slot::program_tasks(
              replay.program(),
              kernels::all_families(database ? kernels::cubin_directory_for(*database) : ""));
        }
        const size_t count = inputs ? lowered.size() : tasks.size();
        tuning::TuningReport report;
        {
          py::gil_scoped_release release;
          const auto baseline = [&](int i) {
            py::gil_scoped_acquire gil;
            if (PyErr_CheckSignals() != 0) throw py::error_already_set();
            if (!on_baseline.is_none()) on_baseline(i, count);
          };
          std::vector<tuning::Task> tuning_tasks =
              inputs ? slot::context_tuning_tasks(replay, *inputs, std::move(lowered), measure,
                                                  baseline)
                     : slot::tuning_tasks(tasks, measure, baseline);
          tuning::ModelTuner tuner(std::move(tuning_tasks), o, db ? &*db : nullptr);
          report = tuner.run(*sched, callback, measure_pool.get());
        }
        py::dict d = tuning_report_to_dict(report);
        d["device"] = o.device;
        return d;
      },
      py::arg("replay"), py::arg("scheduler") = "dynatune",
      py::arg("budget_seconds") = std::numeric_limits<double>::infinity(),
      py::arg("budget_trials") = 0, py::arg("slot_seconds") = 3.0,
      py::arg("early_stop_trials") = 100, py::arg("survey_stop") = false, py::arg("c") = py::none(),
      py::arg("adaptive") = true, py::arg("cold_filter") = true, py::arg("batch_size") = 8,
      py::arg("peak_gflops") = 100.0, py::arg("database") = py::none(), py::arg("run") = "run",
      py::arg("resume") = true, py::arg("min_repeat_seconds") = 2e-3,
      py::arg("timeout_seconds") = 2.0, py::arg("seed") = 0, py::arg("progress") = py::none(),
      py::arg("on_baseline") = py::none(), py::arg("pool") = py::none(),
      py::arg("finish_when_cold") = false, py::arg("inputs") = py::none(),
      "Tune the replay's tunable ops on this machine (or on the workers of `pool`, see "
      "nimble/tuning/distributed.py); every measurement goes to `database`. With `inputs` (the "
      "replay's example inputs), a lowered replay's convolutions are tuned in context: each "
      "candidate timed in the replay itself (csrc/slot/context_measurer.h).");

  k.def(
      "context_tasks",
      [](const Replay& replay) {
        py::list out;
        for (const slot::ContextTask& t : slot::context_tasks(replay)) {
          py::dict d;
          d["name"] = t.name;
          d["signature"] = t.signature;
          std::vector<int> ops;
          for (const auto& site : t.sites) ops.push_back(site.op);
          d["ops"] = ops;
          d["space_size"] = t.space->knobs().size();
          d["knobs"] = knob_labels(t.space->knobs());
          out.append(d);
        }
        return out;
      },
      py::arg("replay"),
      "A lowered replay's convolutions by lowered signature: tuning in context.");

  py::class_<ReplayMeasurer> replay_measurer(
      k, "ReplayMeasurer", "A replay's tunable ops' measurers by signature, for a worker.");
  def_measure(replay_measurer);
  replay_measurer
      .def(py::init([](const Replay& replay, double min_repeat_seconds, double timeout_seconds,
                       uint64_t seed) {
             return ReplayMeasurer(replay,
                                   measure_options(min_repeat_seconds, timeout_seconds, seed));
           }),
           py::arg("replay"), py::arg("min_repeat_seconds") = 2e-3,
           py::arg("timeout_seconds") = 2.0, py::arg("seed") = 0)
      .def(
          "baseline_seconds",
          [](ReplayMeasurer& m, const std::string& signature, int repeats) {
            py::gil_scoped_release release;
            return m.baseline_seconds(signature, repeats);
          },
          py::arg("signature"), py::arg("repeats") = 10,
          "ATen's kernel of the op, timed as its candidates are.");

  k.def(
      "lowering_choices",
      [](const std::string& database, bool any_device) {
        const tuning::TuningDatabase db(database);
        py::dict out;
        for (const auto& [key, choice] :
             slot::lowering_choices(db, slot::device_key(c10::DeviceType::CPU), any_device)) {
          py::dict d;
          d["kernel"] = choice.kernel;
          d["threads"] = choice.threads;
          d["ms"] = choice.seconds * 1e3;
          d["signature"] = choice.signature;
          d["parameters"] = choice.parameters.to_string();
          d["spec"] = choice.spec;
          d["in_replay"] = choice.in_replay == 0 ? py::object(py::none())
                                                 : py::object(py::bool_(choice.in_replay > 0));
          out[py::str(key)] = d;
        }
        return out;
      },
      py::arg("database"), py::arg("any_device") = false,
      "Per convolution shape (PrepackedConvolution.shape_key), the lowering's kernel a tuning "
      "database found fastest on this machine: {key: {kernel, threads, ms, signature, parameters, "
      "spec, in_replay}}; `spec` is what the lowering runs (a lowered op's `tuning`), "
      "`in_replay` the whole-replay verdict on it (confirm_in_replay: True kept, False dropped, "
      "None not judged).");

  k.def(
      "bind",
      [](Replay& replay, const std::string& database, bool any_device, int rounds,
         double min_repeat_seconds, double min_speedup) {
        const tuning::TuningDatabase db(database);
        slot::BindOptions o;
        o.device = slot::device_key(program_device(replay.program()).type());
        o.any_device = any_device;
        o.rounds = rounds;
        o.measure.min_repeat_seconds = min_repeat_seconds;
        o.min_speedup = min_speedup;
        o.cubin_directory = kernels::cubin_directory_for(database);
        std::vector<slot::BoundOp> bound;
        {
          py::gil_scoped_release release;
          bound = slot::bind_tuned_kernels(replay, db, o);
        }
        py::list out;
        for (const slot::BoundOp& b : bound) {
          py::dict d;
          d["op"] = b.op;
          d["absorbed"] = b.absorbed;
          d["task"] = b.task;
          d["signature"] = b.signature;
          d["kernel"] = b.kernel;
          d["record_device"] = b.record_device;
          d["aten_ms"] = b.aten_seconds * 1e3;
          d["tuned_ms"] = b.tuned_seconds * 1e3;
          d["bound"] = b.bound;
          d["reason"] = b.reason;
          out.append(d);
        }
        return out;
      },
      py::arg("replay"), py::arg("database"), py::arg("any_device") = false, py::arg("rounds") = 5,
      py::arg("min_repeat_seconds") = 2e-3, py::arg("min_speedup") = 1.0,
      "Bind each tunable op's best record that is correct and faster than ATen side by side.");

  k.def(
      "unbind", [](Replay& replay) { replay.set_kernels({}); }, py::arg("replay"),
      "ATen's kernels for every op again.");

  k.def(
      "bound_kernels",
      [](const Replay& replay) {
        std::vector<std::pair<int, std::string>> out;
        const auto& ops = replay.state().ops;
        for (size_t i = 0; i < ops.size(); ++i)
          if (ops[i].kernel) out.emplace_back(static_cast<int>(i), ops[i].kernel->describe());
        return out;
      },
      py::arg("replay"), "(op, kernel) of every op that runs a tuned kernel.");

  bind_context_trace(k);
}

}  // namespace nimble::python

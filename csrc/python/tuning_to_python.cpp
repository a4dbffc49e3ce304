// The tuner's data as Python values: reports, curves, a batch's results and repeat settings
// (the last two both ways, to cross process boundaries to a worker and back).
#include <pybind11/stl.h>

#include <cmath>

#include "csrc/python/bindings.h"

namespace py = pybind11;

namespace nimble::python {

using namespace nimble::tuning;

py::object finite_or_none(double v) { return std::isfinite(v) ? py::cast(v) : py::none(); }

namespace {

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
  if (d.contains("first_call_cut_factor"))
    r.evaluator.first_call_cut_factor = d["first_call_cut_factor"].cast<double>();
  if (d.contains("max_repeat_cost_seconds"))
    r.evaluator.max_repeat_cost_seconds = d["max_repeat_cost_seconds"].cast<double>();
  return r;
}

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
  d["first_call_cut_factor"] = r.evaluator.first_call_cut_factor;
  d["max_repeat_cost_seconds"] = r.evaluator.max_repeat_cost_seconds;
  return d;
}

namespace {

// {source: {"cold_seconds", "measure_seconds"}} for the sources that measured anything.
py::dict cold_by_source(const std::array<SourceSeconds, kCandidateSources>& by_source) {
  py::dict d;
  for (size_t k = 0; k < kCandidateSources; ++k) {
    if (by_source[k].total <= 0) continue;
    py::dict s;
    s["cold_seconds"] = by_source[k].cold;
    s["measure_seconds"] = by_source[k].total;
    d[candidate_source_name(static_cast<CandidateSource>(k))] = s;
  }
  return d;
}

}  // namespace

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
  d["scheduler_cpu_seconds"] = r.scheduler_cpu_seconds;
  d["search_wall_seconds"] = r.search_wall_seconds;
  d["initial_model_ms"] = finite_or_none(r.initial_model_seconds * 1e3);
  d["final_model_ms"] = finite_or_none(r.final_model_seconds * 1e3);
  d["cold_time_share"] = r.cold_time_share;
  d["failed_time_share"] = r.failed_time_share;
  d["cut_short"] = r.cut_short;
  d["repeats"] = r.repeats;
  d["stalled_samples"] = r.stalled_samples;
  d["measure_seconds"] = r.measure_seconds;
  d["cold_seconds"] = r.cold_seconds;
  d["failed_seconds"] = r.failed_seconds;
  d["cold_by_source"] = cold_by_source(r.by_source);
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
    task["cold_by_source"] = cold_by_source(t.cold.by_source);
    tasks.append(task);
  }
  d["tasks"] = tasks;
  return d;
}

}  // namespace nimble::python

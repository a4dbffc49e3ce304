// nimble._C.kernels.ContextRecorder: a lowered replay's in-context measurers by task, for the
// trace recorder (nimble/tuning/lowered_trace.py), which picks the configurations to record and
// measures each one as the tuner would: in the replay, against the rule's kernel.
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include <map>
#include <memory>
#include <stdexcept>

#include "csrc/python/bindings.h"
#include "csrc/slot/context_confirmation.h"
#include "csrc/slot/context_measurer.h"
#include "csrc/slot/program_tasks.h"
#include "csrc/slot/replay_confirmation.h"
#include "tuning/measure/measure_pool.h"

namespace py = pybind11;

namespace nimble::python {
namespace {

py::dict comparison_dict(const slot::PairedComparison& c) {
  using namespace pybind11::literals;
  return py::dict("pairs"_a = c.pairs, "faster"_a = c.faster, "slower"_a = c.slower,
                  "median_ratio"_a = c.median_ratio, "a_ms"_a = c.a_seconds * 1e3,
                  "b_ms"_a = c.b_seconds * 1e3, "b_wins"_a = c.b_wins, "b_loses"_a = c.b_loses);
}

class ContextRecorder {
 public:
  ContextRecorder(Replay& replay, const std::vector<at::Tensor>& inputs,
                  const kernels::MeasureOptions& options)
      : tasks_(slot::context_tasks(replay)) {
    slot::capture_live(replay, inputs, tasks_);
    for (const slot::ContextTask& t : tasks_)
      measurers_.emplace(t.signature,
                         std::make_shared<slot::ContextMeasurer>(replay, inputs, t, options));
  }

  // Each task as a trace holds it, before measurement: its key, weight, FLOPs, the rule's
  // configuration ("start") and its space (space_to_python).
  py::list tasks() const {
    py::list out;
    for (const slot::ContextTask& t : tasks_) {
      py::dict d = space_to_python(t.space->knobs());
      d["name"] = t.name;
      d["signature"] = t.signature;
      d["group"] = t.space->op().kind == kernels::TunableOp::Kind::kLinear ? "linear"
                   : t.space->op().depthwise()                             ? "depthwise"
                                                                           : "conv";
      d["flops"] = t.space->op().flops();
      d["weight"] = static_cast<double>(t.sites.size());
      d["start"] = t.space->default_config();
      out.append(d);
    }
    return out;
  }

  std::vector<tuning::MeasureResult> measure(const std::string& signature,
                                             const std::vector<tuning::Config>& configs,
                                             const tuning::RepeatSettings& repeats) {
    return find(signature).measure(configs, *tuning::make_repeat_policy(repeats));
  }

 private:
  slot::ContextMeasurer& find(const std::string& signature) {
    const auto it = measurers_.find(signature);
    if (it == measurers_.end())
      throw std::invalid_argument("this replay has no lowered convolution with signature " +
                                  signature);
    return *it->second;
  }

  std::vector<slot::ContextTask> tasks_;
  std::map<std::string, std::shared_ptr<slot::ContextMeasurer>> measurers_;
};

}  // namespace

void bind_context_trace(py::module_& k) {
  py::class_<ContextRecorder> recorder(
      k, "ContextRecorder",
      "A lowered replay's convolutions as tuning tasks timed in the replay (as nimble.tune times "
      "them), measured one configuration batch at a time: what nimble.tuning.lowered_trace "
      "records. The replay runs on `inputs` while it measures; it must outlive the recorder.");
  recorder
      .def(py::init([](Replay& replay, const std::vector<at::Tensor>& inputs,
                       double min_repeat_seconds, double timeout_seconds, uint64_t seed) {
             kernels::MeasureOptions o;
             o.min_repeat_seconds = min_repeat_seconds;
             o.timeout_seconds = timeout_seconds;
             o.seed = seed;
             py::gil_scoped_release release;
             return std::make_unique<ContextRecorder>(replay, inputs, o);
           }),
           py::arg("replay"), py::arg("inputs"), py::arg("min_repeat_seconds") = 2e-3,
           py::arg("timeout_seconds") = 2.0, py::arg("seed") = 0, py::keep_alive<1, 2>())
      .def("tasks", &ContextRecorder::tasks,
           "Per lowered convolution shape: name, signature, group, flops, weight (occurrences), "
           "start (the rule's configuration), knobs, configs (every valid one), described.");
  def_measure(recorder);

  k.def(
      "confirm_in_context",
      [](Replay& replay, const std::vector<at::Tensor>& inputs, const std::string& database,
         double budget_seconds, int candidates, int rounds, int repeats, double timeout_seconds,
         const py::object& each) {
        tuning::TuningDatabase db(database);
        slot::ConfirmOptions o;
        o.device = slot::device_key(c10::DeviceType::CPU);
        o.candidates = candidates;
        o.rounds = rounds;
        o.repeats = repeats;
        o.budget_seconds = budget_seconds;
        kernels::MeasureOptions measure;
        measure.timeout_seconds = timeout_seconds;
        const auto to_dict = [](const slot::ConfirmedTask& t) {
          using namespace pybind11::literals;
          return py::dict("name"_a = t.name, "signature"_a = t.signature, "weight"_a = t.weight,
                          "claimed_ms"_a = t.claimed_seconds * 1e3,
                          "rule_ms"_a = t.rule_seconds * 1e3, "best_ms"_a = t.best_seconds * 1e3,
                          "best_config"_a = t.best, "compared"_a = t.compared);
        };
        std::vector<slot::ConfirmedTask> confirmed;
        {
          py::gil_scoped_release release;
          confirmed = slot::confirm_in_context(replay, inputs, db, o, measure,
                                               python_each<slot::ConfirmedTask>(each, to_dict));
        }
        py::list out;
        for (const slot::ConfirmedTask& t : confirmed) out.append(to_dict(t));
        return out;
      },
      py::arg("replay"), py::arg("inputs"), py::arg("database"), py::arg("budget_seconds"),
      py::arg("candidates") = 3, py::arg("rounds") = 10, py::arg("repeats") = 2,
      py::arg("timeout_seconds") = 2.0, py::arg("each") = py::none(),
      "Re-times, in the lowered `replay` on `inputs`, each task's fastest search records "
      "(`candidates` distinct configurations) and the rule's configuration in turn, `rounds` "
      "rounds, the largest claimed gain first until `budget_seconds` are spent, and appends "
      "them to `database`: the rule's and each candidate faster than it in at least 80% of the "
      "rounds by at least 2% (median of its time over the rule's in the same round) as run "
      "'confirmed in context', which lowering_choices prefers, the others as 'not confirmed in "
      "context'. Returns per task re-timed: name, signature, weight, claimed_ms (the search's "
      "fastest), rule_ms, best_ms (the winner's, else the rule's), best_config, compared; `each` "
      "gets each as it is done.");

  k.def(
      "compare_pairs",
      [](const std::vector<double>& a, const std::vector<double>& b, double z, double min_gain) {
        return comparison_dict(slot::compare_pairs(a, b, z, min_gain));
      },
      py::arg("a"), py::arg("b"), py::arg("z") = 1.645, py::arg("min_gain") = 0.0,
      "The sign test of paired times b[i] against a[i] (csrc/slot/replay_confirmation.h): "
      "pairs, faster, slower (b's), median_ratio (b / a), a_ms, b_ms (medians), b_wins, b_loses.");

  k.def(
      "confirm_in_replay",
      [](Replay& replay, const std::vector<at::Tensor>& inputs, const std::string& database,
         double budget_seconds, int pairs, int min_pairs, int final_pairs, double z,
         double min_gain, const std::map<std::string, double>& handicap_seconds,
         const py::object& each) {
        tuning::TuningDatabase db(database);
        slot::ReplayConfirmOptions o;
        o.device = slot::device_key(c10::DeviceType::CPU);
        o.budget_seconds = budget_seconds;
        o.pairs = pairs;
        o.min_pairs = min_pairs;
        o.final_pairs = final_pairs;
        o.z = z;
        o.min_gain = min_gain;
        o.handicap_seconds = handicap_seconds;
        const auto to_dict = [](const slot::ReplayPick& p) {
          using namespace pybind11::literals;
          return py::dict("key"_a = p.key, "spec"_a = p.spec, "signatures"_a = p.signatures,
                          "ops"_a = p.ops, "gain_ms"_a = p.gain_seconds * 1e3,
                          "comparison"_a = comparison_dict(p.comparison), "tried"_a = p.tried,
                          "kept"_a = p.kept, "reason"_a = p.reason);
        };
        slot::ReplayConfirmation done;
        {
          py::gil_scoped_release release;
          done = slot::confirm_in_replay(replay, inputs, db, o,
                                         python_each<slot::ReplayPick>(each, to_dict));
        }
        py::list picks;
        for (const slot::ReplayPick& p : done.picks) picks.append(to_dict(p));
        using namespace pybind11::literals;
        return py::dict("picks"_a = picks, "combination"_a = comparison_dict(done.combination),
                        "combination_kept"_a = done.combination_kept, "seconds"_a = done.seconds);
      },
      py::arg("replay"), py::arg("inputs"), py::arg("database"), py::arg("budget_seconds"),
      py::arg("pairs") = 100, py::arg("min_pairs") = 24, py::arg("final_pairs") = 0,
      py::arg("z") = 1.645, py::arg("min_gain") = 0.0,
      py::arg("handicap_seconds") = std::map<std::string, double>{}, py::arg("each") = py::none(),
      "Confirms the database's picks that differ from the rule's in the whole lowered `replay` "
      "(the rule's kernels) on `inputs`, one at a time by paired runs with and without it, on "
      "top of those kept before, the largest re-timed gain first; then the kept ones together "
      "against the rule's replay (csrc/slot/replay_confirmation.h). Appends the verdicts to "
      "`database` (lowering_choices' `in_replay`). Returns picks (key, spec, signatures, ops, "
      "gain_ms, comparison, tried, kept, reason), combination, combination_kept, seconds. "
      "`handicap_seconds`: per shape key, seconds added to each run timed with its pick (a "
      "pick forced slower or faster, for tests).");
}

}  // namespace nimble::python

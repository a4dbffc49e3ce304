// DynaTune's belief model's pieces for inspection from Python: the log-power curve fit, the
// belief about a best-so-far curve, and the ensemble sampler under it.
#include <pybind11/functional.h>
#include <pybind11/stl.h>

#include <limits>
#include <random>

#include "csrc/python/bindings.h"
#include "tuning/belief/belief_model.h"

namespace py = pybind11;

namespace nimble::python {

using namespace nimble::tuning;

void bind_belief(py::module_& t) {
  const double inf = std::numeric_limits<double>::infinity();
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

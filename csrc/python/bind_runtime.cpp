// Binds the program builder, its options and the replay to Python. The capture glue hands the
// trace over in one place (nimble/replay/build_replay.py, calling ProgramBuilder.finish);
// everything after that is C++ (csrc/pipeline/replay_pipeline.h).
#include <ATen/ScalarOps.h>
#include <pybind11/stl.h>
#include <time.h>
#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/csrc/utils/pybind.h>

#include <algorithm>
#include <stdexcept>

#include "csrc/kernels/cpu/torch_ops/prepacked_convolution.h"
#include "csrc/kernels/cpu/torch_ops/prepacked_linear.h"
#include "csrc/kernels/cpu/torch_ops/prepacked_weights.h"
#include "csrc/kernels/cpu/torch_ops/tuned_convolution.h"
#include "csrc/pipeline/replay_pipeline.h"
#include "csrc/program/program_builder.h"
#include "csrc/program/undeclared_writes.h"
#include "csrc/python/bindings.h"
#include "csrc/python/model_watch.h"
#include "csrc/runtime/cpu/cpu_executor.h"
#include "csrc/runtime/replay.h"
#include "csrc/runtime/trainable_parameters.h"
#include "csrc/threads/work_sharing.h"

namespace py = pybind11;

namespace nimble::python {

namespace {

// Python values of one op's arguments (schema order, defaults filled in) to IValues of
// the schema's types.
std::vector<c10::IValue> to_ivalues(const c10::OperatorHandle& handle, const py::list& values,
                                    bool returns) {
  const auto& formals = returns ? handle.schema().returns() : handle.schema().arguments();
  if (values.size() != formals.size()) {
    throw std::invalid_argument("op " + handle.operator_name().name + " takes " +
                                std::to_string(formals.size()) +
                                (returns ? " returns" : " arguments") + ", the trace recorded " +
                                std::to_string(values.size()));
  }
  std::vector<c10::IValue> out;
  out.reserve(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    try {
      // Python numbers where the schema wants a Tensor were wrapped numbers in eager:
      // keep their type-promotion rules by wrapping them the same way.
      const bool number = PyFloat_Check(values[i].ptr()) || PyLong_Check(values[i].ptr()) ||
                          PyBool_Check(values[i].ptr()) || PyComplex_Check(values[i].ptr());
      if (number && formals[i].type()->kind() == c10::TypeKind::TensorType) {
        at::Tensor wrapped = c10::scalar_to_tensor(
            torch::jit::toIValue(values[i], c10::NumberType::get()).toScalar());
        wrapped.unsafeGetTensorImpl()->set_wrapped_number(true);
        out.emplace_back(std::move(wrapped));
        continue;
      }
      out.push_back(torch::jit::toIValue(values[i], formals[i].type()));
    } catch (const std::exception& e) {
      throw std::invalid_argument("op " + handle.operator_name().name + ": cannot convert " +
                                  (returns ? "return " : "argument ") +
                                  std::string(formals[i].name()) + ": " + e.what());
    }
  }
  return out;
}

py::dict describe_op(const OpNode& op) {
  py::dict d;
  d["name"] = op.name;
  d["captured"] = op.captured_name;
  py::list reads, writes;
  for (int s : op.reads) reads.append(s);
  for (int s : op.writes) writes.append(s);
  d["reads"] = reads;
  d["writes"] = writes;
  // What a lowered op runs (kernel, weight, epilogue): its packed object's own description.
  for (const Arg& arg : op.args) {
    if (arg.kind != Arg::Kind::kConstant || !arg.constant.isCustomClass()) continue;
    if (arg.constant.type() ==
        c10::getCustomClassType<c10::intrusive_ptr<kernels::PrepackedConvolution>>()) {
      const auto packed = arg.constant.toCustomClass<kernels::PrepackedConvolution>();
      d["kernel"] = packed->describe();
      d["shape_key"] = packed->key();
      d["tuning"] = kernels::TunedConvolution::of(*packed).to_string();
    } else if (arg.constant.type() ==
               c10::getCustomClassType<c10::intrusive_ptr<kernels::PrepackedLinear>>()) {
      const auto packed = arg.constant.toCustomClass<kernels::PrepackedLinear>();
      d["kernel"] = packed->describe();
      d["shape_key"] = packed->key();
      d["tuning"] = kernels::TunedLinear::of(*packed).to_string();
    }
  }
  return d;
}

}  // namespace

void bind_runtime(py::module_& m) {
  m.def(
      "undeclared_writes", [] { return undeclared_writes(); },
      "Operator name -> positions of the arguments it writes without declaring it in its schema");
  m.def("_stall_kernel_helpers", &stall_helpers_for_test, py::arg("stalled"),
        "Tests: while True, the helper threads of nimble's CPU kernels take no work, as when "
        "their cores are held elsewhere; returns the previous setting");
  m.def("_kernel_helper_pieces", &helper_pieces_for_test,
        "Tests: pieces of nimble's CPU kernels the helper threads have run in this process");
  m.def(
      "_trace_kernel_helpers",
      [](bool on) {
        py::list jobs;
        for (const HelperTrace& t : trace_helpers_for_test(on))
          jobs.append(py::make_tuple(t.units, t.published_ns, t.caller_done_ns, t.end_ns,
                                     t.caller_cpu, t.helper_seen_ns, t.helper_claim_ns,
                                     t.helper_end_ns, t.helper_cpu, t.helper_units));
        return jobs;
      },
      py::arg("on"),
      "Diagnostics: turns tracing of shared kernel jobs on or off; returns the jobs traced since "
      "the last call, (units, published_ns, caller_done_ns, end_ns, caller_cpu, helper_seen_ns, "
      "helper_claim_ns, helper_end_ns, helper_cpu, helper_units), -1 where no helper did it");
  // prepare's options as C++ reads them, made by PrepareOptions.build_options()
  // (nimble/replay/prepare_options.py); each field is documented in build_options.h.
  py::class_<BuildOptions>(m, "BuildOptions")
      .def(py::init<>())
      .def("__copy__", [](const BuildOptions& o) { return o; })
      .def_readwrite("use_out_variants", &BuildOptions::use_out_variants)
      .def_readwrite("out_variant_max_bytes", &BuildOptions::out_variant_max_bytes)
      .def_readwrite("precompute_views", &BuildOptions::precompute_views)
      .def_readwrite("fold_batchnorm", &BuildOptions::fold_batchnorm)
      .def_readwrite("lower_for_cpu", &BuildOptions::lower_for_cpu)
      .def_readwrite("plan_memory", &BuildOptions::plan_memory)
      .def_readwrite("drop_noop_ops", &BuildOptions::drop_noop_ops)
      .def_readwrite("tuned_convolutions", &BuildOptions::tuned_convolutions)
      .def_readwrite("keep_aten_ops", &BuildOptions::keep_aten_ops)
      .def_readwrite("streams", &BuildOptions::streams)
      .def_readwrite("cores", &BuildOptions::cores)
      .def_readwrite("graph_twin", &BuildOptions::graph_twin);
  py::class_<ProgramBuilder>(m, "ProgramBuilder")
      .def(py::init<>())
      .def("add_input", &ProgramBuilder::add_input)
      .def("add_state", &ProgramBuilder::add_state)
      .def("add_op",
           [](ProgramBuilder& b, const std::string& name, const std::string& overload,
              const py::list& args, const py::list& returns) {
             const c10::OperatorHandle handle = find_op(name, overload);
             b.add_op(name, overload, to_ivalues(handle, args, false),
                      to_ivalues(handle, returns, true));
           })
      .def("set_outputs", &ProgramBuilder::set_outputs)
      .def(
          "finish",
          [](ProgramBuilder& b, const BuildOptions& options) { return build_replay(b, options); },
          py::arg("options"),
          "The hand-over from the capture: stages 2 to 6 of prepare's pipeline on the recorded "
          "trace (csrc/pipeline/replay_pipeline.h); returns the Replay.");

  py::class_<TrainableParameters>(m, "TrainableParameters")
      .def(py::init<std::vector<at::Tensor>>(), py::arg("params"))
      .def("unchanged", &TrainableParameters::unchanged);
  py::class_<GradientTargets>(m, "GradientTargets")
      .def(py::init<std::vector<at::Tensor>>(), py::arg("params"))
      .def("__len__", &GradientTargets::size);

  py::class_<Replay, std::shared_ptr<Replay>>(m, "Replay")
      .def(
          "run_step",
          // A whole training step: outputs are the loss, then one gradient per target, each
          // handed over as its parameter's .grad here; only the loss goes back to Python.
          [](Replay& r, const std::vector<at::Tensor>& inputs, bool copy_loss,
             const GradientTargets& targets) {
            if (PreReplayCheck* check = r.pre_check()) check->check();
            std::vector<at::Tensor> outputs;
            {
              py::gil_scoped_release no_gil;
              outputs = r.run(inputs, copy_loss, 1);
            }
            targets.hand_over(outputs, 1);
            return outputs.at(0);
          },
          py::arg("inputs"), py::arg("copy_loss"), py::arg("targets"))
      .def(
          "run",
          [](Replay& r, const std::vector<at::Tensor>& inputs, bool copy_outputs, int copy_first) {
            if (PreReplayCheck* check = r.pre_check()) check->check();
            py::gil_scoped_release no_gil;
            return r.run(inputs, copy_outputs, copy_first);
          },
          py::arg("inputs"), py::arg("copy_outputs") = true, py::arg("copy_first") = -1)
      .def("register_scalars",
           [](Replay& r, const std::vector<std::tuple<int, int, int>>& places) {
             std::vector<Replay::ScalarPlace> converted;
             for (const auto& [op, arg, elem] : places) converted.push_back({op, arg, elem});
             r.register_scalars(converted);
           })
      .def("set_scalars", &Replay::set_scalars)
      .def("set_state_names", &Replay::set_state_names)
      .def(
          "time_checks",
          [](Replay& r, int repeats) {
            // The thread's own CPU time: other processes on the machine do not count.
            const auto cpu_ns = [] {
              timespec t{};
              clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
              return static_cast<double>(t.tv_sec) * 1e9 + static_cast<double>(t.tv_nsec);
            };
            const double start = cpu_ns();
            for (int i = 0; i < repeats; ++i) {
              if (PreReplayCheck* check = r.pre_check()) check->check();
              r.check_state();
            }
            return (cpu_ns() - start) / std::max(1, repeats);
          },
          py::arg("repeats") = 10000,
          "CPU nanoseconds per call of what every run checks first (the model's structure, "
          "its parameters and buffers), without running anything.")
      .def(
          "set_watch",
          [](Replay& r, std::shared_ptr<ModelWatch> watch) { r.set_pre_check(std::move(watch)); },
          "Checks `watch` (a ModelWatch, or None) before every run and run_timed.")
      .def("run_timed",
           [](Replay& r, const std::vector<at::Tensor>& inputs) {
             if (PreReplayCheck* check = r.pre_check()) check->check();
             Replay::TimedRun run;
             {
               py::gil_scoped_release no_gil;
               run = r.run_timed(inputs);
             }
             py::list ops;
             for (const OpTiming& t : run.ops) {
               ops.append(py::make_tuple(t.op, t.stream, t.start_ns, t.end_ns, t.release_ns));
             }
             return py::make_tuple(run.total_ns, ops);
           })
      .def(
          "set_streams",
          [](Replay& r, int streams, int cores) {
            py::gil_scoped_release no_gil;
            ExecutorOptions options = r.executor_options();
            options.streams = streams;
            options.cores = cores;
            r.set_executor_options(options);
          },
          py::arg("streams"), py::arg("cores") = 0)
      .def(
          "set_stress_delays",
          [](Replay& r, std::vector<int> delays_us) {
            py::gil_scoped_release no_gil;
            ExecutorOptions options = r.executor_options();
            options.stress_delays_us = std::move(delays_us);
            r.set_executor_options(options);
          },
          py::arg("delays_us"),
          "Tests: rebuilds the executor with a pause of delays_us[i] microseconds before op i "
          "on its stream (empty list: none), to expose orders the schedule fails to enforce.")
      .def("schedule",
           [](const Replay& r) {
             const ScheduleInfo& s = r.executor().schedule();
             py::dict d;
             d["logical_streams"] = s.logical_streams;
             d["logical_syncs"] = s.logical_syncs;
             d["logical_stream"] = s.logical_stream;
             d["physical_streams"] = s.physical_streams;
             d["physical_syncs"] = s.physical_syncs;
             d["physical_stream"] = s.physical_stream;
             d["shares_work"] = r.executor().shares_work();
             return d;
           })
      .def("memory",
           [](Replay& r) {
             const Replay::Memory m = r.memory();
             py::dict d;
             d["buffer_bytes"] = r.program().buffer_bytes;
             d["buffer_bytes_unplanned"] = r.program().buffer_bytes_unplanned;
             d["resident_bytes"] = m.resident_bytes;
             d["prepacked_weight_bytes"] = kernels::prepacked_weight_bytes(r.program());
             if (m.pool) {
               py::dict pool;
               pool["planned"] = m.pool->planned;
               pool["block_bytes"] = m.pool->block_bytes;
               pool["requests"] = m.pool->requests;
               pool["planned_requests"] = m.pool->planned_requests;
               pool["buffers_moved"] = m.pool->buffers_moved;
               pool["served_last"] = m.pool->served_last;
               pool["fallbacks_last"] = m.pool->fallbacks_last;
               d["pool"] = pool;
             } else {
               d["pool"] = py::none();
             }
             return d;
           })
      .def_property_readonly("num_ops", [](const Replay& r) { return r.program().num_ops(); })
      .def_property_readonly("backend", [](const Replay& r) { return r.executor().backend(); })
      .def_property_readonly("num_streams",
                             [](const Replay& r) { return r.executor().num_streams(); })
      .def_property_readonly("dependencies",
                             [](const Replay& r) { return r.program().dependencies; })
      .def("ops",
           [](const Replay& r) {
             py::list out;
             for (const OpNode& op : r.program().ops) out.append(describe_op(op));
             return out;
           })
      .def("slot_roles", [](const Replay& r) {
        py::dict counts;
        for (const SlotInfo& s : r.program().slots) {
          const char* name = slot_role_name(s.role);
          counts[name] = counts.contains(name) ? counts[name].cast<int>() + 1 : 1;
        }
        return counts;
      });
}

}  // namespace nimble::python

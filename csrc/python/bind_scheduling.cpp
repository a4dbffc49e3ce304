// nimble._C.scheduling: the stream assignment on plain Python graphs.
#include <pybind11/stl.h>

#include "csrc/python/bindings.h"
#include "csrc/scheduling/stream_assignment.h"

namespace py = pybind11;

namespace nimble::python {

namespace {

scheduling::Dag make_dag(int num_nodes, std::vector<std::pair<int, int>> edges) {
  scheduling::Dag dag;
  dag.num_nodes = num_nodes;
  dag.edges = std::move(edges);
  return dag;
}

}  // namespace

void bind_scheduling(py::module_& m) {
  py::module_ s = m.def_submodule("scheduling", "Nimble's stream assignment");
  s.def(
      "assign_streams",
      [](int num_nodes, std::vector<std::pair<int, int>> edges) {
        const auto a = scheduling::assign_streams(make_dag(num_nodes, std::move(edges)));
        py::dict d;
        d["meg_edges"] = a.meg_edges;
        d["logical_stream"] = a.logical_stream;
        d["num_logical_streams"] = a.num_logical_streams;
        d["logical_syncs"] = a.logical_syncs;
        return d;
      },
      py::arg("num_nodes"), py::arg("edges"),
      "Logical streams of a DAG whose nodes are numbered in topological order.");
  s.def(
      "fold_streams",
      [](int num_nodes, std::vector<std::pair<int, int>> edges, int max_streams) {
        const auto dag = make_dag(num_nodes, std::move(edges));
        const auto p = scheduling::fold_streams(dag, scheduling::assign_streams(dag), max_streams);
        py::dict d;
        d["num_streams"] = p.num_streams;
        d["stream"] = p.stream;
        d["order"] = p.order;
        d["ops"] = p.ops;
        d["syncs"] = p.syncs;
        return d;
      },
      py::arg("num_nodes"), py::arg("edges"), py::arg("max_streams"),
      "Physical streams (at most max_streams) with the cross-stream waits they need.");
}

}  // namespace nimble::python

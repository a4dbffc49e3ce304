// nimble._C.tuning.TuningDatabase: the SQLite store of every measurement, for Python.
#include <pybind11/stl.h>

#include "csrc/python/bindings.h"
#include "tuning/database/tuning_database.h"

namespace py = pybind11;

namespace nimble::python {

using namespace nimble::tuning;

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

}  // namespace

void bind_tuning_database(py::module_& t) {
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
}

}  // namespace nimble::python

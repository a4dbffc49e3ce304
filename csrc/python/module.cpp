#include "python/bindings.h"

PYBIND11_MODULE(_C, m) {
  m.doc() = "nimble's C++ core: program, stream assignment, runtimes, tuner";
  nimble::python::bind_runtime(m);
  nimble::python::bind_scheduling(m);
  nimble::python::bind_tuning(m);
}

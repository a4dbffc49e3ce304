#include <exception>

#include "csrc/errors.h"
#include "csrc/python/bindings.h"

namespace {

namespace py = pybind11;

// Sets the Python error to the nimble.errors class `name`. Imported when raised, not when
// this module loads: nimble/__init__.py imports the code that imports this module.
void raise_as(const char* name, const std::exception& error) {
  const py::object type = py::module_::import("nimble.errors").attr(name);
  PyErr_SetString(type.ptr(), error.what());
}

// nimble's typed errors (errors.h), wherever in the module they are thrown; any other
// exception goes on to pybind11's default translation.
void translate_error(std::exception_ptr thrown) {
  try {
    std::rethrow_exception(thrown);
  } catch (const nimble::UnsupportedOp& e) {
    raise_as("UnsupportedOpError", e);
  } catch (const nimble::NotStatic& e) {
    raise_as("NotStaticError", e);
  } catch (const nimble::BadInput& e) {
    raise_as("BadInputError", e);
  } catch (const nimble::StaleModel& e) {
    raise_as("StaleModelError", e);
  }
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "nimble's C++ core: program, stream assignment, runtimes, tuner";
  py::register_local_exception_translator(translate_error);
#ifdef NIMBLE_WITH_CUDA
  m.attr("built_with_cuda") = true;
#else
  m.attr("built_with_cuda") = false;
#endif
  nimble::python::bind_runtime(m);
  nimble::python::bind_model_watch(m);
  nimble::python::bind_scheduling(m);
  nimble::python::bind_tuning(m);
  nimble::python::bind_kernels(m);
}

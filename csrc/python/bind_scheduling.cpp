#include "python/bindings.h"

namespace nimble::python {
void bind_scheduling(pybind11::module_& m) { (void)m; }
}  // namespace nimble::python

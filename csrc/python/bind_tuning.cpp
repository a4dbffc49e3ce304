#include "python/bindings.h"

namespace nimble::python {
void bind_tuning(pybind11::module_& m) { (void)m; }
}  // namespace nimble::python

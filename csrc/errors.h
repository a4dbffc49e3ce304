#pragma once
// The user mistakes nimble reports, as C++ types. The Python module maps each, in one place
// (python/module.cpp), to its class in nimble/errors.py, so a mistake surfaces as the same
// Python exception wherever it is found. Each is a std::invalid_argument: the caller handed
// over something nimble cannot take, and C++ callers that catch that still catch these.
#include <stdexcept>

namespace nimble {

// The model holds an op a replay cannot run (no C++ schema, an in-place shape change of a
// parameter, ...). Python: nimble.UnsupportedOpError.
class UnsupportedOp : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// What runs depends on values the model computes, so one captured trace cannot stand for
// every call. Python: nimble.NotStaticError.
class NotStatic : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// What a replay was handed does not fit its program: inputs (or the model's parameters)
// that differ from those at prepare in number, shape, dtype or device, scalar values or
// places, stress delays. Python: nimble.errors.BadInputError, also a ValueError.
class BadInput : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// The model was changed after prepare in a way the program cannot follow (a parameter
// replaced or converted to another layout, a submodule or hook added or removed): the
// replay would compute what the old model did. Python: nimble.StaleModelError, which
// `Nimble` turns into a re-prepare unless prepare(..., on_change="error").
class StaleModel : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

}  // namespace nimble

"""The errors nimble raises, each saying what was expected and what came.

The C++ core raises the same classes (csrc/errors.h, mapped in csrc/python/module.cpp)."""


class NimbleError(RuntimeError):
    """Base class of nimble's own errors."""


class NotStaticError(NimbleError):
    """The model's ops depend on tensor values, so one captured trace cannot stand for it."""


class UnsupportedOpError(NimbleError):
    """The trace holds an op that the replay cannot run."""


class BadInputError(NimbleError, ValueError):
    """What the replay was handed does not fit the prepared program: a call's inputs, the
    model's parameters, scalar values or places, stress delays. A ValueError too, as these
    were before nimble typed them."""


class NotPreparedError(NimbleError):
    """The wrapper was called before `prepare`."""

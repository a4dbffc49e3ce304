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
    """The wrapper was called before `prepare`, or its program no longer fits the model."""


class StaleModelError(NotPreparedError):
    """The model changed since prepare in a way the replay cannot follow (a parameter,
    buffer or submodule replaced, added or removed, a layout or dtype converted, a hook
    added or removed, train/eval switched). Raised before anything runs; `Nimble` prepares
    again instead unless prepared with `on_change="error"`."""


class SideEffectError(NotStaticError):
    """`prepare(..., side_effects="error")`: the capture ran Python that a replay does not
    repeat (hooks, attributes the forward changes)."""

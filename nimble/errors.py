"""The errors nimble raises, each saying what was expected and what came."""


class NimbleError(RuntimeError):
    """Base class of nimble's own errors."""


class NotStaticError(NimbleError):
    """The model's ops depend on tensor values, so one captured trace cannot stand for it."""


class UnsupportedOpError(NimbleError):
    """The trace holds an op that the replay cannot run."""


class NotPreparedError(NimbleError):
    """The wrapper was called before `prepare`."""

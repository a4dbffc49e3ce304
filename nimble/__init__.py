"""nimble: capture a static PyTorch model's kernel launches once, replay them fast."""

from .errors import (
    BadInputError,
    NimbleError,
    NotPreparedError,
    NotStaticError,
    SideEffectError,
    StaleModelError,
    UnsupportedOpError,
)
from .replay.wrapper import Nimble
from .tuning.tune import tune
from .compile.backend import register as _register_compile_backend

_register_compile_backend()  # torch.compile(model, backend="nimble")

__all__ = [
    "BadInputError",
    "Nimble",
    "NimbleError",
    "NotPreparedError",
    "NotStaticError",
    "SideEffectError",
    "StaleModelError",
    "UnsupportedOpError",
    "tune",
]

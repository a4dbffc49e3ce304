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
from .replay.model_watch import _install_registration_hooks

_register_compile_backend()  # torch.compile(model, backend="nimble")
# Registration hooks that keep replays from going stale (replay/model_watch.py), installed
# before anything is compiled: torch.compile guards on the global hook dictionaries, and a
# hook added between two compiled calls would make it compile again.
_install_registration_hooks()

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

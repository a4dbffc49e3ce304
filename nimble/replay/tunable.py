"""Which prepared models take tuned kernels: the tuner measures, and `use_tuned` binds into,
the replay of a Nimble prepared for inference alone."""

from __future__ import annotations

from ..errors import NotPreparedError
from .inference import InferenceReplay


def inference_replay(fast):
    """`fast`'s replay, or a clear error when `fast` is not a prepared inference Nimble."""
    program = getattr(fast, "_program", None)
    if program is None:
        raise NotPreparedError("tune/use_tuned need a prepared Nimble: call fast.prepare(x) first")
    if not isinstance(program, InferenceReplay):
        raise NotImplementedError(
            "tuned kernels are bound into inference replays only; this Nimble was prepared "
            "with training=True"
        )
    return fast.replay

"""`python -m nimble bench` (`cli.main`): eager PyTorch against nimble, side by side.

    report       tables of rows
    cpu          inference on the CPU: one stream, several, per-op overhead, peak memory
    train        a training step on the CPU (`--train`)
    cuda         inference on a GPU: eager, a hand-captured CUDA graph, nimble on one and on
                 several streams, torch.compile (`--device cuda`)
    compiled     one model five ways: eager, torch.compile (two modes), its nimble backend,
                 prepare (`--compile-backend`)
    distributed  tuning on Ray workers: throughput, faults, the survey (its own command)

Calls are timed the one way nimble/timing.py gives.
"""

from .cli import main

__all__ = ["main"]

"""`python -m nimble bench` (`cli.main`): eager PyTorch against nimble, side by side.

    timing  the one way calls are timed: alternating rounds after a warm-up, medians
    report   tables of rows
    cpu      inference on the CPU: one stream, several, per-op overhead, peak memory
    train    a training step on the CPU (`--train`)
    cuda     inference on a GPU: eager, a hand-captured CUDA graph, nimble on one and on
             several streams, torch.compile (`--device cuda`)
"""

from .cli import main

__all__ = ["main"]

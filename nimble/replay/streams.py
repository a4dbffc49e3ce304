"""`streams='auto'`: time the replay on one stream and on the default number of streams,
keep the faster."""

from __future__ import annotations

import statistics
import time
from typing import Callable, ContextManager, Protocol

import torch

# One set for every mode. Three warm-ups: the first runs after `set_streams` start the
# worker threads and fill the memory pool, and must not be timed. Fifteen timed runs: the
# median must hold still against the machine's noise well inside the 3% margin below;
# the cost is paid once, at prepare.
_WARM_UPS = 3
_REPEATS = 15
# Multi-stream replay is kept only where it is this much faster than one stream: a tie
# goes to one stream, which has no threads to wake and no cross-stream syncs.
_REQUIRED_SPEEDUP = 0.97


def _synchronizer(inputs: list[torch.Tensor]) -> Callable[[], None]:
    """Waits for the work queued on the devices of `inputs`: a replay on CUDA returns
    before its kernels have run, so the clock is read only after this."""
    devices = sorted({t.device for t in inputs if t.device.type == "cuda"}, key=str)

    def synchronize() -> None:
        for device in devices:
            torch.cuda.synchronize(device)

    return synchronize


class Program(Protocol):
    """A prepared program (inference, forward-backward or whole step), as timed here."""

    replays: list
    example_inputs: list[torch.Tensor]

    def run_example(self) -> None:
        """One run of every replay on `example_inputs`."""

    def snapshot(self) -> ContextManager:
        """Puts back, on leaving `with`, what runs of `run_example` changed."""


def choose_streams(program: Program) -> None:
    """Keeps multi-stream replay of the program only where it measured faster than one
    stream; the model, optimizer and inputs are left as they were."""
    synchronize = _synchronizer(program.example_inputs)

    def median_s() -> float:
        for _ in range(_WARM_UPS):
            program.run_example()
        times = []
        for _ in range(_REPEATS):
            synchronize()
            start = time.perf_counter()
            program.run_example()
            synchronize()
            times.append(time.perf_counter() - start)
        return statistics.median(times)

    with program.snapshot():
        single = median_s()
        for replay in program.replays:
            replay.set_streams(0)  # the default count for this machine and graph
        if all(r.num_streams == 1 for r in program.replays) or (
            median_s() >= single * _REQUIRED_SPEEDUP
        ):
            for replay in program.replays:
                replay.set_streams(1)

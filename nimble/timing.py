"""The one way the benchmarks (and the tuner's before/after check) time calls: compared calls
alternate, round after round, after a warm-up, so that every mode sees the same machine state
(clock boosts, caches, load from elsewhere); the reports take medians.

A `measure` turns one call into one sample. On the CPU it is `wall_seconds` (a sample is
seconds); on a GPU `CudaTimer` waits for the device and gives wall and device seconds.
"""

from __future__ import annotations

import random
import statistics
import time
from typing import Any, Callable, Sequence

Clock = Callable[[], float]


def median_ms(seconds: Sequence[float]) -> float:
    return statistics.median(seconds) * 1e3


def p99_ms(seconds: Sequence[float]) -> float:
    """The 99th percentile (nearest rank): the slowest of fewer than 100 samples."""
    ordered = sorted(seconds)
    return ordered[min(len(ordered) - 1, -(-99 * len(ordered) // 100) - 1)] * 1e3


def wall_seconds(fn: Callable[[], Any], clock: Clock = time.perf_counter) -> float:
    start = clock()
    fn()
    return clock() - start


def alternate(
    calls: Sequence[Callable[[], Any]],
    runs: int,
    warmup: int,
    measure: Callable[[Callable[[], Any]], Any] = wall_seconds,
    after_round: Callable[[], Any] | None = None,
    before_each: Callable[[], Any] | None = None,
    shuffle_seed: int | None = None,
) -> list[list]:
    """`warmup + runs` rounds, each measuring every call once, in the order given. Returns
    each call's samples of the `runs` timed rounds; `after_round`, if given, runs untimed
    after each timed round, `before_each` untimed before every call (an idle spell, other
    work on the same cores). With `shuffle_seed`, each round calls them in a new random
    order (seeded): in a fixed order each call always follows the same one, and what that
    one leaves behind (threads still spinning on the cores, caches) falls on it alone."""

    def one(fn: Callable[[], Any]) -> Any:
        if before_each is not None:
            before_each()
        return measure(fn)

    samples: list[list] = [[] for _ in calls]
    order = list(range(len(calls)))
    shuffler = random.Random(shuffle_seed) if shuffle_seed is not None else None
    for i in range(warmup + runs):
        if shuffler is not None:
            shuffler.shuffle(order)
        taken: list = [None] * len(calls)
        for k in order:
            taken[k] = one(calls[k])
        if i >= warmup:
            for mine, sample in zip(samples, taken):
                mine.append(sample)
            if after_round is not None:
                after_round()
    return samples


def back_to_back(
    calls: Sequence[Callable[[], Any]],
    runs: int,
    warmup: int,
    measure: Callable[[Callable[[], Any]], Any] = wall_seconds,
) -> list[list]:
    """Each call `warmup` times, then `runs` timed times in a row, one call after the other:
    the warm caches a model served alone keeps (its weights stay in the caches between
    calls), which `alternate` takes away from all alike. Returns each call's samples."""
    samples: list[list] = []
    for fn in calls:
        for _ in range(warmup):
            fn()
        samples.append([measure(fn) for _ in range(runs)])
    return samples


class CudaTimer:
    """Measures one call on a GPU as (wall seconds, device seconds).

    Wall: from before the call until the device has finished it (the call, then
    `synchronize`), what a caller waiting for the result sees. Device: between two events
    recorded on the current stream just before and just after the call, so every kernel
    the call enqueues on that stream, or on streams that join it, lies between them. The
    start event is recorded outside the wall interval; the end event is enqueued behind
    the call's work, so it adds nothing to the wall time of a call the device is still
    busy with.
    """

    def __init__(
        self,
        clock: Clock = time.perf_counter,
        make_event: Callable[[], Any] | None = None,
        synchronize: Callable[[], None] | None = None,
    ) -> None:
        if make_event is None or synchronize is None:
            import torch

            make_event = make_event or (lambda: torch.cuda.Event(enable_timing=True))
            synchronize = synchronize or torch.cuda.synchronize
        self._clock = clock
        self._start, self._end = make_event(), make_event()
        self._synchronize = synchronize

    def __call__(self, fn: Callable[[], Any]) -> tuple[float, float]:
        self._synchronize()  # work left from before must not count
        self._start.record()
        start = self._clock()
        fn()
        self._end.record()
        self._synchronize()
        wall = self._clock() - start
        return wall, self._start.elapsed_time(self._end) / 1e3  # elapsed_time is in ms

"""Inference on the CPU: eager, nimble on one stream and on several, timed side by side
in one process, with the replay's per-op overhead and peak memory."""

from __future__ import annotations

import os
import statistics
import time

import torch

from ..replay.wrapper import Nimble
from ..testing import assert_matches_eager
from ..zoo import build
from ..timing import alternate, median_ms


def _quiet_profiler_without_gpu() -> None:
    """On a machine without a GPU, torch's profiler (kineto) logs `ERROR: ...
    gpuGetDeviceCount failed with code 35` when it starts: a false alarm, its only
    message there. Kineto reads its log level once, at its first use in the process, so
    this holds for the process; a level the user set is kept."""
    if not torch.cuda.is_available():
        os.environ.setdefault("KINETO_LOG_LEVEL", "5")


def peak_allocated_bytes(fn) -> int:
    """Peak of the CPU bytes allocated and not yet freed while `fn` runs (tensors that
    existed before, such as parameters, do not count). Read from the profiler's record of
    every allocation and free: per-op memory totals would hide memory an op allocates and
    frees itself (a convolution's scratch space)."""
    from torch.profiler import ProfilerActivity, profile

    _quiet_profiler_without_gpu()
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True, acc_events=True) as prof:
        fn()
    cpu = torch._C._autograd.DeviceType.CPU
    events = [e for e in prof.profiler.kineto_results.events()
              if e.name() == "[memory]" and e.device_type() == cpu]
    current = peak = 0
    for event in sorted(events, key=lambda e: e.start_ns()):
        current += event.nbytes()
        peak = max(peak, current)
    return peak


def measure(spec: str, batch: int, image_size: int, runs: int, warmup: int,
            streams: int | str | None = None, out_variant_max_bytes: int = 0) -> dict:
    """Eager, single-stream and multi-stream replay of one model, timed side by side.
    `streams`: the multi-stream mode (default: as many streams as cores, capped by the
    op graph's logical streams; 'auto' lets prepare choose). `out_variant_max_bytes` goes
    to both replays' prepare."""
    model, example = build(spec, batch=batch, image_size=image_size)
    start = time.perf_counter()
    fast = Nimble(model).prepare(example, out_variant_max_bytes=out_variant_max_bytes)
    prepare_s = time.perf_counter() - start
    multi = Nimble(model).prepare(example, streams=streams or (os.cpu_count() or 1),
                                  out_variant_max_bytes=out_variant_max_bytes)
    x = torch.randn_like(example)
    with torch.no_grad():
        expected = model(x)
        # The CPU lowering's prepacked kernels round differently from eager's: the suite's
        # bound, relative to the output's scale, or float64's where float32 rounding alone
        # exceeds it (nimble/testing.py).
        assert_matches_eager(fast(x), expected, what=f"{spec}: nimble", model=model, inputs=(x,))
        assert_matches_eager(multi(x), expected, what=f"{spec}: nimble on several streams",
                             model=model, inputs=(x,))

        # Two phases, each alternating its pair: OpenMP teams left spinning by one mode
        # would otherwise slow whichever mode runs next. Phase 1: eager vs one stream;
        # phase 2: one stream vs several. The overhead's timed replays are taken between
        # phase 1's pairs, spread over the same stretch of time: a burst of load from
        # elsewhere then moves a few samples, not their median.
        timed_runs = []
        eager_times, replay_times = alternate(
            [lambda: model(x), lambda: fast(x)], runs, warmup,
            after_round=lambda: timed_runs.append(fast.replay.run_timed([x])))
        single_times, multi_times = alternate([lambda: fast(x), lambda: multi(x)], runs, warmup)

    # Overhead: within one replay, its wall time minus the time spent inside the ops'
    # kernels (each op timed on its own), per op; median over replays. Taking both from
    # the same replay keeps machine noise out of the difference.
    # Freeing intermediates is timed apart: it is memory traffic eager pays as well.
    overheads, frees, own, outside = [], [], [], []
    for total_ns, ops in timed_runs:
        inside = sum(end - begin for _op, _stream, begin, end, _free in ops)
        freeing = sum(free for *_, free in ops)
        own.append(inside / 1e6)
        outside.append((total_ns - inside) / 1e3)
        overheads.append(outside[-1] / max(1, len(ops)))
        frees.append(freeing / 1e3 / max(1, len(ops)))
    own_ms = statistics.median(own)
    # Peak memory beyond the model's parameters: eager's activations; the replay's
    # resident memory (buffers, its pool's block) plus what it allocates while it runs.
    with torch.no_grad():
        eager_peak = peak_allocated_bytes(lambda: model(x))
    replay_peak = fast.memory["resident_bytes"] + peak_allocated_bytes(lambda: fast(x))
    eager_ms, nimble_ms = median_ms(eager_times), median_ms(replay_times)
    multi_ms = median_ms(multi_times)
    # What every call checks of the model before it runs (its structure, parameters and
    # buffers), alone: the median of several timings of many checks each.
    params = sum(1 for _ in model.parameters())
    check_ns = statistics.median(fast.replay.time_checks(2000) for _ in range(7))
    schedule = multi.schedule
    return {
        "model": spec,
        "batch": batch,
        "image_size": tuple(example.shape[-2:])[0] if example.dim() == 4 else None,
        "eager_ms": round(eager_ms, 4),
        "nimble_ms": round(nimble_ms, 4),
        "speedup": round(eager_ms / nimble_ms, 3),
        "multi_ms": round(multi_ms, 4),
        "multi_vs_single": round(median_ms(single_times) / multi_ms, 3),
        "logical_streams": schedule["logical_streams"],
        "physical_streams": schedule["physical_streams"],
        "syncs": schedule["physical_syncs"],
        "buffers_mb": round(fast.memory["buffer_bytes"] / 2**20, 2),
        "unplanned_mb": round(fast.memory["buffer_bytes_unplanned"] / 2**20, 2),
        "eager_peak_mb": round(eager_peak / 2**20, 3),
        "pool_mb": round(((fast.memory["pool"] or {}).get("block_bytes", 0)) / 2**20, 3),
        "replay_peak_mb": round(replay_peak / 2**20, 3),
        "prepare_s": round(prepare_s, 3),
        "ops": fast.num_ops,
        "ops_own_ms": round(own_ms, 4),
        "overhead_us_per_op": round(statistics.median(overheads), 3),
        "of_which_free_us": round(statistics.median(frees), 3),
        # Per call, outside the kernels (the same timed replays): never a difference of
        # two medians from different runs, which noise could make negative.
        "call_overhead_us": round(statistics.median(outside), 1),
        "parameters": params,
        "check_us": round(check_ns / 1e3, 3),
        "check_us_per_100_params": round(check_ns / 1e3 / params * 100, 3),
        "threads": torch.get_num_threads(),
    }


COLUMNS = [
    ("model", "{}"), ("batch", "{}"), ("image_size", "{}"), ("eager_ms", "{:.3f}"),
    ("nimble_ms", "{:.3f}"), ("speedup", "{:.2f}x"), ("multi_ms", "{:.3f}"),
    ("multi_vs_single", "{:.2f}x"), ("logical_streams", "{}"), ("physical_streams", "{}"),
    ("buffers_mb", "{:.1f}"), ("unplanned_mb", "{:.1f}"), ("eager_peak_mb", "{:.3f}"),
    ("pool_mb", "{:.3f}"), ("replay_peak_mb", "{:.3f}"), ("prepare_s", "{:.2f}"), ("ops", "{}"),
    ("overhead_us_per_op", "{:.3f}"), ("of_which_free_us", "{:.3f}"), ("check_us", "{:.2f}"),
    ("check_us_per_100_params", "{:.2f}"),
]

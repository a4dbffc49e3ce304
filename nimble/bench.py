"""`python -m nimble bench`: eager and nimble side by side, in one process.

Compared modes alternate run by run (after a warm-up), so both see the same machine
state; the table reports medians. Several models are measured each in a process of its
own: a process that has already run other models has a fragmented heap, and the replay's
per-op overhead grows with it (convnext_tiny 0.8 -> 1.1 us after six other models), so
a model's numbers would depend on the ones listed before it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import torch

from .wrapper import Nimble
from .zoo import ALL_MODELS, build, check_spec


def _median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1e3


def _alternate(first, second, runs: int, warmup: int,
               after_pair=None) -> tuple[list[float], list[float]]:
    """Times `first` and `second` in turn; `after_pair`, if given, runs untimed after each
    timed pair."""
    a, b = [], []
    for i in range(warmup + runs):
        t0 = time.perf_counter()
        first()
        t1 = time.perf_counter()
        second()
        t2 = time.perf_counter()
        if i >= warmup:
            a.append(t1 - t0)
            b.append(t2 - t1)
            if after_pair is not None:
                after_pair()
    return a, b


def peak_allocated_bytes(fn) -> int:
    """Peak of the CPU bytes allocated and not yet freed while `fn` runs (tensors that
    existed before, such as parameters, do not count). Read from the profiler's record of
    every allocation and free: per-op memory totals would hide memory an op allocates and
    frees itself (a convolution's scratch space)."""
    from torch.profiler import ProfilerActivity, profile

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
        torch.testing.assert_close(fast(x), expected)
        torch.testing.assert_close(multi(x), expected, rtol=1e-4, atol=1e-4)

        # Two phases, each alternating its pair: OpenMP teams left spinning by one mode
        # would otherwise slow whichever mode runs next. Phase 1: eager vs one stream;
        # phase 2: one stream vs several. The overhead's timed replays are taken between
        # phase 1's pairs, spread over the same stretch of time: a burst of load from
        # elsewhere then moves a few samples, not their median.
        timed_runs = []
        eager_times, replay_times = _alternate(
            lambda: model(x), lambda: fast(x), runs, warmup,
            after_pair=lambda: timed_runs.append(fast.replay.run_timed([x])))
        single_times, multi_times = _alternate(lambda: fast(x), lambda: multi(x), runs, warmup)

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
    eager_ms, nimble_ms = _median_ms(eager_times), _median_ms(replay_times)
    multi_ms = _median_ms(multi_times)
    schedule = multi.schedule
    return {
        "model": spec,
        "batch": batch,
        "image_size": tuple(example.shape[-2:])[0] if example.dim() == 4 else None,
        "eager_ms": round(eager_ms, 4),
        "nimble_ms": round(nimble_ms, 4),
        "speedup": round(eager_ms / nimble_ms, 3),
        "multi_ms": round(multi_ms, 4),
        "multi_vs_single": round(_median_ms(single_times) / multi_ms, 3),
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
        "threads": torch.get_num_threads(),
    }


COLUMNS = [
    ("model", "{}"), ("batch", "{}"), ("image_size", "{}"), ("eager_ms", "{:.3f}"),
    ("nimble_ms", "{:.3f}"), ("speedup", "{:.2f}x"), ("multi_ms", "{:.3f}"),
    ("multi_vs_single", "{:.2f}x"), ("logical_streams", "{}"), ("physical_streams", "{}"),
    ("buffers_mb", "{:.1f}"), ("unplanned_mb", "{:.1f}"), ("eager_peak_mb", "{:.3f}"),
    ("pool_mb", "{:.3f}"), ("replay_peak_mb", "{:.3f}"), ("prepare_s", "{:.2f}"), ("ops", "{}"),
    ("overhead_us_per_op", "{:.3f}"), ("of_which_free_us", "{:.3f}"),
]


def print_table(rows: list[dict], out=sys.stdout, columns=COLUMNS) -> None:
    cells = [[name for name, _ in columns]]
    for row in rows:
        cells.append([fmt.format(row[name]) for name, fmt in columns])
    widths = [max(len(r[i]) for r in cells) for i in range(len(columns))]
    for n, r in enumerate(cells):
        print(" | ".join(c.rjust(w) for c, w in zip(r, widths)), file=out)
        if n == 0:
            print("-+-".join("-" * w for w in widths), file=out)


def _measure_apart(spec: str, args: argparse.Namespace, streams) -> tuple[dict | None, int]:
    """Measures one model in a child process (see the module's docstring). Returns its
    row, or None and the child's exit code; the child's errors reach stderr as they are."""
    argv = [sys.executable, "-m", "nimble", "bench", "--model", spec, "--json",
            "--batch", str(args.batch), "--image-size", str(args.image_size),
            "--runs", str(args.runs), "--warmup", str(args.warmup),
            "--out-variant-max-bytes", str(args.out_variant_max_bytes)]
    if streams is not None:
        argv += ["--streams", str(streams)]
    if args.train:
        argv += ["--train", "--optimizer", args.optimizer] + (["--breakdown"] if args.breakdown else [])
    done = subprocess.run(argv, stdout=subprocess.PIPE, text=True)
    if done.returncode != 0:
        return None, done.returncode
    return json.loads(done.stdout), 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m nimble bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", action="append",
                        help="torchvision:NAME or transformer:encoder; repeatable; 'all' for "
                             "every model of the correctness suite (default torchvision:resnet18)")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--image-size", type=int, default=64)
    parser.add_argument("--runs", type=int, default=50, help="timed runs per side (default 50)")
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--streams", default=None,
                        help="multi-stream mode: N streams or 'auto' (default: one per core, "
                             "capped by the op graph's logical streams)")
    parser.add_argument("--out-variant-max-bytes", type=int, default=0, metavar="N",
                        help="prepare(out_variant_max_bytes=N): preallocated .out buffers only "
                             "for results of at most N bytes (default 0: all; 1: none, which "
                             "brings the replay's peak memory to about eager's)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--train", action="store_true",
                        help="time one training step (eager; forward+backward replayed with an "
                             "eager optimizer; the whole step replayed on one and on several "
                             "streams); torchvision models, 10 classes")
    parser.add_argument("--optimizer", choices=["sgd", "adam"], default="sgd",
                        help="with --train: SGD (momentum 0.9, weight decay 1e-4) or Adam")
    parser.add_argument("--breakdown", action="store_true",
                        help="with --train: kernel time of the whole-step replay by op")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    if args.batch < 1 or args.image_size < 1:
        parser.error(f"--batch and --image-size must be positive, got {args.batch} and "
                     f"{args.image_size}")
    if args.out_variant_max_bytes < 0:
        parser.error("--out-variant-max-bytes must be 0 (no limit) or a positive byte count")
    streams = args.streams
    if streams is not None and streams != "auto":
        if not streams.isdigit() or int(streams) < 1:
            parser.error(f"--streams takes a positive number or 'auto', got {streams!r}")
        streams = int(streams)
    specs = args.model or ["torchvision:resnet18"]
    if specs == ["all"]:
        specs = ALL_MODELS
    if args.train:
        from . import bench_train

        if specs == ALL_MODELS:
            specs = [s for s in specs if s.startswith("torchvision:")]
    for spec in specs:
        try:
            check_spec(spec)
        except ValueError as error:
            parser.error(str(error))
    rows = []
    for spec in specs:
        if len(specs) > 1:
            row, code = _measure_apart(spec, args, streams)
            if row is None:
                return code
        else:
            try:
                if args.train:
                    row = bench_train.measure_train(
                        spec, args.batch, args.image_size, args.runs, args.warmup, streams,
                        args.optimizer, args.breakdown)
                else:
                    row = measure(spec, args.batch, args.image_size, args.runs, args.warmup,
                                  streams, args.out_variant_max_bytes)
            except ValueError as error:
                parser.error(str(error))
        rows.append(row)
        if not args.json:
            print(f"measured {spec}", file=sys.stderr)
    if args.json:
        print(json.dumps(rows[0] if len(rows) == 1 else rows, indent=2))
    elif args.train:
        print_table(rows, columns=bench_train.COLUMNS)
        for row in rows:
            if "breakdown" in row:
                bench_train.print_breakdown(row)
    else:
        print_table(rows)
    return 0

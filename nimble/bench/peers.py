"""`--peers`: nimble against what a user who wants fast CPU inference would pick instead, in
one process: eager; nimble's default `prepare` (convolutions lowered to prepacked oneDNN
and MKL calls) and nimble with the lowering off (ATen's convolutions, as captured);
`torch.compile` with inductor, without and with `freezing` (weights constant-folded and
prepacked, inductor's own CPU inference mode); ONNX Runtime on a `torch.onnx.export`ed
model and OpenVINO on a converted one (f32, the same thread count, latency hint), from the
optional extra `pip install nimble[peers]`.

A runtime that is not installed, or that fails to build or run the model, is skipped with
a message saying why. Every runtime's output is checked against eager's first (max abs
difference at most 1e-3 of eager's largest magnitude, nimble/testing.py); one that differs
more is reported and not timed. The rest
alternate call by call after a warm-up, then each runs back to back (warm caches); the row
reports medians of both, each runtime's speedup over eager, its prepare (compile, export)
seconds (inductor's with torch's caches off: a user's first compile) and its time as a
multiple of the model's floor on this machine (floors.py: weight bytes over the measured
memory bandwidth, arithmetic over the measured peak).
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from typing import Any, Callable

import torch

from ..replay.wrapper import Nimble
from ..testing import float32_limited, mismatch
from ..zoo import build
from ..timing import alternate, back_to_back, median_ms, p99_ms
from . import floors

# Relative to eager's largest magnitude: other runtimes' kernels (Winograd, other blockings)
# round differently from nimble's.
TOLERANCE = 1e-3


def _nimble(model, x):
    fast = Nimble(model).prepare(x)
    return lambda t: fast(t)


def _nimble_aten(model, x):
    fast = Nimble(model).prepare(x, lower_for_cpu=False)
    return lambda t: fast(t)


def _inductor(freezing: bool) -> Callable:
    def make(model, x):
        import torch._inductor.config as config

        torch._dynamo.reset()
        config.freezing = freezing
        # A user's first compile, as compiled.py measures it: torch's on-disk caches off.
        config.force_disable_caches = True
        compiled = torch.compile(model)
        compiled(x)  # compiles; freezing reads the weights now
        config.freezing = False
        return compiled

    return make


def _onnx_file(model, x, directory: str) -> str:
    path = os.path.join(directory, "model.onnx")
    # The exporter prints a failing model's graph to standard output, which carries the
    # --json row of a child process: it goes to standard error instead.
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    # nn.MultiheadAttention's inference fast path (vit_b_16's encoder, under no_grad in eval
    # mode) traces to aten::_native_multi_head_attention, which has no ONNX export: the
    # exporter gets the same layers as their composite ops (the same values).
    fastpath = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        torch.onnx.export(model, (x,), path, dynamo=False, opset_version=17)
    finally:
        torch.backends.mha.set_fastpath_enabled(fastpath)
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)
    return path


def _onnxruntime(model, x):
    import onnxruntime as ort

    with tempfile.TemporaryDirectory() as directory:
        path = _onnx_file(model, x, directory)
        options = ort.SessionOptions()
        options.intra_op_num_threads = torch.get_num_threads()
        options.inter_op_num_threads = 1
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    return lambda t: torch.from_numpy(session.run(None, {name: t.numpy()})[0])


def _openvino(model, x):
    import openvino as ov

    converted = ov.convert_model(model, example_input=x)
    compiled = ov.Core().compile_model(converted, "CPU", {
        "INFERENCE_PRECISION_HINT": "f32",
        "INFERENCE_NUM_THREADS": torch.get_num_threads(),
        "PERFORMANCE_HINT": "LATENCY",
    })
    request = compiled.create_infer_request()

    def run(t):
        request.infer({0: t.numpy()})
        return torch.from_numpy(request.get_output_tensor(0).data.copy())

    return run


# (runtime, the module it needs or None, how to build its call from (model, example))
RUNTIMES: list[tuple[str, str | None, Callable[[Any, torch.Tensor], Callable]]] = [
    ("nimble", None, _nimble),
    ("nimble_aten", None, _nimble_aten),
    ("inductor", None, _inductor(False)),
    ("inductor_freezing", None, _inductor(True)),
    ("onnxruntime", "onnxruntime", _onnxruntime),
    ("openvino", "openvino", _openvino),
]


def _nimble_tuned(database: str) -> Callable:
    def make(model, x):
        fast = Nimble(model).prepare(x, tuned=database)
        return lambda t: fast(t)

    return make


def missing_reason(module: str | None) -> str | None:
    if module is None:
        return None
    import importlib.util

    if importlib.util.find_spec(module) is None:
        return f"{module} is not installed (pip install nimble[peers])"
    return None


def parse_pattern(words: list[str]) -> tuple[str, float]:
    """`interleaved`, `idle MS` or `busy [MS]` (command-line words) as (name, milliseconds)."""
    name, *rest = words
    if name not in ("interleaved", "idle", "busy") or len(rest) > 1:
        raise ValueError(f"a pattern is 'interleaved', 'idle MS' or 'busy [MS]', got {' '.join(words)!r}")
    if name == "idle" and not rest:
        raise ValueError("the idle pattern needs its milliseconds: --pattern idle 200")
    if name == "interleaved" and rest:
        raise ValueError("the interleaved pattern takes no milliseconds")
    try:
        ms = float(rest[0]) if rest else (BUSY_MS if name == "busy" else 0.0)
    except ValueError:
        raise ValueError(f"--pattern {name}: {rest[0]!r} is not a number of milliseconds") from None
    if ms < 0:
        raise ValueError(f"--pattern {name}: milliseconds must be at least 0, got {ms:g}")
    return name, ms


def pattern_key(name: str, ms: float) -> str:
    return f"idle{ms:g}ms" if name == "idle" else name


# Milliseconds of other work on the same cores before each call of the busy pattern.
BUSY_MS = 5.0


def _before_each(name: str, ms: float) -> Callable[[], Any] | None:
    """What runs untimed before each call: nothing (the calls of all runtimes in turn), an
    idle spell, or another program's work on the cores (numpy's BLAS threads, which a
    replay's threads then share the cores with)."""
    if name == "idle":
        return lambda: time.sleep(ms / 1e3)
    if name == "busy":
        import numpy as np

        a = np.random.default_rng(0).standard_normal((192, 192), dtype=np.float32)

        def load() -> None:
            end = time.perf_counter() + ms / 1e3
            while time.perf_counter() < end:
                a @ a
        return load
    return None


def measure_peers(spec: str, batch: int, image_size: int, runs: int, warmup: int,
                  only: list[str] | None = None, tuned: str | None = None,
                  patterns: list[tuple[str, float]] | None = None) -> dict:
    """One row: each runtime's median and 99th-percentile milliseconds, speedup over eager
    and prepare seconds; `skipped` says why a runtime is absent from it. `only` limits the
    runtimes; `tuned` (a tuning database) adds nimble prepared with it, `nimble_tuned`;
    `patterns` ((name, ms) from parse_pattern) times every runtime again in each."""
    model, example = build(spec, batch=batch, image_size=image_size)
    row: dict = {"model": spec, "batch": batch, "image_size": image_size,
                 "threads": torch.get_num_threads(), "skipped": {}}
    x = torch.randn_like(example)
    calls: dict[str, Callable[[], Any]] = {}
    with torch.no_grad():
        expected = model(x)
        calls["eager"] = lambda: model(x)
        runtimes = (RUNTIMES[:1] + ([("nimble_tuned", None, _nimble_tuned(tuned))] if tuned else [])
                    + RUNTIMES[1:])
        for name, module, make in runtimes:
            if only and name not in only and name != "nimble_tuned":
                continue
            reason = missing_reason(module)
            if reason is None:
                try:
                    start = time.perf_counter()
                    call = make(model, example)
                    row[f"{name}_prepare_s"] = round(time.perf_counter() - start, 3)
                    got = call(x)
                    row[f"{name}_max_diff"] = (got - expected).abs().max().item()
                    differs = mismatch(got, expected, tolerance=TOLERANCE)
                    # Where float32's own rounding exceeds the tolerance, float64 judges.
                    if differs is not None and not float32_limited(got, expected, model, (x,),
                                                                   TOLERANCE):
                        reason = f"differs from eager, not timed: {differs}"
                except Exception as error:  # a peer that cannot take the model is reported
                    reason = f"failed: {type(error).__name__}: {str(error).splitlines()[0][:200]}"
            if reason is not None:
                row["skipped"][name] = reason
                print(f"bench --peers: {spec}: {name} skipped: {reason}", file=sys.stderr)
                continue
            calls[name] = lambda c=call: c(x)
        # A new order each round: a runtime's threads spin on the cores after its call
        # (ONNX Runtime's workers, eager's OpenMP team) and in a fixed order would always
        # slow the same runtime, the one after it.
        samples = alternate(list(calls.values()), runs, warmup, shuffle_seed=0)
        warm = back_to_back(list(calls.values()), runs, warmup)
        by_pattern = {pattern_key(name, ms): alternate(list(calls.values()), runs, warmup,
                                                        before_each=_before_each(name, ms),
                                                        shuffle_seed=0)
                      for name, ms in patterns or []}
        row.update(floors.machine())
        row.update(floors.model_cost(model, x))
    row["patterns"] = list(by_pattern)
    row.update(floors.floor_ms(row, row))
    eager_ms = median_ms(samples[0])
    for name, times, warm_times in zip(calls, samples, warm):
        ms = median_ms(times)
        row[f"{name}_ms"] = round(ms, 4)
        row[f"{name}_b2b_ms"] = round(median_ms(warm_times), 4)
        row[f"{name}_p99_ms"] = round(p99_ms(times), 4)
        row[f"{name}_b2b_p99_ms"] = round(p99_ms(warm_times), 4)
        for key, pattern_samples in by_pattern.items():
            taken = pattern_samples[list(calls).index(name)]
            row[f"{name}_{key}_ms"] = round(median_ms(taken), 4)
            row[f"{name}_{key}_p99_ms"] = round(p99_ms(taken), 4)
        # From the rounded time, as a reader of the row would compute it.
        row[f"{name}_floors"] = round(row[f"{name}_ms"] / row["floor_ms"], 2)
        row[f"{name}_b2b_floors"] = round(row[f"{name}_b2b_ms"] / row["floor_ms"], 2)
        if name != "eager":
            row[f"{name}_speedup"] = round(eager_ms / ms, 3)
    return row


def print_report(rows: list[dict], out=None) -> None:
    """Per model: its floor, then one line per runtime: milliseconds alternating and back to
    back, each as a multiple of the floor, speedup over eager, prepare seconds."""
    for row in rows:
        print(f"{row['model']} batch {row['batch']} image {row['image_size']} "
              f"({row['threads']} threads): floor {row['floor_ms']:.3f} ms "
              f"({row['floor_bound']}: {row['weight_bytes'] / 1e6:.1f} MB at "
              f"{row['bandwidth_gb_s']} GB/s, {row['flops'] / 1e9:.2f} GFLOP at "
              f"{row['peak_gflop_s']} GFLOP/s)", file=out)
        print(f"  {'':18s} {'alternating':>12s} {'':>7s} {'back to back':>13s} {'':>7s} "
              f"{'vs eager':>8s}", file=out)
        names = ["eager"] + [shown for name, _, _ in RUNTIMES
                             for shown in ([name, "nimble_tuned"] if name == "nimble" else [name])]
        for name in names:
            if f"{name}_ms" in row:
                speedup = row.get(f"{name}_speedup", 1.0)
                prepare = row.get(f"{name}_prepare_s")
                print(f"  {name:18s} {row[f'{name}_ms']:9.3f} ms {row[f'{name}_floors']:6.1f}F "
                      f"{row[f'{name}_b2b_ms']:10.3f} ms {row[f'{name}_b2b_floors']:6.1f}F "
                      f"{speedup:7.2f}x"
                      + (f"  prepare {prepare:7.2f} s" if prepare is not None else ""), file=out)
            elif name in row["skipped"]:
                print(f"  {name:18s} skipped: {row['skipped'][name]}", file=out)
        _print_patterns(row, names, out)


def _columns(row: dict) -> list[tuple[str, str | None]]:
    """(title, key) of each timing a row holds: back to back, alternating, then its patterns;
    key None is the alternating run, whose fields carry no key (`nimble_ms`)."""
    return [("back to back", "b2b"), ("alternating", None)] + [
        (key, key) for key in row.get("patterns", [])]


def _ms(row: dict, name: str, key: str | None, p99: bool = False) -> float:
    return row[f"{name}{f'_{key}' if key else ''}{'_p99' if p99 else ''}_ms"]


def _versus_best_peer(row: dict, key: str | None) -> str:
    """The faster peer's median over nimble's in timing `key` ("no peer" without one)."""
    peers = [p for p in ("onnxruntime", "openvino") if f"{p}_ms" in row]
    if not peers:
        return "no peer"
    return f"{min(_ms(row, p, key) for p in peers) / _ms(row, 'nimble', key):.2f}x"


def _print_patterns(row: dict, names: list[str], out) -> None:
    """Median and 99th percentile of every runtime in each pattern, back to back first, and
    nimble's median against the faster peer's."""
    shown = [name for name in names if f"{name}_ms" in row]
    columns = _columns(row)
    print(f"  {'median / p99 ms':18s} " + " ".join(f"{title:>19s}" for title, _ in columns),
          file=out)
    for name in shown:
        cells = [f"{_ms(row, name, key):9.3f} /{_ms(row, name, key, p99=True):8.3f}"
                 for _, key in columns]
        print(f"  {name:18s} " + " ".join(f"{c:>19s}" for c in cells), file=out)
    if "nimble" in shown and any(p in shown for p in ("onnxruntime", "openvino")):
        ratios = [_versus_best_peer(row, key) for _, key in columns]
        print(f"  {'nimble vs best peer':18s} " + " ".join(f"{r:>19s}" for r in ratios),
              file=out)


def print_summary(rows: list[dict], out=None) -> None:
    """One line per measured row (model, batch, image): nimble's median against the faster
    peer's in every pattern (above 1.00x: nimble faster), and nimble's own 99th percentile
    against its median in each."""
    columns = _columns(rows[0]) if rows else []
    print("\nnimble against the faster peer (its p99 / median in brackets):", file=out)
    print(f"  {'model':32s} {'batch':>5s} {'image':>5s} "
          + " ".join(f"{title:>18s}" for title, _ in columns), file=out)
    for row in rows:
        cells = [f"{_versus_best_peer(row, key)} "
                 f"({_ms(row, 'nimble', key, p99=True) / _ms(row, 'nimble', key):.2f})"
                 if "nimble_ms" in row else "-" for _, key in columns]
        print(f"  {row['model']:32s} {row['batch']:5d} {row['image_size']:5d} "
              + " ".join(f"{c:>18s}" for c in cells), file=out)

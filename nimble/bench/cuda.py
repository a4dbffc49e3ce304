"""Inference on a GPU, in one process: eager PyTorch; the CUDA graph a user would capture by
hand instead of using nimble; nimble on one stream; nimble on several streams; optionally
`torch.compile(mode="reduce-overhead")`.

Every variant's outputs are checked against eager on two fresh inputs before anything is
timed. Then the variants alternate, one call each per round (after a warm-up), and the
report takes medians of each call's wall time (until the device has finished) and device
time (CUDA events); ratios between variants come from those medians of the same run.

Every variant hands out outputs in memory its next call overwrites, as a hand-captured
graph and torch.compile's CUDA graphs do: nimble is prepared with copy_outputs=False, so
no variant pays for a copy that another skips.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch.utils._pytree import tree_leaves

from ..replay.wrapper import Nimble
from ..zoo import build
from .report import print_table
from ..timing import CudaTimer, alternate, median_ms

# float32 on a GPU: the variants may run other kernels than eager (torch.compile's fused
# ones), whose sums round differently.
TOLERANCE = {"rtol": 1e-3, "atol": 1e-3}

# (key, a, b): how many times faster variant a ran than variant b (b's time / a's).
RATIOS = [
    ("nimble_1_vs_cuda_graph", "nimble_1", "cuda_graph"),
    ("nimble_multi_vs_nimble_1", "nimble_multi", "nimble_1"),
    ("nimble_multi_vs_compile", "nimble_multi", "compile"),
    ("nimble_1_vs_eager", "nimble_1", "eager"),
    ("nimble_multi_vs_eager", "nimble_multi", "eager"),
]


@dataclass
class Variant:
    """One way of running the model: `call(x)` returns its outputs. `prepare_s`: seconds to
    capture, prepare or compile it; for nimble, `schedule` is `fast.schedule` and
    `streams_requested` the `prepare(streams=...)` argument."""

    name: str
    call: Callable[[torch.Tensor], Any]
    prepare_s: float | None = None
    schedule: dict | None = None
    streams_requested: int | str | None = None


def hand_captured_graph(model: torch.nn.Module, example: torch.Tensor) -> Callable:
    """What a user writes instead of nimble, following PyTorch's CUDA graphs documentation:
    warm-up on a side stream (lazily created library handles and workspaces exist before
    the capture), capture into a `torch.cuda.CUDAGraph` reading a static input, then per
    call: copy the input into the static input, replay, return the static output."""
    static_input = example.clone()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.no_grad():
        with torch.cuda.stream(side):
            for _ in range(3):
                model(static_input)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_output = model(static_input)

    def replay(x: torch.Tensor) -> Any:
        static_input.copy_(x)
        graph.replay()
        return static_output

    return replay


def _timed_prepare(make: Callable[[], Any]) -> tuple[Any, float]:
    start = time.perf_counter()
    made = make()
    torch.cuda.synchronize()
    return made, time.perf_counter() - start


def _nimble(name: str, model: torch.nn.Module, example: torch.Tensor, streams) -> Variant:
    fast, seconds = _timed_prepare(
        lambda: Nimble(model).prepare(example, streams=streams, copy_outputs=False))
    return Variant(name, fast, seconds, fast.schedule, streams)


def _compiled(model: torch.nn.Module, example: torch.Tensor) -> Variant:
    """`torch.compile(mode="reduce-overhead")`; its compile seconds are those of the first
    call, which traces and compiles (its CUDA graph is recorded on a later call, in the
    warm-up)."""
    compiled = torch.compile(model, mode="reduce-overhead")

    def call(x: torch.Tensor) -> Any:
        # Each call is a new step: its CUDA graph may overwrite the previous outputs.
        torch.compiler.cudagraph_mark_step_begin()
        return compiled(x)

    with torch.no_grad():
        _, seconds = _timed_prepare(lambda: call(example))
    return Variant("compile", call, seconds)


def max_abs_diff(got: Any, expected: Any) -> float:
    pairs = zip(tree_leaves(got), tree_leaves(expected))
    return max((float((a.double() - b.double()).abs().max()) for a, b in pairs
                if isinstance(a, torch.Tensor) and a.numel()), default=0.0)


def check_outputs(model: torch.nn.Module, variants: list[Variant],
                  inputs: list[torch.Tensor]) -> dict[str, float]:
    """Every variant against eager on each input (a variant that reused a stale output or
    static input would fail the second); returns each variant's largest difference."""
    worst = {v.name: 0.0 for v in variants}
    with torch.no_grad():
        for x in inputs:
            expected = model(x)
            for v in variants:
                got = v.call(x)
                torch.testing.assert_close(
                    got, expected, **TOLERANCE,
                    msg=lambda message, name=v.name: f"{name} differs from eager: {message}")
                worst[v.name] = max(worst[v.name], max_abs_diff(got, expected))
    return worst


def measure_cuda(spec: str, batch: int, image_size: int, runs: int, warmup: int,
                 streams: int | str = "auto", with_compile: bool = False) -> dict:
    """Times every variant of one model on the current CUDA device (see the module's
    docstring). `streams`: nimble's multi-stream mode, prepare(streams=...);
    `with_compile`: torch.compile as well."""
    model, example = build(spec, batch=batch, image_size=image_size)
    model, example = model.cuda(), example.cuda()
    with torch.no_grad():
        model(example)  # CUDA, cuDNN and cuBLAS set up before any prepare is timed
    torch.cuda.synchronize()

    variants = [Variant("eager", model)]
    graph, capture_s = _timed_prepare(lambda: hand_captured_graph(model, example))
    variants.append(Variant("cuda_graph", graph, capture_s))
    variants.append(_nimble("nimble_1", model, example, 1))
    variants.append(_nimble("nimble_multi", model, example, streams))
    if with_compile:
        variants.append(_compiled(model, example))

    inputs = [torch.randn_like(example) for _ in range(2)]
    diffs = check_outputs(model, variants, inputs)
    x = inputs[-1]
    with torch.no_grad():
        samples = alternate([lambda v=v: v.call(x) for v in variants], runs, warmup,
                            measure=CudaTimer())
    schedule = variants[2].schedule
    meta = {
        "model": spec,
        "device": torch.cuda.get_device_name(),
        "batch": batch,
        "image_size": example.shape[-1] if example.dim() == 4 else None,
        "ops": len(schedule["ops"]),
        "logical_streams": schedule["logical_streams"],
    }
    return summarize(meta, variants, samples, diffs)


def summarize(meta: dict, variants: list[Variant], samples: list[list[tuple[float, float]]],
              diffs: dict[str, float], ratios=RATIOS) -> dict:
    """The JSON row: `meta`, then per variant the median wall and device milliseconds of its
    (wall seconds, device seconds) samples, prepare seconds, nimble's stream counts and
    syncs, the largest difference from eager; then the ratios of RATIOS (wall and device
    time) and, with torch.compile, its compile seconds over nimble's multi-stream prepare
    seconds."""
    out: dict[str, dict] = {}
    for v, taken in zip(variants, samples):
        entry: dict[str, Any] = {
            "ms": round(median_ms([wall for wall, _ in taken]), 4),
            "gpu_ms": round(median_ms([device for _, device in taken]), 4),
        }
        if v.prepare_s is not None:
            entry["prepare_s"] = round(v.prepare_s, 3)
        if v.streams_requested is not None:
            entry["streams_requested"] = v.streams_requested
        if v.schedule is not None:
            entry["physical_streams"] = v.schedule["physical_streams"]
            entry["syncs"] = v.schedule["physical_syncs"]
        entry["max_abs_diff"] = diffs[v.name]
        out[v.name] = entry
    found: dict[str, float] = {}
    for key, a, b in ratios:
        if a in out and b in out:
            found[key] = round(out[b]["ms"] / out[a]["ms"], 3)
            found[key + "_gpu"] = round(out[b]["gpu_ms"] / out[a]["gpu_ms"], 3)
    if "compile" in out and "nimble_multi" in out:
        found["compile_s_vs_prepare_s"] = round(
            out["compile"]["prepare_s"] / out["nimble_multi"]["prepare_s"], 1)
    return {**meta, "variants": out, "ratios": found}


COLUMNS = [
    ("model", "{}"), ("batch", "{}"), ("image_size", "{}"), ("variant", "{}"), ("ms", "{:.3f}"),
    ("gpu_ms", "{:.3f}"), ("vs_eager", "{:.2f}x"), ("prepare_s", "{:.2f}"),
    ("physical_streams", "{}"), ("syncs", "{}"), ("max_abs_diff", "{:.1e}"),
]


def table_rows(row: dict) -> list[dict]:
    """One table line per variant of a JSON row."""
    eager_ms = row["variants"]["eager"]["ms"]
    return [{"model": row["model"], "batch": row["batch"], "image_size": row["image_size"],
             "variant": name, "vs_eager": eager_ms / entry["ms"], **entry}
            for name, entry in row["variants"].items()]


def format_ratios(row: dict) -> str:
    parts = [f"{key} {value:.2f}x (gpu {row['ratios'][key + '_gpu']:.2f}x)"
             for key, value in row["ratios"].items()
             if not key.endswith("_gpu") and key + "_gpu" in row["ratios"]]
    if "compile_s_vs_prepare_s" in row["ratios"]:
        parts.append(f"compile_s_vs_prepare_s {row['ratios']['compile_s_vs_prepare_s']:.1f}x")
    return f"{row['model']}: " + "; ".join(parts)


def print_report(rows: list[dict], out=None) -> None:
    print(f"device: {rows[0]['device']}", file=out)
    print_table([line for row in rows for line in table_rows(row)], COLUMNS, out=out)
    print(file=out)
    for row in rows:
        print(format_ratios(row), file=out)

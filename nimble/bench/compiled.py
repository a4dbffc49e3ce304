"""`--compile-backend`: one model five ways, in one process: eager; `torch.compile` with
inductor in its default and its `reduce-overhead` mode; `torch.compile(backend="nimble")`;
and nimble's own `prepare`, where the model allows it (it refuses models whose ops read
tensor values, such as BERT with an attention mask).

Compile seconds are those of the first call, which traces, compiles and runs once (for
`prepare`: prepare itself). `dynamo_floor_s` is the first call with dynamo's "eager"
backend: dynamo's own tracing and guards, the floor of every backend's compile time
(`floor_vs_inductor` says how much of inductor's it already is). Inductor's caches are off, so each compile is a user's first;
a tiny function is compiled with every backend before, so that one-time imports and
set-up (of dynamo, AOTAutograd, inductor's C++ toolchain) count for no model.
Every variant's outputs are compared with eager's on the example call; then the variants
alternate call by call (after a warm-up) and the row reports medians.
"""

from __future__ import annotations

import time
from typing import Any, Callable

import torch

from ..errors import NimbleError
from ..replay.wrapper import Nimble
from ..zoo import build_call
from .cuda import max_abs_diff
from ..timing import alternate, median_ms

# (variant, how to compile the model)
COMPILERS: list[tuple[str, Callable[[torch.nn.Module], Any]]] = [
    ("inductor", lambda m: torch.compile(m)),
    ("reduce_overhead", lambda m: torch.compile(m, mode="reduce-overhead")),
    ("nimble_backend", lambda m: torch.compile(m, backend="nimble")),
]


def _first_call(call: Callable[[], Any]) -> tuple[Any, float]:
    start = time.perf_counter()
    result = call()
    return result, time.perf_counter() - start


def _warm_up_compilers() -> None:
    x = torch.randn(8, 8)
    for _, compile_model in COMPILERS:
        compile_model(torch.nn.Linear(8, 8))(x)
    torch._dynamo.reset()


def measure_compile_backend(spec: str, batch: int, image_size: int, sequence: int, runs: int,
                            warmup: int) -> dict:
    from torch._dynamo.utils import counters

    torch._inductor.config.force_disable_caches = True
    model, args, kwargs = build_call(spec, batch=batch, image_size=image_size, sequence=sequence)
    row: dict = {"model": spec, "batch": batch}
    calls = {"eager": lambda: model(*args, **kwargs)}
    with torch.no_grad():
        _warm_up_compilers()
        expected = model(*args, **kwargs)
        for name, compile_model in COMPILERS:
            counters.clear()
            compiled = compile_model(model)
            output, seconds = _first_call(lambda: compiled(*args, **kwargs))
            row[f"{name}_compile_s"] = round(seconds, 3)
            row[f"{name}_max_diff"] = max_abs_diff(output, expected)
            calls[name] = lambda c=compiled: c(*args, **kwargs)
            if name == "nimble_backend":
                row["graphs"] = counters["stats"]["unique_graphs"]
                row["graph_breaks"] = sum(counters["graph_break"].values())
                row["graphs_run_eagerly"] = counters["nimble"]["graphs_run_eagerly"]
                row["ops_replayed"] = counters["nimble"]["ops_replayed"]
        torch._dynamo.reset()
        floor = torch.compile(model, backend="eager")
        _, row["dynamo_floor_s"] = _first_call(lambda: floor(*args, **kwargs))
        try:
            fast, seconds = _first_call(lambda: Nimble(model).prepare(args, kwargs))
        except NimbleError as error:
            row["prepare_refused"] = type(error).__name__
        else:
            row["prepare_s"] = round(seconds, 3)
            row["prepare_max_diff"] = max_abs_diff(fast(*args, **kwargs), expected)
            calls["prepare"] = lambda: fast(*args, **kwargs)
        times = alternate(list(calls.values()), runs, warmup)
    for name, samples in zip(calls, times):
        row[f"{name}_ms"] = round(median_ms(samples), 4)
    for name in calls:
        if name != "eager":
            row[f"{name}_speedup"] = round(row["eager_ms"] / row[f"{name}_ms"], 3)
    row["compile_vs_inductor"] = round(
        row["nimble_backend_compile_s"] / row["inductor_compile_s"], 4)
    row["dynamo_floor_s"] = round(row["dynamo_floor_s"], 3)
    row["floor_vs_inductor"] = round(row["dynamo_floor_s"] / row["inductor_compile_s"], 4)
    row["threads"] = torch.get_num_threads()
    return row


COLUMNS = [
    ("model", "{}"), ("batch", "{}"), ("eager_ms", "{:.3f}"),
    ("inductor_ms", "{:.3f}"), ("inductor_compile_s", "{:.1f}"),
    ("reduce_overhead_ms", "{:.3f}"), ("reduce_overhead_compile_s", "{:.1f}"),
    ("nimble_backend_ms", "{:.3f}"), ("nimble_backend_speedup", "{:.2f}x"),
    ("nimble_backend_compile_s", "{:.2f}"), ("compile_vs_inductor", "{:.3f}"),
    ("dynamo_floor_s", "{:.2f}"), ("floor_vs_inductor", "{:.3f}"),
    ("nimble_backend_max_diff", "{:.1e}"), ("graphs", "{}"), ("graph_breaks", "{}"),
    ("prepare_ms", "{:.3f}"), ("prepare_s", "{:.2f}"), ("prepare_refused", "{}"),
]

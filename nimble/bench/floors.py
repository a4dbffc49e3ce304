"""A model's floor on the machine the bench runs on: the time no runtime can beat, the larger
of streaming its weights once from memory (weight bytes over the measured memory bandwidth)
and doing its arithmetic at the machine's peak (floating-point operations over the measured
GFLOP/s of one large matrix product). Both are measured with torch ops when the bench
starts, at its thread count; every runtime's time is then reported as a multiple of the
floor.

The floor is optimistic on purpose: weights that fit in the caches are read faster than from
memory on a warm call, and small layers run far below peak, so a multiple near 1 is out of
reach on small models; the multiples compare runtimes with what the machine could do.
"""

from __future__ import annotations

import functools
import statistics
import time
from typing import Any

import torch
from torch.utils.flop_counter import FlopCounterMode

# Large enough to miss every cache level (the L3 of the project's machines is 32 MB).
_BANDWIDTH_BYTES = 128 * 2**20
_GEMM_SIZE = 1024


def _median_seconds(fn, runs: int) -> float:
    fn()
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


@functools.lru_cache(maxsize=None)
def machine() -> dict:
    """The memory bandwidth (GB/s, reading: a sum over a tensor larger than the caches) and
    the peak (GFLOP/s: one float32 matrix product of 1024x1024), at torch's thread count."""
    with torch.no_grad():
        data = torch.ones(_BANDWIDTH_BYTES // 4)
        read = _median_seconds(lambda: data.sum(), runs=7)
        a, b = torch.randn(_GEMM_SIZE, _GEMM_SIZE), torch.randn(_GEMM_SIZE, _GEMM_SIZE)
        product = _median_seconds(lambda: torch.mm(a, b), runs=7)
    return {"bandwidth_gb_s": round(_BANDWIDTH_BYTES / read / 1e9, 2),
            "peak_gflop_s": round(2 * _GEMM_SIZE**3 / product / 1e9, 1),
            "threads": torch.get_num_threads()}


def model_cost(model: torch.nn.Module, example: Any) -> dict:
    """The model's weight bytes (parameters and buffers) and the floating-point operations
    of one call on `example` (torch's flop counter: products, convolutions, attention).
    Counted with autograd on: without it, `nn.TransformerEncoder` takes its fused fast path,
    which the counter does not see into."""
    weight_bytes = sum(t.nbytes for t in list(model.parameters()) + list(model.buffers()))
    counter = FlopCounterMode(display=False)
    with torch.enable_grad(), counter:
        model(example)
    return {"weight_bytes": weight_bytes, "flops": counter.get_total_flops()}


def floor_ms(cost: dict, measured: dict) -> dict:
    """The floor of a model of `cost` on a machine `measured`, and which bound sets it."""
    memory_ms = cost["weight_bytes"] / (measured["bandwidth_gb_s"] * 1e9) * 1e3
    arithmetic_ms = cost["flops"] / (measured["peak_gflop_s"] * 1e9) * 1e3
    return {"floor_ms": round(max(memory_ms, arithmetic_ms), 4),
            "floor_bound": "memory" if memory_ms >= arithmetic_ms else "arithmetic",
            "floor_memory_ms": round(memory_ms, 4), "floor_arithmetic_ms": round(arithmetic_ms, 4)}

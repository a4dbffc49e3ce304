"""The graph backends the graph suites run on: the CUDA graph where a GPU is present, and
everywhere its CPU twin (`csrc/runtime/cpu/cpu_graph_executor.h`), which replays a CPU
program with a CUDA graph's semantics (recorded arguments, scalars baked in, outputs and
scratch memory overwritten by the next replay, a warm-up that must change nothing). The
same test on both: what the twin finds wrong in CI, the GPU would too."""

from __future__ import annotations

import contextlib
import os

import pytest
import torch

from nimble.testing import assert_matches_eager

needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")

BACKENDS = [pytest.param("cuda", marks=needs_gpu), "cpu-graph"]
BACKEND_NAME = {"cuda": "cuda-graph", "cpu-graph": "cpu-graph"}


def device_of(backend: str) -> torch.device:
    return torch.device("cuda" if backend == "cuda" else "cpu")


def prepare_options(backend: str) -> dict:
    """What `prepare` needs to run on `backend` (the device follows the tensors)."""
    return {"_graph_twin": True} if backend == "cpu-graph" else {}


def assert_matches(got, expected, backend: str, what: str = "") -> None:
    """The twin calls eager's CPU kernels, though not always eager's fused paths (the
    Transformer encoder's fast path differs from its traced ops in the last bits). On a
    GPU, kernels may differ from eager's (other algorithms inside a graph); float32 without
    TF32 stays far inside these bounds. Relative to eager's scale, which must not be about
    zero (nimble/testing.py); 1e-4 on the twin, where several streams give each op fewer
    threads and so other sums (efficientnet_b0 at 1.1e-5, googlenet on four streams), while a
    stale or wrong replay is off by the output's scale. Training suites compare exactly where
    they can."""
    assert_matches_eager(got, expected, tolerance=1e-4 if backend == "cpu-graph" else 2e-3,
                         what=what)


def check_calls(model, fast, example, backend: str, calls: int = 2) -> None:
    """Every call right, and outputs handed out earlier unchanged by later calls."""
    kept = []
    for seed in range(calls):
        torch.manual_seed(100 + seed)
        x = torch.randn_like(example)
        with torch.no_grad():
            expected = model(x)
        kept.append((fast(x), expected))
    for call, (got, expected) in enumerate(kept):
        assert_matches(got, expected, backend, f"call {call}")


def assert_trained_alike(got, expected, backend: str, what: str = "") -> None:
    """After training steps: bit-identical on the twin (eager's kernels, eager's order);
    within 1e-4 relative on a GPU (the issue's bound after 10 steps)."""
    tolerance = dict(rtol=0, atol=0) if backend == "cpu-graph" else dict(rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(got, expected, **tolerance, msg=lambda m: f"{what}: {m}")


def assert_optimizer_states_alike(eager_opt, replayed_opt, same, settings: bool = True) -> None:
    """The two optimizers' settings equal (unless not `settings`) and their state entries the
    same keys, each entry compared by `same(got, expected, what)`."""
    a, b = eager_opt.state_dict(), replayed_opt.state_dict()
    if settings:
        assert a["param_groups"] == b["param_groups"]
    assert a["state"].keys() == b["state"].keys()
    for key, entries in a["state"].items():
        assert entries.keys() == b["state"][key].keys(), f"optimizer state {key}"
        for name, value in entries.items():
            same(b["state"][key][name], value, f"optimizer state {key}.{name}")


def to_capturable_form(optimizer) -> None:
    """What nimble's device form of Adam computes (nimble/replay/optimizer_scalars.py), in
    eager: torch's `capturable=True` update with a tensor learning rate, the step counts on
    the parameters' device."""
    for group in optimizer.param_groups:
        group["capturable"] = True
        group["lr"] = torch.tensor(group["lr"], device=group["params"][0].device)
        for p in group["params"]:
            optimizer.state[p]["step"] = optimizer.state[p]["step"].to(p.device)


@contextlib.contextmanager
def deterministic():
    """Where eager is reproducible: deterministic kernels (warn only: torch flags kernels it
    has no deterministic twin for, none of which these models' steps run nondeterministically
    at these shapes), cuDNN without benchmarking or TF32, cuBLAS with a fixed workspace
    (tests/gpu/run.sh exports it before cuBLAS starts; set here for a run without it)."""
    saved = (torch.are_deterministic_algorithms_enabled(),
             torch.is_deterministic_algorithms_warn_only_enabled(),
             torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark,
             torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32,
             os.environ.get("CUBLAS_WORKSPACE_CONFIG"))
    os.environ["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = True, False
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(saved[0], warn_only=saved[1])
        (torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark,
         torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32) = saved[2:6]
        if saved[6] is None:
            os.environ.pop("CUBLAS_WORKSPACE_CONFIG", None)
        else:
            os.environ["CUBLAS_WORKSPACE_CONFIG"] = saved[6]

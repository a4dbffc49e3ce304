"""`python -m nimble bench --device cuda --train`: one training step on a GPU, in one
process: eager; the whole step captured by hand into one `torch.cuda.CUDAGraph` (what a
user writes instead of nimble, following PyTorch's "whole network capture" recipe); nimble's
paper mode (forward and backward replayed, the optimizer eager); nimble's whole step on one
stream and on several.

Correctness first: every variant trains its own copy of the model for 10 steps on the same
batches (the same seed before each step, for dropout), and its parameters are compared
with eager's: the largest relative difference is reported. A second eager copy gives the
drift of eager against itself (with torch's defaults, TF32 convolutions and
non-deterministic backward kernels make two eager runs differ far more than 1e-4 after 10
steps); a variant matches eager when it is within that drift, or within 1e-6. Then
the variants alternate one step each per round (after a warm-up), timed by wall clock until
the device has finished and by CUDA events; medians.
"""

from __future__ import annotations

import copy
import time
from typing import Callable

import torch

from ..replay.wrapper import Nimble
from ..zoo import build
from .cuda import Variant, summarize
from ..timing import CudaTimer, alternate

CHECK_STEPS = 10
# What a variant may differ from eager by when eager is reproducible (deterministic mode).
MIN_RELATIVE_DIFF = 1e-6


def make_optimizer(name: str, params, capturable: bool = False) -> torch.optim.Optimizer:
    if name == "sgd":
        return torch.optim.SGD(params, lr=0.01, momentum=0.9, weight_decay=1e-4)
    # A hand-captured Adam step needs capturable=True (its step counts on the device).
    if name == "adam":
        return torch.optim.Adam(params, lr=1e-3, capturable=capturable)
    if name == "adamw":
        return torch.optim.AdamW(params, lr=1e-3, weight_decay=1e-2, capturable=capturable)
    raise ValueError(f"unknown optimizer {name!r}: expected 'sgd', 'adam' or 'adamw'")


RATIOS = [
    ("nimble_1_vs_cuda_graph", "nimble_1", "cuda_graph"),
    ("nimble_multi_vs_cuda_graph", "nimble_multi", "cuda_graph"),
    ("nimble_multi_vs_nimble_1", "nimble_multi", "nimble_1"),
    ("nimble_paper_vs_eager", "nimble_paper", "eager"),
    ("nimble_multi_vs_eager", "nimble_multi", "eager"),
]


def hand_captured_step(model, optimizer, loss_fn, x, y) -> Callable:
    """The whole step in one graph, as PyTorch's documentation captures it: warm-up steps
    on a side stream, gradients set to None before capture, then per call: copy the batch
    into the static tensors and replay. (The warm-up trains this copy three steps ahead.)"""
    static_x, static_y = x.clone(), y.clone()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            optimizer.zero_grad(set_to_none=True)
            loss_fn(model(static_x), static_y).backward()
            optimizer.step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    optimizer.zero_grad(set_to_none=True)
    with torch.cuda.graph(graph):
        static_loss = loss_fn(model(static_x), static_y)
        static_loss.backward()
        optimizer.step()

    def step(xb, yb):
        static_x.copy_(xb)
        static_y.copy_(yb)
        graph.replay()
        return static_loss

    return step


def _relative_diff(model: torch.nn.Module, reference: torch.nn.Module) -> float:
    worst = 0.0
    for a, b in zip(model.state_dict().values(), reference.state_dict().values()):
        if a.is_floating_point():
            scale = float(b.double().abs().max()) or 1.0
            worst = max(worst, float((a.double() - b.double()).abs().max()) / scale)
    return worst


def measure_cuda_train(spec: str, batch: int, image_size: int, runs: int, warmup: int,
                       streams="auto", optimizer: str = "sgd") -> dict:
    if not spec.startswith("torchvision:"):
        raise ValueError(f"--train benchmarks torchvision classifiers, got '{spec}'")
    model, x = build(spec, batch=batch, image_size=image_size, num_classes=10)
    model, x = model.cuda().train(), x.cuda()
    y = torch.randint(0, 10, (batch,), device="cuda")
    loss_fn = torch.nn.CrossEntropyLoss()
    g = torch.Generator().manual_seed(1)
    batches = [(torch.randn(x.shape, generator=g).cuda(),
                torch.randint(0, 10, (batch,), generator=g).cuda()) for _ in range(CHECK_STEPS)]

    def eager_variant(m, opt):
        def step(xb, yb):
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(m(xb), yb)
            loss.backward()
            opt.step()
            return loss
        return step

    def paper_variant(m, opt):
        start = time.perf_counter()
        fast = Nimble(m).prepare(x, training=True)
        torch.cuda.synchronize()
        return eager_variant(fast, opt), time.perf_counter() - start, fast

    def whole_step_variant(m, opt, n):
        start = time.perf_counter()
        fast = Nimble(m).prepare(x, training=True, loss_fn=loss_fn, optimizer=opt,
                                 example_targets=y, streams=n, copy_outputs=False)
        torch.cuda.synchronize()
        return fast.step, time.perf_counter() - start, fast

    makers = {
        "eager": lambda m, opt: (eager_variant(m, opt), None, None),
        "eager_again": lambda m, opt: (eager_variant(m, opt), None, None),
        "nimble_paper": paper_variant,
        "nimble_1": lambda m, opt: whole_step_variant(m, opt, 1),
        "nimble_multi": lambda m, opt: whole_step_variant(m, opt, streams),
    }
    variants, diffs, models = [], {}, {}
    for name, make in makers.items():
        m = copy.deepcopy(model)
        call, seconds, fast = make(m, make_optimizer(optimizer, m.parameters()))
        variants.append(Variant(name, call, seconds, None if fast is None else fast.schedule,
                                streams if name == "nimble_multi" else None))
        models[name] = m
    # The hand-captured graph trains three warm-up steps at capture: it is checked from a
    # copy that ran those on the first batch, against eager doing the same.
    graph_model, graph_reference = copy.deepcopy(model), copy.deepcopy(model)
    torch.manual_seed(CHECK_STEPS)  # the warm-up's dropout masks, drawn again by the reference
    start = time.perf_counter()
    graph_step = hand_captured_step(
        graph_model, make_optimizer(optimizer, graph_model.parameters(), capturable=True),
        loss_fn, *batches[0])
    torch.cuda.synchronize()
    variants.insert(1, Variant("cuda_graph", graph_step, time.perf_counter() - start))

    for step, (xb, yb) in enumerate(batches):
        for v in variants:
            torch.manual_seed(step)
            v.call(xb, yb)
    torch.cuda.synchronize()
    reference = models["eager"]
    for name, m in models.items():
        diffs[name] = _relative_diff(m, reference)
    drift = diffs["eager_again"]
    reference_opt = make_optimizer(optimizer, graph_reference.parameters(), capturable=True)
    reference_step = eager_variant(graph_reference, reference_opt)
    torch.manual_seed(CHECK_STEPS)
    for _ in range(3):
        reference_step(*batches[0])
    for step, (xb, yb) in enumerate(batches):
        torch.manual_seed(step)
        reference_step(xb, yb)
    diffs["cuda_graph"] = _relative_diff(graph_model, graph_reference)

    xb, yb = batches[-1]
    variants = [v for v in variants if v.name != "eager_again"]  # checked, not timed
    samples = alternate([lambda v=v: v.call(xb, yb) for v in variants], runs, warmup,
                        measure=CudaTimer())
    schedule = next(v.schedule for v in variants if v.name == "nimble_1")
    meta = {"model": spec, "device": torch.cuda.get_device_name(), "batch": batch,
            "image_size": x.shape[-1], "optimizer": optimizer, "ops": len(schedule["ops"]),
            "logical_streams": schedule["logical_streams"]}
    meta["eager_drift"] = drift
    row = summarize(meta, variants, samples, diffs, ratios=RATIOS)
    for name, entry in row["variants"].items():
        entry["max_rel_diff"] = entry.pop("max_abs_diff")
        entry["matches_eager"] = entry["max_rel_diff"] <= max(drift, MIN_RELATIVE_DIFF)
    return row


COLUMNS = [
    ("model", "{}"), ("batch", "{}"), ("image_size", "{}"), ("optimizer", "{}"),
    ("variant", "{}"), ("ms", "{:.3f}"), ("gpu_ms", "{:.3f}"), ("vs_eager", "{:.2f}x"),
    ("prepare_s", "{:.2f}"), ("physical_streams", "{}"), ("max_rel_diff", "{:.1e}"),
    ("matches_eager", "{}"),
]


def print_report(rows: list[dict], out=None) -> None:
    from .cuda import format_ratios
    from .report import print_table

    print(f"device: {rows[0]['device']}", file=out)
    lines = []
    for row in rows:
        eager_ms = row["variants"]["eager"]["ms"]
        for name, entry in row["variants"].items():
            lines.append({"model": row["model"], "batch": row["batch"],
                          "image_size": row["image_size"], "optimizer": row["optimizer"],
                          "variant": name, "vs_eager": eager_ms / entry["ms"], **entry})
    print_table(lines, COLUMNS, out=out)
    print(file=out)
    for row in rows:
        print(format_ratios(row), file=out)

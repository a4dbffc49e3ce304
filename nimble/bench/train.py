"""`python -m nimble bench --train`: one training step, eager against nimble, in one process.

Four copies of the model, from the same initial state, each with its own optimizer:
eager (`zero_grad`, forward, loss, `backward`, `step`), the paper's mode (forward and
backward replayed, the optimizer eager), the whole step replayed on one stream, and on
several. Before timing, one step of each is checked against eager. Compared modes
alternate run by run in pairs, as in the inference benchmark; medians.
"""

from __future__ import annotations

import copy
import os
import statistics
import time
from collections import defaultdict

import torch

from ..replay.wrapper import Nimble
from ..zoo import build
from ..timing import alternate, median_ms

OPTIMIZERS = {
    "sgd": lambda params: torch.optim.SGD(params, lr=0.01, momentum=0.9, weight_decay=1e-4),
    "adam": lambda params: torch.optim.Adam(params, lr=1e-3),
    "adamw": lambda params: torch.optim.AdamW(params, lr=1e-3, weight_decay=1e-2),
}


def breakdown(fast: Nimble, inputs: list, repeats: int = 5, top: int = 8) -> dict:
    """Where a whole-step replay spends its time: per op kind, the median over replays of
    the summed kernel time; plus the replay's own time outside kernels."""
    replay = fast.replay
    names = [op["name"] for op in replay.ops()]
    per_kind = defaultdict(list)
    totals, inside = [], []
    for _ in range(repeats):
        total_ns, ops = replay.run_timed(inputs)
        sums = defaultdict(int)
        for op, _stream, start, end, _free in ops:
            sums[names[op]] += end - start
        for kind, ns in sums.items():
            per_kind[kind].append(ns)
        totals.append(total_ns)
        inside.append(sum(end - start for _op, _s, start, end, _f in ops))
    kinds = sorted(per_kind, key=lambda k: -statistics.median(per_kind[k]))
    return {
        "replay_ms": round(statistics.median(totals) / 1e6, 3),
        "kernels_ms": round(statistics.median(inside) / 1e6, 3),
        "top_ops_ms": {k: round(statistics.median(per_kind[k]) / 1e6, 3) for k in kinds[:top]},
    }


def measure_train(
    spec: str,
    batch: int,
    image_size: int,
    runs: int,
    warmup: int,
    streams,
    optimizer: str = "sgd",
    show_breakdown: bool = False,
) -> dict:
    if not spec.startswith("torchvision:"):
        raise ValueError(f"--train benchmarks torchvision classifiers, got '{spec}'")
    model, x = build(spec, batch=batch, image_size=image_size, num_classes=10)
    model.train()
    y = torch.randint(0, 10, (batch,), generator=torch.Generator().manual_seed(0))
    loss_fn = torch.nn.CrossEntropyLoss()
    make_optimizer = OPTIMIZERS[optimizer]
    copies = [copy.deepcopy(model) for _ in range(4)]
    optimizers = [make_optimizer(m.parameters()) for m in copies]
    eager_model, paper_model, step_model, multi_model = copies
    eager_opt, paper_opt, step_opt, multi_opt = optimizers

    start = time.perf_counter()
    paper = Nimble(paper_model).prepare(x, training=True)
    paper_prepare_s = time.perf_counter() - start
    start = time.perf_counter()
    step = Nimble(step_model).prepare(
        x, training=True, loss_fn=loss_fn, optimizer=step_opt, example_targets=y
    )
    step_prepare_s = time.perf_counter() - start
    if streams == 1:
        raise ValueError("--train compares one stream with several: --streams must not be 1")
    multi = Nimble(multi_model).prepare(
        x,
        training=True,
        loss_fn=loss_fn,
        optimizer=multi_opt,
        example_targets=y,
        streams=streams or (os.cpu_count() or 1),
    )

    def eager_step():
        eager_opt.zero_grad()
        loss = loss_fn(eager_model(x), y)
        loss.backward()
        eager_opt.step()
        return loss

    def paper_step():
        paper_opt.zero_grad()
        loss = loss_fn(paper(x), y)
        loss.backward()
        paper_opt.step()
        return loss

    # Correctness first: the first two steps of every mode against eager (the whole step's
    # first runs eagerly, creating the optimizer state; the second is a replay).
    # Each mode starts from the same seed: dropout masks come from torch's generator.
    for seed in range(2):
        torch.manual_seed(seed)
        expected = eager_step().detach()
        torch.manual_seed(seed)
        torch.testing.assert_close(paper_step().detach(), expected, rtol=0, atol=0)
        torch.manual_seed(seed)
        torch.testing.assert_close(step.step(x, y), expected, rtol=0, atol=0)
        # Several streams give kernels fewer threads each, so reductions sum in another order.
        torch.manual_seed(seed)
        torch.testing.assert_close(multi.step(x, y), expected, rtol=1e-4, atol=1e-5)

    eager_a, paper_t = alternate([eager_step, paper_step], runs, warmup)
    eager_b, step_t = alternate([eager_step, lambda: step.step(x, y)], runs, warmup)
    single_t, multi_t = alternate([lambda: step.step(x, y), lambda: multi.step(x, y)], runs, warmup)
    eager_ms = median_ms(eager_a + eager_b)
    row = {
        "model": spec,
        "batch": batch,
        "image_size": x.shape[-1],
        "optimizer": optimizer,
        "eager_ms": round(eager_ms, 3),
        "fwd_bwd_ms": round(median_ms(paper_t), 3),
        "fwd_bwd_speedup": round(median_ms(eager_a) / median_ms(paper_t), 3),
        "step_ms": round(median_ms(step_t), 3),
        "step_speedup": round(median_ms(eager_b) / median_ms(step_t), 3),
        "multi_ms": round(median_ms(multi_t), 3),
        "multi_vs_single": round(median_ms(single_t) / median_ms(multi_t), 3),
        "physical_streams": multi.schedule["physical_streams"],
        "ops": step.num_ops,
        "prepare_s": round(step_prepare_s, 2),
        "fwd_bwd_prepare_s": round(paper_prepare_s, 2),
    }
    if show_breakdown:
        row["breakdown"] = breakdown(step, [x, y])
    return row


COLUMNS = [
    ("model", "{}"),
    ("batch", "{}"),
    ("image_size", "{}"),
    ("optimizer", "{}"),
    ("eager_ms", "{:.2f}"),
    ("fwd_bwd_ms", "{:.2f}"),
    ("fwd_bwd_speedup", "{:.2f}x"),
    ("step_ms", "{:.2f}"),
    ("step_speedup", "{:.2f}x"),
    ("multi_ms", "{:.2f}"),
    ("multi_vs_single", "{:.2f}x"),
    ("physical_streams", "{}"),
    ("ops", "{}"),
    ("prepare_s", "{:.2f}"),
]


def print_breakdown(row: dict, out=None) -> None:
    b = row["breakdown"]
    print(
        f"\n{row['model']} whole-step replay: {b['replay_ms']:.2f} ms, of which kernels "
        f"{b['kernels_ms']:.2f} ms ({100 * b['kernels_ms'] / b['replay_ms']:.1f}%); eager step "
        f"{row['eager_ms']:.2f} ms. Kernel time by op:",
        file=out,
    )
    for kind, ms in b["top_ops_ms"].items():
        print(f"  {kind:45s} {ms:9.3f} ms", file=out)

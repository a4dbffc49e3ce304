"""Where nimble's whole training step on one stream loses to the hand-captured graph of
`python -m nimble bench --device cuda --train` (nimble/bench/cuda_train.py), on a GPU.

Per model and optimizer, both variants built as the bench builds them (batch 32, 32x32,
10 classes), then for each, alternating, after a warm-up:
- host_us: the call's host time, from its start to its return, the device idle before
  (what a step waits for before its graph launches: nimble's checks, the input copies,
  the launch itself);
- gpu_us: CUDA events around the call (the device's view, idle time before the launch
  included);
- wall_us: the call until the device has finished (the bench's `ms`);
and from one call under torch.profiler: the CUDA kernels (and memcpy/memset) the call ran,
their count and summed duration (busy_us), and the kernel names whose counts differ between
the variants. A gap in busy_us is work the device does more; a gap in wall_us beyond it is
idle time (host work before the launch, or gaps between the graph's kernels).

    python tests/gpu/train_gap.py [--models resnet18 mobilenet_v2] [--optimizers adamw sgd]
                                  [--runs 20] [--json OUT.json]
"""

from __future__ import annotations

import argparse
import collections
import copy
import json
import statistics
import sys
import time

import torch

from nimble.bench.cuda_train import hand_captured_step, make_optimizer
from nimble.replay.wrapper import Nimble
from nimble.zoo import build


def _variants(model_name: str, optimizer: str, batch: int, image_size: int):
    model, x = build(f"torchvision:{model_name}", batch=batch, image_size=image_size,
                     num_classes=10)
    model, x = model.cuda().train(), x.cuda()
    y = torch.randint(0, 10, (batch,), device="cuda")
    loss_fn = torch.nn.CrossEntropyLoss()
    hand_model = copy.deepcopy(model)
    hand = hand_captured_step(
        hand_model, make_optimizer(optimizer, hand_model.parameters(), capturable=True),
        loss_fn, x, y)
    nimble_model = copy.deepcopy(model)
    fast = Nimble(nimble_model).prepare(
        x, training=True, loss_fn=loss_fn,
        optimizer=make_optimizer(optimizer, nimble_model.parameters()),
        example_targets=y, streams=1, copy_outputs=False)
    fast.step(x, y)  # the eager first step of an optimizer without state
    torch.cuda.synchronize()
    return {"cuda_graph": hand, "nimble_1": fast.step}, x, y, fast


def _kernels(call) -> tuple[collections.Counter, float]:
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=activities) as prof:
        call()
        torch.cuda.synchronize()
    names: collections.Counter = collections.Counter()
    busy = 0.0
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            names[event.name[:90]] += 1
            busy += event.time_range.elapsed_us()
    return names, busy


def measure(model_name: str, optimizer: str, runs: int, batch: int, image_size: int) -> dict:
    calls, x, y, fast = _variants(model_name, optimizer, batch, image_size)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    samples = {name: {"host_us": [], "gpu_us": [], "wall_us": []} for name in calls}
    for round_ in range(runs + 3):
        for name, call in calls.items():
            torch.cuda.synchronize()
            start.record()
            t0 = time.perf_counter()
            call(x, y)
            t1 = time.perf_counter()
            end.record()
            torch.cuda.synchronize()
            t2 = time.perf_counter()
            if round_ >= 3:
                s = samples[name]
                s["host_us"].append((t1 - t0) * 1e6)
                s["wall_us"].append((t2 - t0) * 1e6)
                s["gpu_us"].append(start.elapsed_time(end) * 1e3)
    row = {"model": model_name, "optimizer": optimizer, "batch": batch,
           "nimble_ops": fast.num_ops, "variants": {}}
    counts = {}
    for name, call in calls.items():
        names, busy = _kernels(lambda call=call: call(x, y))
        counts[name] = names
        row["variants"][name] = {
            **{k: round(statistics.median(v), 1) for k, v in samples[name].items()},
            "kernels": sum(names.values()), "busy_us": round(busy, 1)}
    hand, mine = counts["cuda_graph"], counts["nimble_1"]
    row["kernel_count_differences"] = {
        k: [hand[k], mine[k]] for k in sorted(set(hand) | set(mine)) if hand[k] != mine[k]}
    v = row["variants"]
    row["nimble_1_vs_cuda_graph_wall"] = round(v["cuda_graph"]["wall_us"] / v["nimble_1"]["wall_us"], 3)
    return row


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=["resnet18", "mobilenet_v2"])
    parser.add_argument("--optimizers", nargs="+", default=["adamw", "sgd"])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--image-size", type=int, default=32)
    parser.add_argument("--json", help="also write the rows here")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("train_gap.py: no CUDA device", file=sys.stderr)
        return 3
    rows = []
    for model_name in args.models:
        for optimizer in args.optimizers:
            row = measure(model_name, optimizer, args.runs, args.batch, args.image_size)
            rows.append(row)
            print(json.dumps(row), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

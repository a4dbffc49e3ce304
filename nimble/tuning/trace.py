"""Tuning traces: every configuration of every tuning task of a model, measured once on this
machine, saved as one JSON-lines file that the simulator replays (docs/tuning.md, "Traces").

    python -m nimble tune --record-trace resnet18.jsonl --model torchvision:resnet18
    python -m nimble tune --compare --trace resnet18.jsonl --seeds 5

The file's first line is a header object ({"nimble_trace": 1, "model", "device", ...}); every
further line is one task: its key, weight, FLOPs, ATen's time, its knobs and, in parallel lists
with one entry per configuration, the configuration, its median seconds, its noise (relative
standard deviation of one repeat), its setup and per-repeat cost, and its error ("none" when it
ran)."""

from __future__ import annotations

import gzip
import json
import math
import statistics
import sys
import time

FORMAT_VERSION = 1
PER_CONFIG = ("configs", "seconds", "noise", "setup_seconds", "repeat_seconds", "error")


def _repeats(count: int) -> dict:
    return {"adaptive": False, "best_seconds": 0.0, "fixed_repeats": count, "min_repeats": count,
            "max_repeats": count, "target_relative_error": 0.0, "slower_than_best_factor": 0.0,
            "one_sample_cut_factor": 0.0, "confidence_z": 0.0,
            "first_call_cut_factor": 0.0}


def measure_point(measurer, signature: str, config: list[int], repeats: int) -> dict:
    """One configuration measured twice, once with one repeat and once with `repeats`: the
    difference of their costs is what a repeat costs, the rest (build, correctness check,
    warm-up) what any measurement of it costs."""
    (_, error1, _, cost1, _), = measurer.measure(signature, [config], _repeats(1))
    (seconds, error, _, cost, _), = measurer.measure(signature, [config], _repeats(repeats))
    if error != "none" or error1 != "none" or not seconds:
        error = error if error != "none" else error1
        return {"seconds": None, "noise": 0.0, "setup_seconds": max(cost, cost1),
                "repeat_seconds": 0.0, "error": error if error != "none" else "runtime"}
    per_repeat = max((cost - cost1) / max(repeats - 1, 1), 0.0)
    median = statistics.median(seconds)
    spread = statistics.pstdev(seconds) / median if len(seconds) > 1 and median > 0 else 0.0
    return {"seconds": median, "noise": spread, "setup_seconds": max(cost - repeats * per_repeat, 0.0),
            "repeat_seconds": per_repeat, "error": "none"}


def rounded(value):
    """Four significant digits: more than the machine's noise tells, and a third of the file."""
    return float(f"{value:.4g}") if isinstance(value, float) else value


def _prepared(model, example):
    """The tasks of the tuner (nimble/tuning/tune.py): ATen's convolutions, the lowering off."""
    from ..replay.wrapper import Nimble

    return Nimble(model).prepare(example, streams=1, lower_for_cpu=False)


def record_model(model, example, path: str, *, repeats: int = 5, min_repeat_seconds: float = 2e-3,
                 timeout_seconds: float = 2.0, seed: int = 0, progress: bool = True,
                 header: dict | None = None, note: str = "") -> dict:
    """`record` for any static module and its example input."""
    from .._C import kernels, tuning

    if repeats < 2:
        raise ValueError(f"repeats must be at least 2 (a spread needs two), got {repeats}")
    replay = _prepared(model, example).replay
    spaces = tuning.trace_spaces(replay)
    if not spaces:
        raise ValueError("the model has no op a kernel family can replace (2-D float "
                         "convolutions, linear layers with a bias): nothing to record")
    measurer = kernels.ReplayMeasurer(replay, min_repeat_seconds=min_repeat_seconds,
                                      timeout_seconds=timeout_seconds, seed=seed)
    header = {"nimble_trace": FORMAT_VERSION, "model": type(model).__name__, **(header or {}),
              "device": kernels.device_key(), "repeats": repeats,
              "min_repeat_seconds": min_repeat_seconds, "recorded_at": time.time(),
              "task_count": len(spaces),
              "config_count": sum(len(s["configs"]) for s in spaces),
              "note": note}
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=header["config_count"], desc=f"recording {header['model']}", unit="config",
                   file=sys.stderr, mininterval=0.5, dynamic_ncols=True)
    started = time.monotonic()
    tasks = []
    for space in spaces:
        task = {k: space[k] for k in ("name", "signature", "group", "flops", "weight", "knobs")}
        task["baseline_seconds"] = measurer.baseline_seconds(space["signature"], repeats)
        columns = {k: [] for k in PER_CONFIG}
        for config in space["configs"]:
            point = measure_point(measurer, space["signature"], config, repeats)
            columns["configs"].append(config)
            for key in PER_CONFIG[1:]:
                columns[key].append(rounded(point[key]))
            if bar:
                bar.set_postfix_str(space["name"], refresh=False)
                bar.update()
        tasks.append(dict(task, **columns))
    if bar:
        bar.close()
    header["record_seconds"] = time.monotonic() - started
    save(dict(header, tasks=tasks), path)
    return header


def _open(path: str, mode: str):
    """A trace file, gzip-compressed when its name ends in .gz (a model's full spaces come to a
    few hundred KB of text)."""
    return gzip.open(path, mode + "t") if str(path).endswith(".gz") else open(path, mode)


def load(path: str) -> dict:
    """A trace file as `nimble._C.tuning.compare(trace=...)` takes it: its header's fields and
    "tasks", with a clear error for a file that is not a trace."""
    try:
        with _open(path, "r") as f:
            lines = [line for line in f if line.strip()]
        header = json.loads(lines[0]) if lines else {}
    except (UnicodeDecodeError, gzip.BadGzipFile, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: not a nimble trace ({e})") from None
    if not isinstance(header, dict) or header.get("nimble_trace") != FORMAT_VERSION:
        raise ValueError(f"{path}: not a nimble trace of format {FORMAT_VERSION} (its first line "
                         "must be a header with \"nimble_trace\": 1)")
    tasks = [json.loads(line) for line in lines[1:]]
    for task in tasks:
        missing = [k for k in ("name", "signature", "flops", "weight", "knobs") + PER_CONFIG
                   if k not in task]
        if missing:
            raise ValueError(f"{path}: task {task.get('name', '?')} lacks {', '.join(missing)}")
    return dict(header, tasks=tasks)


def restricted(trace: dict, keep) -> dict:
    """The trace with only the configurations `keep(task, index)` accepts (tasks left without
    any are dropped): e.g. one kernel family's space out of a recording of all of them."""
    tasks = []
    for task in trace["tasks"]:
        chosen = [i for i in range(len(task["configs"])) if keep(task, i)]
        if chosen:
            tasks.append(dict(task, **{k: [task[k][i] for i in chosen] for k in PER_CONFIG}))
    return dict(trace, tasks=tasks, task_count=len(tasks),
                config_count=sum(len(t["configs"]) for t in tasks))


def save(trace: dict, path: str) -> None:
    with _open(path, "w") as f:
        f.write(json.dumps({k: v for k, v in trace.items() if k != "tasks"}) + "\n")
        for task in trace["tasks"]:
            f.write(json.dumps(task, separators=(",", ":")) + "\n")


def exhaustive_seconds(trace: dict, repeats: int | None = None) -> float:
    """Tuning seconds to measure every configuration once with `repeats` repeats (default: as
    recorded)."""
    repeats = trace.get("repeats", 1) if repeats is None else repeats
    return sum(s + (repeats * r if e == "none" else 0.0)
               for t in trace["tasks"]
               for s, r, e in zip(t["setup_seconds"], t["repeat_seconds"], t["error"]))


def optimum_ms(trace: dict) -> float:
    """Model latency with every task at its fastest recorded configuration (or ATen's)."""
    total = 0.0
    for t in trace["tasks"]:
        times = [s for s, e in zip(t["seconds"], t["error"]) if e == "none"]
        base = t.get("baseline_seconds") or math.inf
        total += t["weight"] * min(times + [base])
    return total * 1e3

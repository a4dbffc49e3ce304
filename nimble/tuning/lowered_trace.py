"""Traces of a lowered replay's in-context tasks (docs/tuning.md, "Traces of the lowered
replay"): the tasks `nimble.tune` tunes on a CPU replay `prepare` lowered, one per lowered
convolution shape over the `prepacked` family's knobs, each configuration timed inside the
replay as the tuner times it (csrc/slot/context_measurer.h).

A GEMM convolution's space has 362 to 1082 configurations and each in-context measurement runs
the whole replay several times, so by default a documented subset is recorded (`subset`): the
rule's configuration (the task's start), every configuration one knob away from it, and a seeded
random sample of `sample` configurations with each of their one-step neighbours. The simulator's
searches then move only inside what was recorded (the trace's space admits nothing else)."""

from __future__ import annotations

import random
import sys
import time

from . import trace as trace_file


def _neighbours(config: list[int], knobs: list[dict], every_value: bool) -> list[tuple]:
    """Configurations one knob away from `config`: that knob at any other value
    (`every_value`), or at the adjacent ones (ordered knobs) and any other (choices)."""
    out = []
    for k, knob in enumerate(knobs):
        size = len(knob.get("values") or knob.get("labels"))
        ordered = knob["kind"] != "choice"
        steps = (range(size) if every_value or not ordered
                 else (config[k] - 1, config[k] + 1))
        for v in steps:
            if 0 <= v < size and v != config[k]:
                out.append(tuple(config[:k]) + (v,) + tuple(config[k + 1:]))
    return out


def subset(task: dict, sample: int, seed: int) -> list[list[int]]:
    """The configurations of `task` (a ContextRecorder task: start, knobs, configs) to record,
    in the order they are measured: the start, its one-knob neighbourhood (each knob through
    all its values), then `sample` random configurations each followed by its one-step
    neighbours; only valid ones (the space's configs), each once. `sample` < 0: all of them."""
    valid = [tuple(c) for c in task["configs"]]
    if sample < 0:
        return [list(c) for c in valid]
    allowed = set(valid)
    start = tuple(task["start"])
    chosen = {start: None}
    for c in _neighbours(list(start), task["knobs"], every_value=True):
        if c in allowed:
            chosen.setdefault(c)
    rng = random.Random(f"{seed}:{task['signature']}")
    for c in rng.sample(valid, min(sample, len(valid))):
        chosen.setdefault(c)
        for n in _neighbours(list(c), task["knobs"], every_value=False):
            if n in allowed:
                chosen.setdefault(n)
    return [list(c) for c in chosen]


def record_lowered(model, example, path: str, *, sample: int = 12, repeats: int = 3,
                   min_repeat_seconds: float = 2e-3, timeout_seconds: float = 2.0, seed: int = 0,
                   streams: int = 1, progress: bool = True, header: dict | None = None,
                   note: str = "") -> dict:
    """Records the in-context tasks of `model` prepared (lowered) on `example`: per recorded
    configuration its median time in the replay, its noise, its setup and per-repeat cost; a
    task's baseline is its start's (the rule's) time. Writes the trace to `path`; returns
    its header."""
    from .._C import kernels
    from ..replay.wrapper import Nimble

    if repeats < 2:
        raise ValueError(f"repeats must be at least 2 (a spread needs two), got {repeats}")
    fast = Nimble(model).prepare(example, streams=streams)
    if not any(op["name"].startswith("nimble::") for op in fast.replay.ops()):
        raise ValueError("the replay is not lowered (not a CPU inference replay?): nothing to "
                         "record in context")
    program = fast._program
    with program.snapshot():  # the replay runs on its example inputs: put back what it writes
        recorder = kernels.ContextRecorder(fast.replay, program.example_inputs,
                                           min_repeat_seconds=min_repeat_seconds,
                                           timeout_seconds=timeout_seconds, seed=seed)
        tasks = recorder.tasks()
        if not tasks:
            raise ValueError("the lowered replay has no convolution to tune in context")
        picked = [subset(t, sample, seed) for t in tasks]
        header = {"nimble_trace": trace_file.FORMAT_VERSION, "model": type(model).__name__,
                  **(header or {}), "device": kernels.device_key(), "lowered": True,
                  # ContextMeasurer's untimed warm-up replays in each recorded setup: what the
                  # simulator's first-call cut takes off (docs/tuning.md, "Traces").
                  "warm_ups": 2,
                  "subset": ("every configuration" if sample < 0 else
                             f"start, its one-knob neighbourhood, {sample} random configurations "
                             f"and their one-step neighbours (seed {seed})"),
                  "repeats": repeats, "min_repeat_seconds": min_repeat_seconds,
                  "recorded_at": time.time(), "task_count": len(tasks),
                  "config_count": sum(map(len, picked)),
                  "space_config_count": sum(len(t["configs"]) for t in tasks), "note": note}
        bar = None
        if progress:
            from tqdm import tqdm

            bar = tqdm(total=header["config_count"], desc=f"recording {header['model']} in context",
                       unit="config", file=sys.stderr, mininterval=0.5, dynamic_ncols=True)
        # The process's first in-context measurement pays one-time costs (a mobilenet_v2 rule
        # timed 100x its neighbours): one measurement before the recording, discarded.
        trace_file.measure_point(recorder, tasks[0]["signature"], tasks[0]["start"], 2)
        started = time.monotonic()
        out = []
        for task, configs in zip(tasks, picked):
            row = {k: task[k] for k in ("name", "signature", "group", "flops", "weight", "knobs",
                                        "start")}
            row["space_size"] = len(task["configs"])
            columns = {k: [] for k in trace_file.PER_CONFIG}
            for config in configs:
                point = trace_file.measure_point(recorder, task["signature"], config, repeats)
                columns["configs"].append(config)
                for key in trace_file.PER_CONFIG[1:]:
                    columns[key].append(trace_file.rounded(point[key]))
                if bar:
                    bar.set_postfix_str(task["name"], refresh=False)
                    bar.update()
            # The rule's time is its own record's (the start comes first), timed as every
            # candidate is: a separate baseline timing would add noise of its own.
            row["baseline_seconds"] = columns["seconds"][0]
            out.append(dict(row, **columns))
        if bar:
            bar.close()
    header["record_seconds"] = time.monotonic() - started
    trace_file.save(dict(header, tasks=out), path)
    return header

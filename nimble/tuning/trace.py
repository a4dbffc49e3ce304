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
import os
import statistics
import sys
import time

FORMAT_VERSION = 1
PER_CONFIG = ("configs", "seconds", "noise", "setup_seconds", "repeat_seconds", "error")


def _repeats(count: int) -> dict:
    return {"adaptive": False, "best_seconds": 0.0, "fixed_repeats": count, "min_repeats": count,
            "max_repeats": count, "target_relative_error": 0.0, "slower_than_best_factor": 0.0,
            "one_sample_cut_factor": 0.0, "confidence_z": 0.0}


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


def record(model_name: str, path: str, *, batch: int = 1, image_size: int = 64,
           lowered: bool = True, sample: int = 12, progress: bool = True, **options) -> dict:
    """Records zoo model `model_name`'s tuning tasks and writes the trace to `path`; returns its
    header. `lowered` (the default): the tasks `nimble.tune` tunes on the replay `prepare` gives
    on the CPU, timed in that replay, a subset of `sample` random configurations and the
    neighbourhoods of the rule's and theirs (nimble/tuning/lowered_trace.py; -1: every one);
    else every configuration of the unlowered replay's tasks, each kernel timed alone."""
    from .. import zoo

    model, example = zoo.build(model_name, batch=batch, image_size=image_size)
    header = {"model": model_name, "batch": batch, "image_size": image_size}
    if lowered:
        from .lowered_trace import record_lowered

        return record_lowered(model, example, path, sample=sample, progress=progress,
                              header=header, **options)
    return record_model(model, example, path, progress=progress, header=header, **options)


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


def command(args, common_kwargs) -> int:
    """`python -m nimble tune --record-trace FILE --model M`, `... --compare --trace FILE` and
    `... --compare --model M` (records the model's lowered tasks first, to --record-trace FILE
    or a temporary file, then compares on that trace)."""
    if args.record_trace or (args.compare and args.model and not args.trace):
        if not args.model:
            print("python -m nimble tune: --record-trace needs --model torchvision:NAME",
                  file=sys.stderr)
            return 2
        if not args.compare:
            header = _record_for(args, args.record_trace)
            print(f"recorded {header['config_count']} configurations of {header['task_count']} "
                  f"tasks of {args.model} in {header['record_seconds']:.0f} s to "
                  f"{args.record_trace}")
            return 0
        import tempfile

        with tempfile.TemporaryDirectory() as scratch:
            path = args.record_trace or os.path.join(scratch, "trace.jsonl.gz")
            header = _record_for(args, path)
            if not args.quiet:
                print(f"recorded {header['config_count']} configurations of "
                      f"{header['task_count']} tasks in {header['record_seconds']:.0f} s",
                      file=sys.stderr)
            return compare_command(args, load(path), common_kwargs)
    if not args.compare:
        print("python -m nimble tune: --trace goes with --compare", file=sys.stderr)
        return 2
    try:
        trace = load(args.trace)
    except (OSError, ValueError) as e:
        print(f"python -m nimble tune: --trace: {e}", file=sys.stderr)
        return 2
    return compare_command(args, trace, common_kwargs)


def _record_for(args, path: str) -> dict:
    return record(args.model, path, batch=args.batch, image_size=args.image_size,
                  sample=args.trace_sample, progress=not args.quiet)


def compare_command(args, trace: dict, common_kwargs) -> int:
    """Every scheduler on `trace`, one noise seed each (docs/tuning.md, "Comparing")."""
    from .._C import tuning

    # The real tuner's slot (nimble/tuning/tune.py), the trace's costs being real ones; shorter
    # on a trace so small that its budget would hold fewer than 20 slots.
    budget = (args.budget_seconds if math.isfinite(args.budget_seconds)
              else tuning.trace_budget_seconds(trace, adaptive=not args.no_adaptive))
    if args.slot_seconds is None:
        args.slot_seconds = float(f"{min(3.0, budget / 20):.2g}")
    schedulers = [s for s in args.schedulers.split(",") if s] or tuning.scheduler_names()
    seeds = list(range(5 if args.seeds is None else args.seeds))
    started = time.monotonic()
    result = tuning.compare(schedulers=schedulers, seeds=seeds, threads=args.threads, trace=trace,
                            **common_kwargs(args))
    wall = time.monotonic() - started
    if args.plot:
        from .curves import write_plot

        write_plot(args.plot, {r["scheduler"]: r["remeasured_curve"] for r in result["runs"]
                               if r["seed"] == seeds[0]}, title=str(trace.get("model", "trace")))
    if args.json:
        runs = [{k: r[k] for k in ("scheduler", "seed", "time_to_95_s", "time_to_99_s",
                                   "remeasured_final_ms", "cold_time_share", "stop_reason",
                                   "tuning_seconds", "remeasured_curve")}
                for r in result["runs"]]
        print(json.dumps({k: result[k] for k in ("rows", "table", "reference_ms", "budget_seconds")}
                         | {"seeds": seeds, "wall_seconds": wall, "runs": runs,
                            "optimum_ms": optimum_ms(trace),
                            "exhaustive_seconds": exhaustive_seconds(trace)}))
        return 0
    print(f"{len(schedulers)} schedulers on the trace of {trace.get('model', '?')} "
          f"({len(trace['tasks'])} tasks, {sum(len(t['configs']) for t in trace['tasks'])} "
          f"configurations{', lowered, timed in the replay' if trace.get('lowered') else ''}; "
          f"exhausting it takes {exhaustive_seconds(trace):.0f} s), seeds "
          f"{seeds[0]}..{seeds[-1]}, budget {result['budget_seconds']:.0f} s, "
          f"{args.slot_seconds:g} s slots; times to 95%/99% of {result['reference_ms']:.4f} ms, "
          f"the best re-measured final latency of any run (the trace's optimum: "
          f"{optimum_ms(trace):.4f} ms); medians over seeds [fastest-slowest seed]; cold time "
          f"share: tuning time on candidates at least 2x slower than their task's best")
    print(result["table"], end="")
    print(f"({wall:.0f} s wall)")
    return 0

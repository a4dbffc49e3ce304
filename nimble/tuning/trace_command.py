"""`python -m nimble tune --record-trace FILE --model M` and `--compare --trace FILE` / `--compare
--model M`: record a zoo model's tuning tasks as a trace (trace.py, the format and the
unlowered recording; lowered_trace.py, the lowered replay's in-context tasks) and compare the
schedulers on one."""

from __future__ import annotations

import json
import os
import sys
import time

from .lowered_trace import record_lowered
from .trace import exhaustive_seconds, load, optimum_ms, record_model


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
        return record_lowered(model, example, path, sample=sample, progress=progress,
                              header=header, **options)
    return record_model(model, example, path, progress=progress, header=header, **options)


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

    # Unless given, the slot is one batch of the trace's median task (docs/tuning.md, "Comparing").
    if args.slot_seconds is None:
        args.slot_seconds = tuning.trace_slot_seconds(trace, adaptive=not args.no_adaptive)
    schedulers = [s for s in args.schedulers.split(",") if s] or tuning.scheduler_names()
    seeds = list(range(args.first_seed, args.first_seed + (5 if args.seeds is None else args.seeds)))
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
        print(json.dumps({k: result[k] for k in ("rows", "table", "reference_ms", "budget_seconds",
                                                 "slot_seconds")}
                         | {"seeds": seeds, "wall_seconds": wall, "runs": runs,
                            "optimum_ms": optimum_ms(trace),
                            "exhaustive_seconds": exhaustive_seconds(trace)}))
        return 0
    print(f"{len(schedulers)} schedulers on the trace of {trace.get('model', '?')} "
          f"({len(trace['tasks'])} tasks, {sum(len(t['configs']) for t in trace['tasks'])} "
          f"configurations{', lowered, timed in the replay' if trace.get('lowered') else ''}; "
          f"exhausting it takes {exhaustive_seconds(trace):.0f} s), seeds "
          f"{seeds[0]}..{seeds[-1]}, budget {result['budget_seconds']:.0f} s, "
          f"{args.slot_seconds:.2g} s slots; times to 95%/99% of {result['reference_ms']:.4f} ms, "
          f"the best re-measured final latency of any run (the trace's optimum: "
          f"{optimum_ms(trace):.4f} ms); medians over seeds [fastest-slowest seed]; cold time "
          f"share: tuning time on candidates at least 2x slower than their task's best")
    print(result["table"], end="")
    print(f"({wall:.0f} s wall)")
    return 0

"""`python -m nimble tune ...`: the auto-tuner from the command line.

A model's own kernels (`--model`), measured on this machine, or a simulated model
(`--simulate`); the tuner itself is C++ (tuning/, csrc/kernels/, csrc/slot/). Examples:

    python -m nimble tune --model torchvision:mobilenet_v2 --budget-seconds 1200 --db tune.db
    python -m nimble tune --model torchvision:resnet18 --compare --schedulers sequential,dynatune
    python -m nimble tune --simulate --scheduler dynatune --seed 0
    python -m nimble tune --simulate --compare --seeds 5 --plot compare.png
    python -m nimble tune --models torchvision:resnet18,torchvision:mobilenet_v2 --workers 2
    python -m nimble tune --record-trace r18.jsonl --model torchvision:resnet18
    python -m nimble tune --compare --trace r18.jsonl --seeds 5
    python -m nimble tune --compare --model torchvision:resnet18 --image-size 32  # records first
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time

from . import workers
from .curves import (PLOT_INSTALL_HINT, plotting_available, print_curve, scheduler_overhead,
                     time_to_reach, write_csv, write_plot)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m nimble tune",
        description="Tune a model's kernels; --simulate tunes a synthetic model (see docs/tuning.md).",
    )
    p.add_argument("--model", default=None,
                   help="tune this model's kernels on this machine: torchvision:NAME (see nimble/zoo.py)")
    p.add_argument("--batch", type=int, default=1, help="with --model: batch size")
    p.add_argument("--image-size", type=int, default=64, help="with --model: image side")
    p.add_argument("--streams", type=int, default=1, help="with --model: streams of the replay")
    p.add_argument("--simulate", action="store_true", help="tune a simulated model")
    p.add_argument("--scheduler", default="dynatune", help="operator scheduler (default dynatune)")
    p.add_argument("--seed", type=int, default=0, help="seed of the simulated model")
    p.add_argument("--tasks", type=int, default=12, help="tasks in the simulated model")
    p.add_argument("--trials-per-task", type=int, default=400,
                   help="trial budget per task (total budget = tasks x this unless --budget-* is given)")
    p.add_argument("--budget-trials", type=int, default=0, help="total trial budget")
    p.add_argument("--budget-seconds", type=float, default=math.inf, help="total tuning-time budget")
    p.add_argument("--slot-seconds", type=float, default=None,
                   help="length of a scheduling slot (default 20 simulated, 3 with zoo models, "
                        "one batch of the median task on a trace)")
    p.add_argument("--early-stop-trials", type=int, default=200,
                   help="a task without improvement for this many trials is finished")
    p.add_argument("--c", type=float, default=None,
                   help="DynaTune's UCB constant (default 0.01; rewards are shares of the model's "
                        "initial latency, so one value fits models of any speed)")
    p.add_argument("--survey-stop", action="store_true",
                   help="stop when the improvement rate falls below --phi (Trimmer)")
    p.add_argument("--phi", type=float, default=-0.25, help="survey stop threshold")
    p.add_argument("--goal-ms", type=float, default=0.0, help="stop at this model latency")
    p.add_argument("--no-adaptive", action="store_true", help="fixed repeats instead of AdaTune's evaluator")
    p.add_argument("--no-cold-filter", action="store_true", help="disable Trimmer's cold-candidate filter")
    p.add_argument("--finish-when-cold", action="store_true",
                   help="finish a task once every candidate left is cold (cheaper tuning, a "
                        "slightly worse final; see docs/tuning.md)")
    p.add_argument("--mcmc-steps", type=int, default=500, help="ensemble sampler steps")
    p.add_argument("--db", default=None, help="SQLite tuning database to write (and resume from)")
    p.add_argument("--no-resume", action="store_true", help="do not start from the database's records")
    p.add_argument("--export", default=None, metavar="FILE.jsonl", help="with --db: write every record as JSON lines")
    p.add_argument("--import", dest="import_", default=None, metavar="FILE.jsonl",
                   help="with --db: add the records of a JSON lines file")
    p.add_argument("--best", action="store_true",
                   help="with --db: print the best config of every task signature on --device")
    p.add_argument("--device", default="simulated", help="with --best: device of the records")
    p.add_argument("--compare", action="store_true", help="run every scheduler on the same models")
    p.add_argument("--seeds", type=int, default=None,
                   help="with --compare: seeds 0..N-1 (default 5 simulated, 1 with --model)")
    p.add_argument("--first-seed", type=int, default=0,
                   help="with --compare --trace: seeds from this one on (a held-out set)")
    p.add_argument("--schedulers", default="", help="with --compare: comma-separated subset")
    p.add_argument("--threads", type=int, default=2, help="with --compare: runs in parallel")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--curve", default=None, help="write the latency-over-time curve as CSV")
    p.add_argument("--plot", default=None,
                   help="plot the latency-over-time curve(s) to a PNG file (needs nimble[plot])")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    p.add_argument("--no-peers", action="store_true",
                   help="with --model: do not time ONNX Runtime and OpenVINO beside the replay")
    p.add_argument("--peer-runs", type=int, default=30,
                   help="with --model: calls timed per runtime against the peers")
    p.add_argument("--record-trace", default=None, metavar="FILE.jsonl",
                   help="with --model: measure every configuration of every task once and write "
                        "the trace (docs/tuning.md, \"Traces\")")
    p.add_argument("--trace", default=None, metavar="FILE.jsonl",
                   help="with --compare: replay this recorded trace instead of synthetic "
                        "models or a recording (default budget: a quarter of finishing every task)")
    p.add_argument("--trace-sample", type=int, default=12, metavar="N",
                   help="with --record-trace or --model --compare: record the rule's "
                        "configuration and its one-knob neighbourhood, N random configurations "
                        "and their neighbours (-1: every configuration)")
    p.add_argument("--unlowered", action="store_true",
                   help="with --model --compare: tune the unlowered replay for real, each run "
                        "from an empty database, instead of comparing on a trace of the lowered "
                        "tasks")
    workers.add_arguments(p)
    return p


def _common_kwargs(args) -> dict:
    return dict(
        tasks=args.tasks, trials_per_task=args.trials_per_task, slot_seconds=args.slot_seconds,
        budget_trials=args.budget_trials, budget_seconds=args.budget_seconds,
        early_stop_trials=args.early_stop_trials, c=args.c, adaptive=not args.no_adaptive,
        cold_filter=not args.no_cold_filter, mcmc_steps=args.mcmc_steps,
        finish_when_cold=args.finish_when_cold,
    )


def _run_one(args) -> int:
    from nimble._C import tuning

    shown = None
    if not args.quiet and not args.json:
        from .tune import TuningProgress

        trials = args.budget_trials or args.tasks * args.trials_per_task
        shown = TuningProgress(args.budget_seconds, trials)

    from .cost import cost_summary, energy_counters, energy_delta, format_cost

    before, started = energy_counters(), time.monotonic()
    try:
        with workers.worker_group(args) as group:
            report = tuning.simulate(
                scheduler=args.scheduler, seed=args.seed, survey_stop=args.survey_stop,
                phi=args.phi, goal_ms=args.goal_ms, database=args.db,
                resume=not args.no_resume, progress=shown.slot if shown else None,
                pool=workers.simulated_pool(group, args), **_common_kwargs(args))
    finally:
        if shown:
            shown.done()
    cost = cost_summary(report, time.monotonic() - started, energy_delta(before, energy_counters()))
    curve = report["curve"]
    final = report["final_model_ms"]
    t95 = time_to_reach(curve, final / 0.95)
    t99 = time_to_reach(curve, final / 0.99)
    overhead = scheduler_overhead(report)
    if args.curve:
        write_csv(args.curve, curve)
    if args.plot:
        write_plot(args.plot, {report["scheduler"]: curve},
                   title=f"simulated model seed {args.seed}")
    if args.json:
        out = {
            "scheduler": report["scheduler"], "seed": args.seed, "stop_reason": report["stop_reason"],
            "initial_model_ms": report["initial_model_ms"], "final_model_ms": final,
            "time_to_95_s": t95, "time_to_99_s": t99, "tuning_seconds": report["tuning_seconds"],
            "trials": report["trials"], "slots": report["slots"],
            "scheduler_overhead_share": overhead, "cold_time_share": report["cold_time_share"],
            "failed_time_share": report["failed_time_share"], "cut_short": report["cut_short"],
            "curve": curve, "tasks": report["tasks"], "cost": cost,
        }
        print(json.dumps(out))
        return 0
    print(f"scheduler {report['scheduler']}, simulated model seed {args.seed}: "
          f"{report['trials']} trials in {report['slots']} slots, stopped by {report['stop_reason']}")
    print_curve(report)
    print(format_cost(cost))
    return 0


def _run_compare(args) -> int:
    from nimble._C import tuning

    schedulers = [s for s in args.schedulers.split(",") if s] or tuning.scheduler_names()
    seeds = list(range(args.seeds))
    started = time.monotonic()
    result = tuning.compare(schedulers=schedulers, seeds=seeds, threads=args.threads,
                            **_common_kwargs(args))
    wall = time.monotonic() - started
    if args.plot:
        first_seed = [r for r in result["runs"] if r["seed"] == seeds[0]]
        write_plot(args.plot, {r["scheduler"]: r["curve"] for r in first_seed},
                   title=f"simulated model seed {seeds[0]}")
    if args.curve:
        with open(args.curve, "w") as f:
            f.write("scheduler,seed,seconds,trials,model_ms\n")
            for r in result["runs"]:
                for s, t, ms in r["curve"]:
                    f.write(f"{r['scheduler']},{r['seed']},{s:.6g},{t},{ms:.9g}\n")
    if args.json:
        runs = [{"scheduler": r["scheduler"], "seed": r["seed"], "time_to_95_s": r["time_to_95_s"],
                 "time_to_99_s": r["time_to_99_s"], "final_model_ms": r["final_model_ms"],
                 "tuning_seconds": r["tuning_seconds"], "slots": r["slots"],
                 "scheduler_wall_seconds": r["scheduler_wall_seconds"]} for r in result["runs"]]
        print(json.dumps({"seeds": seeds, "rows": result["rows"], "runs": runs,
                          "table": result["table"], "wall_seconds": wall}))
        return 0
    print(f"{len(schedulers)} schedulers on simulated models (seeds {seeds[0]}..{seeds[-1]}, "
          f"{args.tasks} tasks, {args.trials_per_task} trials/task, {args.slot_seconds:g} s slots); "
          f"medians over seeds; times to 95%/99% of the best final latency of each seed")
    print(result["table"], end="")
    print(f"({wall:.0f} s wall)")
    return 0


def _database_command(args) -> int:
    from nimble._C import tuning

    if not args.db:
        print("python -m nimble tune: --export, --import and --best need --db", file=sys.stderr)
        return 2
    db = tuning.TuningDatabase(args.db)
    if args.import_:
        print(f"imported {db.import_jsonl(args.import_)} records into {args.db}", file=sys.stderr)
    if args.export:
        print(f"exported {db.export_jsonl(args.export)} records to {args.export}", file=sys.stderr)
    if args.best:
        best = {sig: db.best(sig, args.device) for sig in db.signatures(args.device)}
        if args.json:
            print(json.dumps(best))
        else:
            for sig, rec in best.items():
                if rec is None:
                    print(f"{sig}: no successful measurement")
                else:
                    ms = 1e3 * sum(rec["seconds"]) / len(rec["seconds"])
                    print(f"{sig}: config {rec['config']} {ms:.4f} ms")
    return 0


def main(argv: list[str]) -> int:
    if argv and argv[0] == "tune":  # accept both `tune ...` and the arguments after it
        argv = argv[1:]
    args = _parser().parse_args(argv)
    if args.export or args.import_ or args.best:
        return _database_command(args)

    if not args.simulate and not args.model and not args.models and not args.trace:
        print("python -m nimble tune: give --model torchvision:NAME (real kernels), --simulate "
              "or --models A,B,C; see --help", file=sys.stderr)
        return 2
    if args.plot and not plotting_available():
        # Before tuning, not after it: a long run must not end in this error.
        print(f"python -m nimble tune: --plot: {PLOT_INSTALL_HINT}", file=sys.stderr)
        return 2
    try:
        from nimble._C import tuning
    except ImportError as e:
        print(f"python -m nimble tune: nimble._C is not built ({e})", file=sys.stderr)
        return 2
    names = tuning.scheduler_names()
    for name in ([s for s in args.schedulers.split(",") if s] if args.compare else [args.scheduler]):
        if name not in names and name != "ansor":
            print(f"unknown scheduler '{name}' (known: {', '.join(names)})", file=sys.stderr)
            return 2
    if args.compare and workers.uses_workers(args):
        print("python -m nimble tune: --compare runs in this process; drop --workers",
              file=sys.stderr)
        return 2
    if args.record_trace or args.trace or (args.compare and args.model and not args.unlowered):
        from .trace_command import command

        return command(args, _common_kwargs)
    try:
        return _dispatch(args)
    except ImportError as e:  # workers without the ray extra
        print(f"python -m nimble tune: {e}", file=sys.stderr)
        return 2


def _dispatch(args) -> int:
    if args.models:
        kind, names = workers.parse_models(args)
        if args.slot_seconds is None:
            args.slot_seconds = 20.0 if kind == "simulated" else 3.0
        return workers.run_survey(args, kind, names, _common_kwargs(args))
    if args.model:
        from .models import compare_on_model, tune_model

        args.slot_seconds = 3.0 if args.slot_seconds is None else args.slot_seconds
        args.seeds = 1 if args.seeds is None else args.seeds
        return compare_on_model(args) if args.compare else tune_model(args)
    args.slot_seconds = 20.0 if args.slot_seconds is None else args.slot_seconds
    args.seeds = 5 if args.seeds is None else args.seeds
    return _run_compare(args) if args.compare else _run_one(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

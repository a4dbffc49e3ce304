"""Benchmarks of tuning on Ray workers (issue 17), on simulated models whose workers sleep a
fraction of each batch's simulated measurement time, so that they mostly wait as real ones do:

    python -m nimble.bench.distributed throughput [--workers 1,2,4,8]
    python -m nimble.bench.distributed faults [--runs 10]
    python -m nimble.bench.distributed survey
    python -m nimble.bench.distributed survey --models torchvision:resnet18,torchvision:mobilenet_v2

throughput: trials per second (wall) and final latency on 1, 2, 4, 8 workers, same model and
trial budget. faults: runs on 4 workers, one killed at a random moment in each; every run must
end with each config recorded once and the fault-free run's final latency. survey: three
simulated models tuned one after another with the same workers, then at once with Trimmer's
model-level survey; machine-seconds spent and whether each model reached 99% of the latency
it reached alone. With zoo models (`--models torchvision:A,...`), their real kernels at
`--batch`/`--image-size`, each with `--budget-seconds` of tuning (machine-seconds) alone and in
the survey, from empty databases; machine-seconds to 99% of the better of the two final
latencies, each way. One local Ray instance (loopback) for everything; prints JSON lines.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import threading
import time

from ..tuning import distributed, survey, workers
from .._C import kernels, tuning
from ..tuning.curves import time_to_reach


def _pool(group, seed: int, tasks: int, sleep_scale: float, name: str = "sim"):
    signatures = tuning.SimulatedModelMeasurer(seed, tasks).signatures()
    return group.pool(name, distributed.simulated_model(seed, tasks, sleep_scale=sleep_scale),
                      signatures)


def _group(workers: int, cpus: int):
    return distributed.WorkerGroup(workers, cores_per_worker=min(1.0, cpus / workers))


def throughput(args, cpus: int) -> None:
    base = None
    for n in (int(w) for w in args.workers.split(",")):
        with _group(n, cpus) as group:
            started = time.monotonic()
            r = tuning.simulate(seed=args.seed, tasks=args.tasks,
                                trials_per_task=args.trials_per_task,
                                early_stop_trials=args.early_stop_trials, mcmc_steps=100,
                                pool=_pool(group, args.seed, args.tasks, args.sleep_scale))
            wall = time.monotonic() - started
        rate = r["trials"] / wall
        base = base or rate
        print(json.dumps({"bench": "throughput", "workers": n, "trials": r["trials"],
                          "wall_s": round(wall, 2), "trials_per_s": round(rate, 2),
                          "speedup": round(rate / base, 2),
                          "target_speedup": round(0.85 * n, 2),
                          "final_model_ms": r["final_model_ms"],
                          "stop_reason": r["stop_reason"]}), flush=True)


def _each_config_once(db) -> tuple[int, int]:
    records, duplicates = 0, 0
    for signature in db.signatures("simulated"):
        configs = [tuple(x["config"]) for x in db.records(signature, "simulated")]
        records += len(configs)
        duplicates += len(configs) - len(set(configs))
    return records, duplicates


def faults(args, cpus: int, scratch: str) -> None:
    rng = random.Random(args.seed)
    kwargs = dict(seed=args.seed, tasks=args.tasks, trials_per_task=args.trials_per_task,
                  early_stop_trials=args.early_stop_trials, mcmc_steps=100)
    with _group(4, cpus) as group:
        started = time.monotonic()
        clean = tuning.simulate(pool=_pool(group, args.seed, args.tasks, args.sleep_scale), **kwargs)
        clean_wall = time.monotonic() - started
    print(json.dumps({"bench": "faults", "run": "fault-free", "trials": clean["trials"],
                      "wall_s": round(clean_wall, 2), "final_model_ms": clean["final_model_ms"]}),
          flush=True)
    for run in range(args.runs):
        path = os.path.join(scratch, f"faults-{run}.db")
        with _group(4, cpus) as group:
            out = {}
            pool = _pool(group, args.seed, args.tasks, args.sleep_scale)
            thread = threading.Thread(target=lambda: out.setdefault("r", tuning.simulate(
                database=path, pool=pool, **kwargs)))
            at = rng.uniform(0.1, 0.8) * clean_wall
            victim = rng.randrange(4)
            thread.start()
            time.sleep(at)
            os.kill(group.pids()[victim], signal.SIGKILL)
            thread.join()
            left = group.alive()
        r = out["r"]
        records, duplicates = _each_config_once(tuning.TuningDatabase(path))
        print(json.dumps({
            "bench": "faults", "run": run, "killed_worker": victim, "killed_at_s": round(at, 2),
            "workers_left": left, "trials": r["trials"], "records": records,
            "duplicates": duplicates, "lost": r["trials"] - records,
            "final_model_ms": r["final_model_ms"],
            "same_final_as_fault_free": r["final_model_ms"] == clean["final_model_ms"]}),
            flush=True)


def survey_bench(args, cpus: int) -> None:
    seeds = [int(s) for s in args.models.split(",")]
    kwargs = dict(tasks=args.tasks, trials_per_task=args.trials_per_task,
                  early_stop_trials=args.early_stop_trials, mcmc_steps=100)
    alone = {}
    with _group(args.survey_workers, cpus) as group:
        for seed in seeds:
            alone[seed] = tuning.simulate(seed=seed, pool=_pool(group, seed, args.tasks, 0.0,
                                                                f"alone{seed}"), **kwargs)
    with _group(args.survey_workers, cpus) as group:
        models = {f"simulated:{s}": (distributed.simulated_model(s, args.tasks),
                                     tuning.SimulatedModelMeasurer(s, args.tasks).signatures())
                  for s in seeds}

        def run_model(name, pool, progress):
            return tuning.simulate(seed=int(name.split(":")[1]), pool=pool, progress=progress,
                                   **kwargs)

        together = survey.survey_tune(models, group, run_model, round_seconds=args.round_seconds,
                                      patience=args.plateau, log=lambda line: None)
    sequential_seconds = sum(r["measure_seconds"] for r in alone.values())
    survey_seconds = sum(s["machine_seconds"] for s in together["models"].values())
    rows = {}
    for seed in seeds:
        s = together["models"][f"simulated:{seed}"]
        target = alone[seed]["final_model_ms"] / 0.99
        rows[seed] = {"alone_initial_ms": alone[seed]["initial_model_ms"],
                      "alone_final_ms": alone[seed]["final_model_ms"],
                      "alone_machine_s": round(alone[seed]["measure_seconds"]),
                      "survey_final_ms": s["final_model_ms"],
                      "survey_machine_s": round(s["machine_seconds"]),
                      "survey_stop": s["stop_reason"], "suspended_round": s["suspended_round"],
                      "reached_99": s["final_model_ms"] <= target}
    print(json.dumps({"bench": "survey", "workers": args.survey_workers,
                      "rounds": together["rounds"],
                      "sequential_machine_s": round(sequential_seconds),
                      "survey_machine_s": round(survey_seconds),
                      "saving": round(1 - survey_seconds / sequential_seconds, 3),
                      "models": rows}), flush=True)


def survey_zoo(args, cpus: int, scratch: str) -> None:
    names = args.models.split(",")
    replays, described = workers.prepare_zoo(args, names)

    def options(database: str) -> dict:
        return dict(budget_seconds=args.budget_seconds, slot_seconds=args.slot_seconds,
                    early_stop_trials=args.early_stop_trials, seed=args.seed,
                    database=os.path.join(scratch, database))

    alone, walls = {}, {}
    started = time.monotonic()
    for i, name in enumerate(names):
        # A group of its own: no other model's measurements to reuse (nimble/tuning/distributed.py).
        with _group(args.survey_workers, cpus) as group:
            alone[name] = kernels.tune(replays[name], pool=group.pool(name, *described[name]),
                                       **options(f"alone-{i}.db"))
    walls["alone"] = time.monotonic() - started
    round_seconds = args.round_seconds or 2 * args.slot_seconds * max(
        len(signatures) for _, signatures in described.values())
    started = time.monotonic()
    with _group(args.survey_workers, cpus) as group:
        together = survey.survey_tune(
            described, group, workers.zoo_run_model(replays, options("survey.db")),
            round_seconds=round_seconds, patience=args.plateau, log=lambda line: None)
    walls["survey"] = time.monotonic() - started
    rows = {}
    for name in names:
        a, s = alone[name], together["models"][name]
        target = min(a["final_model_ms"], s["final_model_ms"]) / 0.99
        rows[name] = {"alone_initial_ms": a["initial_model_ms"],
                      "alone_final_ms": a["final_model_ms"],
                      "alone_machine_s": round(a["measure_seconds"], 1),
                      "alone_to_99_s": time_to_reach(a["curve"], target),
                      "survey_initial_ms": s["initial_model_ms"],
                      "survey_final_ms": s["final_model_ms"],
                      "survey_machine_s": round(s["machine_seconds"], 1),
                      "survey_to_99_s": time_to_reach(s["report"]["curve"], target),
                      "survey_stop": s["stop_reason"], "suspended_round": s["suspended_round"]}
    sequential = sum(r["measure_seconds"] for r in alone.values())
    surveyed = sum(s["machine_seconds"] for s in together["models"].values())
    print(json.dumps({"bench": "survey", "workers": args.survey_workers,
                      "image_size": args.image_size, "batch": args.batch,
                      "budget_seconds": args.budget_seconds, "slot_seconds": args.slot_seconds,
                      "round_seconds": round_seconds, "rounds": together["rounds"],
                      "sequential_machine_s": round(sequential, 1),
                      "survey_machine_s": round(surveyed, 1),
                      "saving": round(1 - surveyed / sequential, 3),
                      "wall_s": {k: round(v) for k, v in walls.items()}, "models": rows}),
          flush=True)


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m nimble.bench.distributed")
    p.add_argument("bench", choices=["throughput", "faults", "survey"])
    p.add_argument("--workers", default="1,2,4,8")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tasks", type=int, default=None,
                   help="tasks per simulated model (default 12; survey: 6)")
    p.add_argument("--trials-per-task", type=int, default=None,
                   help="default 300 (survey: 400, the simulator's)")
    p.add_argument("--early-stop-trials", type=int, default=None,
                   help="default 100 (survey: 200, the simulator's)")
    p.add_argument("--sleep-scale", type=float, default=0.03,
                   help="workers sleep this fraction of the simulated measurement time")
    p.add_argument("--runs", type=int, default=10)
    p.add_argument("--models", default="0,1,2",
                   help="survey: simulated model seeds, or zoo models (torchvision:NAME,...)")
    p.add_argument("--survey-workers", type=int, default=4)
    p.add_argument("--round-seconds", type=float, default=None,
                   help="survey: default 240 simulated, two slots per task of the largest zoo "
                        "model")
    p.add_argument("--batch", type=int, default=1, help="survey of zoo models: batch size")
    p.add_argument("--image-size", type=int, default=64, help="survey of zoo models: image side")
    p.add_argument("--budget-seconds", type=float, default=150.0,
                   help="survey of zoo models: tuning seconds per model")
    p.add_argument("--slot-seconds", type=float, default=0.5,
                   help="survey of zoo models: scheduling slot")
    p.add_argument("--plateau", type=int, default=2, help="survey: plateau rounds")
    args = p.parse_args()
    survey_run = args.bench == "survey"
    zoo_survey = survey_run and not args.models.replace(",", "").isdigit()
    args.streams = 1
    if survey_run and not zoo_survey:
        args.round_seconds = args.round_seconds or 240.0
    args.tasks = args.tasks or (6 if survey_run else 12)
    args.trials_per_task = args.trials_per_task or (400 if survey_run else 300)
    args.early_stop_trials = args.early_stop_trials or (200 if survey_run else 100)
    ray = distributed.require_ray()
    cpus = os.cpu_count() or 1
    ray.init(num_cpus=cpus, include_dashboard=False, log_to_driver=False,
             _node_ip_address="127.0.0.1")
    try:
        if args.bench == "throughput":
            throughput(args, cpus)
        elif args.bench == "survey" and not zoo_survey:
            survey_bench(args, cpus)
        else:
            import tempfile

            with tempfile.TemporaryDirectory() as scratch:
                (faults if args.bench == "faults" else survey_zoo)(args, cpus, scratch)
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main()

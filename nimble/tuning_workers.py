"""`python -m nimble tune ... --workers N [--ray-address ADDR]` and `--models A,B,C`: the
command line's side of measuring on Ray workers (nimble/distributed.py) and of Trimmer's
multi-model survey tuning (nimble/survey.py)."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--workers", type=int, default=1,
                   help="measure on this many Ray workers (one per device or set of cores); "
                        "needs the ray extra: pip install nimble[ray]")
    p.add_argument("--ray-address", default=None,
                   help="join this Ray cluster (default: start a local one and stop it after)")
    p.add_argument("--cores-per-worker", type=float, default=None,
                   help="CPU cores per worker (default: this machine's split evenly; a "
                        "fraction shares cores, and then timings disturb each other)")
    p.add_argument("--worker-timeout", type=float, default=600.0,
                   help="seconds a worker may take for one batch before it is killed and "
                        "replaced (the batch is retried once, then recorded as failed)")
    p.add_argument("--sleep-scale", type=float, default=0.0,
                   help="with --simulate and workers: sleep this fraction of each batch's "
                        "simulated measurement time (to test throughput)")
    p.add_argument("--models", default=None,
                   help="survey-tune these models at once over the workers: comma-separated "
                        "torchvision:NAME or simulated:SEED (Trimmer's model-level survey)")
    p.add_argument("--round-seconds", type=float, default=None,
                   help="with --models: tuning seconds per model between two rankings "
                        "(default: two slots per task)")
    p.add_argument("--plateau", type=int, default=2,
                   help="with --models: rounds on a plateau before the worst model is suspended")
    p.add_argument("--plateau-gain", type=float, default=0.005,
                   help="with --models: a round gaining less than this share of the latency "
                        "(and whose improvement rate fell by Trimmer's criterion) is on a plateau")


def uses_workers(args) -> bool:
    return args.workers > 1 or args.ray_address is not None


@contextlib.contextmanager
def worker_group(args):
    """The Ray workers of a run, or None when it measures in this process."""
    if not uses_workers(args) and not args.models:
        yield None
        return
    from .distributed import WorkerGroup

    with WorkerGroup(args.workers, args.ray_address, batch_timeout=args.worker_timeout,
                     cores_per_worker=args.cores_per_worker) as group:
        yield group


def simulated(seed: int, args) -> tuple[dict, list[str]]:
    """A simulated model's description for the workers, and its task signatures."""
    from ._C import tuning
    from .distributed import simulated_model

    signatures = tuning.SimulatedModelMeasurer(seed, args.tasks).signatures()
    return simulated_model(seed, args.tasks, sleep_scale=args.sleep_scale), signatures


def simulated_pool(group, args):
    return None if group is None else group.pool("simulated", *simulated(args.seed, args))


def _parse_models(args) -> dict[str, tuple[str, int | None]]:
    models = {}
    for name in (m.strip() for m in args.models.split(",") if m.strip()):
        if name.startswith("simulated:"):
            models[name] = ("simulated", int(name.split(":", 1)[1]))
        else:
            raise SystemExit(f"python -m nimble tune: --models takes simulated:SEED (survey "
                             f"tuning of zoo models is not there yet), not {name!r}")
    return models


def run_survey(args, common: dict) -> int:
    """--models: every model tuned at once over the workers, the worst suspended each round."""
    from . import survey
    from ._C import tuning
    from .tuning_cost import cost_summary, energy_counters, energy_delta, format_cost

    seeds = {name: seed for name, (_kind, seed) in _parse_models(args).items()}
    described = {name: simulated(seed, args) for name, seed in seeds.items()}

    def run_model(name: str, pool, progress) -> dict:
        return tuning.simulate(scheduler=args.scheduler, seed=seeds[name], pool=pool,
                               progress=progress, database=args.db, resume=not args.no_resume,
                               **common)

    round_seconds = args.round_seconds or 2 * args.slot_seconds * args.tasks
    log = (lambda line: None) if args.json else (lambda line: print(line, file=sys.stderr))
    before, started = energy_counters(), time.monotonic()
    with worker_group(args) as group:
        result = survey.survey_tune(described, group, run_model, round_seconds, phi=args.phi,
                                    patience=args.plateau, min_gain=args.plateau_gain, log=log)
    wall = time.monotonic() - started
    joules = energy_delta(before, energy_counters())
    totals = {k: sum(s["report"][k] for s in result["models"].values())
              for k in ("measure_seconds", "cold_seconds", "failed_seconds")}
    cost = cost_summary(totals, wall, joules)
    if args.json:
        print(json.dumps({"rounds": result["rounds"], "cost": cost, "models": {
            n: {k: v for k, v in s.items() if k != "report"} | {"curve": s["report"]["curve"]}
            for n, s in result["models"].items()}}))
        return 0
    print(survey.format_summary(result))
    print(format_cost(cost))
    return 0

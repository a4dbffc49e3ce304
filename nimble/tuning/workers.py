"""`python -m nimble tune ... --workers N [--ray-address ADDR]` and `--models A,B,C`: the
command line's side of measuring on Ray workers (nimble/tuning/distributed.py) and of Trimmer's
multi-model survey tuning (nimble/tuning/survey.py)."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import threading
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
                        "(default: two slots per task of the model with the most tasks)")
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
    from .._C import tuning
    from .distributed import simulated_model

    signatures = tuning.SimulatedModelMeasurer(seed, args.tasks).signatures()
    return simulated_model(seed, args.tasks, sleep_scale=args.sleep_scale), signatures


def simulated_pool(group, args):
    return None if group is None else group.pool("simulated", *simulated(args.seed, args))


def parse_models(args) -> tuple[str, list[str]]:
    """The kind of --models ("simulated" or "zoo") and their names; a clear error for a name
    that is neither, or for a list mixing the two."""
    from .. import zoo

    accepted = ("--models takes comma-separated zoo models (torchvision:NAME, e.g. "
                "torchvision:resnet18, see nimble/zoo.py; transformer:encoder) or simulated:SEED")
    names = list(dict.fromkeys(m.strip() for m in args.models.split(",") if m.strip()))
    if not names:
        raise SystemExit(f"python -m nimble tune: {accepted}; got none")
    kinds = set()
    for name in names:
        if name.startswith("simulated:"):
            if not name.split(":", 1)[1].isdigit():
                raise SystemExit(f"python -m nimble tune: {accepted}; {name!r} has no integer seed")
            kinds.add("simulated")
            continue
        try:
            zoo.check_spec(name)
        except ValueError as e:
            raise SystemExit(f"python -m nimble tune: {accepted}; {e}") from None
        if name.startswith("hf:"):
            raise SystemExit(f"python -m nimble tune: {accepted}; {name} runs through "
                             f"torch.compile, not prepare, so its kernels are not tuned")
        kinds.add("zoo")
    if len(kinds) > 1:
        # A simulated model's tuning clock is simulated seconds, a zoo model's measured ones:
        # their improvements per second cannot be ranked against each other.
        raise SystemExit("python -m nimble tune: --models mixes simulated and zoo models, whose "
                         "tuning clocks differ; survey-tune them in separate runs")
    kind = kinds.pop()
    if kind == "zoo" and (args.simulate or args.model):
        raise SystemExit("python -m nimble tune: --models with zoo models takes neither "
                         "--simulate nor --model")
    return kind, names


class _BaselinesFirst:
    """Each model's tuner first times ATen's kernels of its tasks on this machine: here one
    model at a time, and no model's candidates are measured before every model's baselines are
    timed, since timings taken at once (or beside local workers) would disturb each other."""

    def __init__(self, models: int) -> None:
        self._turn = threading.Lock()
        self._all_timed = threading.Barrier(models)

    def tune(self, replay, **options) -> dict:
        """nimble._C.kernels.tune(replay, **options), its baselines timed in their turn."""
        from .._C import kernels

        timed = False

        def on_baseline(index: int, total: int) -> None:
            nonlocal timed
            if index == total - 1:
                timed = True
                self._turn.release()
                self._all_timed.wait()

        self._turn.acquire()
        try:
            return kernels.tune(replay, on_baseline=on_baseline, **options)
        finally:
            if not timed:  # failed before its baselines were timed: the others go on
                self._turn.release()
                self._all_timed.wait()


def _simulated_survey(args, names: list[str], common: dict):
    from .._C import tuning

    def run_model(name: str, pool, progress) -> dict:
        return tuning.simulate(scheduler=args.scheduler, seed=int(name.split(":", 1)[1]),
                               pool=pool, progress=progress, database=args.db,
                               resume=not args.no_resume, **common)

    return {name: simulated(int(name.split(":", 1)[1]), args) for name in names}, run_model


def prepare_zoo(args, names: list[str]) -> tuple[dict, dict]:
    """Zoo models prepared at --batch, --image-size and --streams: their replays, and their
    descriptions for the workers with their task signatures, by name."""
    from .._C import kernels
    from .distributed import zoo_model
    from .models import prepared

    replays, described = {}, {}
    for name in names:
        replays[name] = prepared(args, name)[2].replay
        tasks = kernels.tasks(replays[name])
        if not tasks:
            raise SystemExit(f"python -m nimble tune: {name} has no op a kernel family can "
                             f"replace (2-D float convolutions, linear layers with a bias)")
        described[name] = (zoo_model(name, args.batch, args.image_size, args.streams),
                           [t["signature"] for t in tasks])
    return replays, described


def zoo_run_model(replays: dict, options: dict):
    """survey_tune's run_model for prepared zoo models: nimble._C.kernels.tune with `options`
    (models.tune_options), the survey's pool and progress, baselines timed first."""
    baselines = _BaselinesFirst(len(replays))

    def run_model(name: str, pool, progress) -> dict:
        return baselines.tune(replays[name], pool=pool, progress=progress, **options)

    return run_model


def _zoo_survey(args, names: list[str]):
    from .models import tune_options

    replays, described = prepare_zoo(args, names)
    options = tune_options(args, args.scheduler, args.db or "tune.db", args.seed)
    return described, zoo_run_model(replays, options)


def run_survey(args, kind: str, names: list[str], common: dict) -> int:
    """--models: every model tuned at once over the workers, the worst suspended each round."""
    from . import survey
    from .cost import cost_summary, energy_counters, energy_delta, format_cost

    described, run_model = (_simulated_survey(args, names, common) if kind == "simulated"
                            else _zoo_survey(args, names))
    # Two slots per task of the largest model: each model has had a slot on each of its tasks
    # (and then some) between two rankings.
    round_seconds = args.round_seconds or 2 * args.slot_seconds * max(
        len(signatures) for _, signatures in described.values())
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

"""Trimmer's model-level survey tuning: several models tuned at once over the same workers.

Each model's C++ tuner runs in its own thread with its own pool on the shared WorkerGroup.
After every round (each running model has spent `round_seconds` of tuning time since the last
one), the models are ranked by their latest relative latency improvement per tuning second;
the worst one is suspended when it is on a plateau: `patience` rounds in a row of poor
improvement (Trimmer's "plateau iterations"), a round being poor when its improvement rate fell
by Trimmer's criterion (the survey stop of tuning/survey, phi = -0.25) and the latency gained
in it is below `min_gain` (0.5%): a falling rate alone marks most rounds of a converging run.
A suspended model's tuner takes back its batches in flight and ends; its workers go to the
others (capacities are an even split of the live workers among the running models). The last
model running is suspended the same way when it is on a plateau (Trimmer's survey stop at
model level), or ends on its own budget or stop.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Callable


@dataclass
class _Progress:
    # (tuning seconds, model ms) at the first slot of the model and at the first slot past
    # every multiple of the round length in its own tuning time (machine-seconds): a round is
    # measured on each model's own clock, not on when the others happen to report.
    marks: list = field(default_factory=list)
    suspended_round: int | None = None
    report: dict | None = None
    error: BaseException | None = None
    rates: list = field(default_factory=list)  # relative improvement per second, per round


def survey_tune(models: dict[str, tuple[dict, list[str]]], group, run_model: Callable,
                round_seconds: float, phi: float = -0.25, patience: int = 2,
                min_gain: float = 0.005, log: Callable[[str], None] = print) -> dict:
    """Tunes every model at once on `group`'s workers. `models`: name -> (description for the
    workers, task signatures in the tuner's order). `run_model(name, pool, progress)` runs one
    model's tuner (e.g. nimble._C.tuning.simulate with pool=...) and returns its report.
    Returns {"rounds": n, "models": {name: summary with its report}}."""
    from .._C import tuning

    state = {name: _Progress() for name in models}
    # Trimmer's rate criterion per model, one round at a time (patience 1: the strikes are
    # counted here, where the gain is known too).
    stops = {name: tuning.SurveyStop(phi=phi, patience=1) for name in models}
    strikes = {name: 0 for name in models}
    lock = threading.Condition()
    rounds = 0

    def progress_of(name: str):
        # Trimmer synchronizes the models at round boundaries: a model that has spent its
        # round waits here (its tuner paused, its workers lent to the others) until the round
        # is compared, so that a quick model does not run to its end before the others.
        def progress(event: dict) -> None:
            with lock:
                s = state[name]
                if not s.marks or event["tuning_seconds"] >= len(s.marks) * round_seconds:
                    s.marks.append((event["tuning_seconds"], event["model_ms"]))
                    group.pause(name, True)
                    while len(s.marks) > rounds + 1 and s.suspended_round is None:
                        lock.wait(0.2)
                    group.pause(name, False)
        return progress

    def run(name: str, pool) -> None:
        try:
            state[name].report = run_model(name, pool, progress_of(name))
        except BaseException as e:  # shown by the caller; the other models go on
            state[name].error = e

    threads = {}
    for name in models:
        pool = group.pool(name, *models[name])
        threads[name] = threading.Thread(target=run, args=(name, pool), name=f"tune-{name}")
    for t in threads.values():
        t.start()
    try:
        while any(t.is_alive() for t in threads.values()):
            time.sleep(0.02)
            with lock:
                running = [m for m in models
                           if threads[m].is_alive() and state[m].suspended_round is None]
                if not running or any(len(state[m].marks) <= rounds + 1 for m in running):
                    continue
                rounds += 1
                lock.notify_all()
                for m in running:
                    s = state[m]
                    (t0, ms0), (t1, ms1) = s.marks[rounds - 1], s.marks[rounds]
                    gain = (ms0 - ms1) / ms0
                    s.rates.append(gain / max(t1 - t0, 1e-9))
                    falling = stops[m].after_epoch(ms1 * 1e-3, t1) is not None
                    strikes[m] = strikes[m] + 1 if falling and gain < min_gain else 0
                worst = min(running, key=lambda m: state[m].rates[-1])
                if strikes[worst] >= patience:
                    state[worst].suspended_round = rounds
                    group.suspend(worst)
                    log(f"round {rounds}: suspended {worst} (improvement "
                        f"{100 * state[worst].rates[-1]:.4f}%/s, the lowest, on a plateau); "
                        f"its workers go to the {len(running) - 1} other model(s)")
    except KeyboardInterrupt:
        for m in models:
            group.suspend(m)  # every tuner takes back what is in flight and ends
        for t in threads.values():
            t.join()
        raise
    for t in threads.values():
        t.join()
    for name in models:
        if state[name].error is not None:
            raise RuntimeError(f"tuning {name} failed") from state[name].error
    summary = {}
    for name in models:
        s, r = state[name], state[name].report
        summary[name] = {
            "stop_reason": "suspended" if s.suspended_round else r["stop_reason"],
            "suspended_round": s.suspended_round, "trials": r["trials"],
            "initial_model_ms": r["initial_model_ms"], "final_model_ms": r["final_model_ms"],
            "machine_seconds": r["measure_seconds"], "report": r,
        }
    return {"rounds": rounds, "models": summary}


def format_summary(result: dict) -> str:
    lines = [f"{'model':<24} {'stop':<20} {'trials':>7} {'initial ms':>11} {'final ms':>10} "
             f"{'machine-s':>10}"]
    for name, s in result["models"].items():
        stop = (f"suspended (round {s['suspended_round']})" if s["suspended_round"]
                else s["stop_reason"])
        lines.append(f"{name:<24} {stop:<20} {s['trials']:>7} {s['initial_model_ms']:>11.3f} "
                     f"{s['final_model_ms']:>10.3f} {s['machine_seconds']:>10.0f}")
    total = sum(s["machine_seconds"] for s in result["models"].values())
    lines.append(f"{result['rounds']} rounds; {total:.0f} machine-seconds measuring in all")
    return "\n".join(lines)

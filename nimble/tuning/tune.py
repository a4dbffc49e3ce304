"""Tuning a prepared model's kernels on this machine, and binding the winners into its replay.

    fast = nimble.Nimble(model).prepare(x)
    report = nimble.tune(fast, budget_seconds=1200, database="tune.db")
    fast.use_tuned("tune.db")  # each convolution: the fastest kernel measured for its shape
    print(fast.tuned_report())

A lowered replay (the CPU default) is tuned where it runs: one task per lowered convolution
shape, over the lowering's kernels (the "prepacked" family: nimble's channels-last kernels with
their parameters, and oneDNN's, each with its epilogue fused) and their thread counts, each
candidate put in place of its convolutions in the replay and timed there, op by op
(csrc/slot/context_measurer.h). The last share of the budget (confirm_share) re-times each task's
fastest few against the rule's kernel, in turn in the replay (`confirm`), and `prepare(tuned=db)`
runs, per convolution shape, the fastest of those re-timed records (else the search's), where
the replay runs it faster than the rule's. Then (confirm_whole, a share of the budget too) each
re-timed pick that differs from the rule is confirmed in the whole replay by paired runs with and
without it, and the kept ones together against the rule's replay; `prepare(tuned=db)` binds the
kept ones (csrc/slot/replay_confirmation.h). An unlowered replay's
ops (and a lowered one tuned on Ray workers, which rebuild the model unlowered) are measured
alone, as ATen runs them, every kernel family against ATen: nimble's NCHW templates and
PyTorch's own backends, and the lowering's kernels.

The tuner itself is C++ (tuning/, csrc/kernels/, csrc/slot/); this module checks arguments,
shows progress and hands over.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import time
import warnings

from ..replay.tunable import inference_replay
from .budget_shares import (REPLAY_PAIRS, confirm_share, replay_share, short_budget_warning,
                            whole_replay_seconds)

def _replay_seconds(program, runs: int = 3) -> float:
    """The median wall time of `runs` runs of a program's replay on its example inputs (after
    one to warm up), what it changes put back."""

    times = []
    with program.snapshot():
        for i in range(runs + 1):
            started = time.perf_counter()
            program.run_example()
            if i:
                times.append(time.perf_counter() - started)
    return sorted(times)[len(times) // 2]


class TuningProgress:
    """Tuning progress on stderr through tqdm: a bar toward the budget (tuning seconds when
    finite, else trials) with rate and time left, and after it the slot, the task and the
    estimated model latency; before it, one for timing ATen's kernels."""

    def __init__(self, budget_seconds: float, budget_trials: int = 0) -> None:
        self.by_seconds = 0 < budget_seconds < math.inf
        self.total = budget_seconds if self.by_seconds else (budget_trials or None)
        self.bars = []
        self.first_ms = None
        self.baseline_label = "timing ATen's kernels"
        self.confirm_bar = None
        self.replay_bar = None

    def _bar(self, **kwargs):
        from tqdm import tqdm

        self.bars.append(tqdm(file=sys.stderr, mininterval=0.5, dynamic_ncols=True, **kwargs))
        return self.bars[-1]

    def baseline(self, index: int, total: int) -> None:
        if not self.bars:
            self._bar(total=total, desc=self.baseline_label, unit="task")
        self.bars[0].update(index + 1 - self.bars[0].n)

    def slot(self, event: dict) -> None:
        if self.first_ms is None:
            self.first_ms = event["model_ms"]
            if self.bars:
                self.bars[0].close()
            # Seconds are floats: the default format would print all their digits. The total
            # is written in, not formatted by tqdm, which can hand its format None (a run
            # ended at its very end on `{total:.0f}`).
            seconds_format = (f"{{desc}}: {{percentage:3.0f}}%|{{bar}}| {{n:.0f}}/"
                              f"{self.total or 0:.0f} s [{{elapsed}}<{{remaining}}{{postfix}}]")
            self._bar(total=self.total, desc="tuning", unit="s" if self.by_seconds else "trial",
                      bar_format=seconds_format if self.by_seconds else None)
        bar = self.bars[-1]
        seconds = event["tuning_seconds"]
        count = f"trials {event['trials']}" if self.by_seconds else f"t={seconds:.0f} s"
        bar.set_postfix_str(f"{count}, {describe_slot(event)}, model {event['model_ms']:.3f} ms "
                            f"(untuned {self.first_ms:.3f} ms)", refresh=False)
        from tqdm import TqdmWarning

        with warnings.catch_warnings():
            # The last slot ends past the budget: tqdm warns that it clamps the bar at full,
            # which is what the bar should show.
            warnings.simplefilter("ignore", category=TqdmWarning)
            bar.update((seconds if self.by_seconds else event["trials"]) - bar.n)

    def confirmed(self, task: dict) -> None:
        if self.confirm_bar is None:
            self.confirm_bar = self._bar(desc="re-timing the best against the rule", unit="task")
        self.confirm_bar.set_postfix_str(
            f"{task['name']}: {task['best_ms']:.4f} ms against {task['rule_ms']:.4f} "
            f"(search: {task['claimed_ms']:.4f})", refresh=False)
        self.confirm_bar.update()

    def replay_confirmed(self, pick: dict) -> None:
        if self.replay_bar is None:
            self.replay_bar = self._bar(desc="confirming the picks in the whole replay",
                                        unit="pick")
        c = pick["comparison"]
        self.replay_bar.set_postfix_str(
            f"{'kept' if pick['kept'] else 'dropped'} {pick['spec']}: faster in {c['faster']} of "
            f"{c['pairs']} pairs, median ratio {c['median_ratio']:.3f}", refresh=False)
        self.replay_bar.update()

    def done(self) -> None:
        for bar in self.bars:
            bar.close()


def describe_slot(event: dict) -> str:
    """The slot's task with its best time so far against its starting kernel's, and the gain
    the scheduler expects from the task and from the task it expects most of (DynaTune's
    belief; other schedulers have none)."""
    text = f"slot {event['slot']} {event['task']}"
    if "task_ms" in event:
        text += f" {_ms(event['task_ms'])} ms"
    if event.get("task_start_ms", 0) > 0:
        text += f" (start {_ms(event['task_start_ms'])})"
    gains = event.get("expected_gain_ms") or {}
    if gains:
        top = max(gains, key=gains.get)
        text += f", expects {_ms(gains.get(event['task'], 0.0))} ms from it"
        if top != event["task"]:
            text += f", most from {top} ({_ms(gains[top])} ms)"
    return text


def _ms(value: float) -> str:
    """Four decimals, or three significant digits below 0.01 ms: a GPU's tasks take a few
    microseconds and DynaTune expects tens of nanoseconds from them, which four decimals
    showed as 0.0000."""
    return f"{value:.4f}" if value == 0 or abs(value) >= 0.01 else f"{value:.3g}"


def busy_warning(load: float | None = None, cores: int | None = None) -> str | None:
    """What to tell a user who tunes on a busy machine, or None when it is idle enough.

    Candidates are timed on this machine; with more runnable work than cores, other programs
    take the cores in the middle of a timing, and the times (hence the winners and the
    cold-candidate judgements) follow the load instead of the kernels."""
    if load is None:
        try:
            load = os.getloadavg()[0]
        except (AttributeError, OSError):  # no load average on this platform
            return None
    if cores is None:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    if not cores or load <= cores:
        return None
    return (f"the load average is {load:.1f} on {cores} cores: other work will disturb the "
            f"timings; tune on an idle machine for trustworthy results")


def tune(
    fast,
    budget_seconds: float = 600.0,
    scheduler: str = "dynatune",
    database: str = "tune.db",
    *,
    budget_trials: int = 0,
    slot_seconds: float = 3.0,
    early_stop_trials: int = 100,
    survey_stop: bool = False,
    resume: bool = True,
    seed: int = 0,
    progress: bool = True,
    workers: int = 1,
    ray_address: str | None = None,
    model: dict | None = None,
    **options,
) -> dict:
    """Tune the kernels of a prepared (inference) Nimble's tunable ops on this machine.

    Every candidate is checked before it is timed (in context: against the rule's kernel on
    the convolution's inputs in the replay; alone: against ATen on random inputs); failures are
    recorded with their message. Every measurement goes to the SQLite `database`, keyed by the
    op's signature and this machine (`nimble._C.kernels.device_key()`); a later run resumes
    from it. Returns the tuner's report (curve of estimated model latency over tuning time,
    per-task bests, the device key). `options`: scheduler and measurement settings of
    `nimble._C.kernels.tune` (c, adaptive, cold_filter, batch_size, min_repeat_seconds, ...).

    With `workers` > 1 (or a `ray_address`), candidates are measured on that many Ray workers
    (nimble/tuning/distributed.py; `pip install nimble[ray]`), each of which rebuilds the model from
    `model` (`nimble.tuning.distributed.zoo_model("torchvision:NAME", batch, image_size, streams)`);
    the workers must be machines of the kind this one is (records are keyed by its device).
    """
    from .._C import kernels, tuning

    if scheduler not in tuning.scheduler_names():
        raise ValueError(f"scheduler must be one of {tuning.scheduler_names()}, got {scheduler!r}")
    if not (budget_seconds > 0 or budget_trials > 0):
        raise ValueError("give a positive budget_seconds or budget_trials")
    replay = inference_replay(fast)
    distributed = workers > 1 or ray_address is not None
    in_context = None  # the example inputs, when the lowered replay is tuned in place
    if any(op["name"].startswith("nimble::") for op in replay.ops()):
        if not distributed and kernels.context_tasks(replay):
            in_context = fast._program
        else:
            # Workers rebuild the model unlowered (distributed.py); a lowered replay without
            # convolutions has only ATen's ops to tune.
            replay = _unlowered_twin(fast).replay
    tasks = kernels.context_tasks(replay) if in_context else kernels.tasks(replay)
    if not tasks:
        raise ValueError("the model has no op a kernel family can replace (2-D float "
                         "convolutions, linear layers with a bias)")
    group = _workers(replay, workers, ray_address, model, options)
    busy = None if group else busy_warning()
    if busy:
        warnings.warn(busy, RuntimeWarning, stacklevel=2)
    # In context, the end of the budget re-times each task's best against the rule's (confirm),
    # and then confirms the picks in the whole replay (confirm_whole).
    started = time.monotonic()
    run_seconds = _replay_seconds(in_context) if in_context else 0.0
    short = short_budget_warning(run_seconds, len(tasks), budget_seconds) if in_context else None
    if short:
        warnings.warn(short, RuntimeWarning, stacklevel=2)
    share = confirm_share(run_seconds, len(tasks), budget_seconds) if in_context else 0.0
    whole_share = replay_share(run_seconds, len(tasks), budget_seconds) if in_context else 0.0
    search_seconds = budget_seconds * (1 - share - whole_share)
    shown = TuningProgress(search_seconds, budget_trials) if progress else None
    if shown and in_context:
        shown.baseline_label = "timing the rule's kernels in the replay"
    # Tuning in context runs the replay on its example inputs: what that changes (inputs the
    # model writes, its state) is put back after.
    restored = in_context.snapshot() if in_context else contextlib.nullcontext()
    try:
        with restored:
            report = kernels.tune(
                replay, scheduler=scheduler, budget_seconds=search_seconds,
                budget_trials=budget_trials, slot_seconds=slot_seconds,
                early_stop_trials=early_stop_trials, survey_stop=survey_stop, database=database,
                resume=resume, seed=seed, progress=shown.slot if shown else None,
                on_baseline=shown.baseline if shown else None,
                pool=group.pool(model["name"], model, [t["signature"] for t in tasks])
                if group else None,
                inputs=in_context.example_inputs if in_context else None, **options,
            )
            if in_context:
                report["confirm_share"] = share
                confirm(report, replay, in_context.example_inputs, database,
                        budget_seconds * share, shown, options.get("timeout_seconds", 2.0))
                # What the search and the re-timing left of the budget, at least its share.
                left = budget_seconds - (time.monotonic() - started) \
                    if math.isfinite(budget_seconds) else math.inf
                report["replay_share"] = whole_share
                confirm_whole(report, replay, in_context.example_inputs, database,
                              max(left, budget_seconds * whole_share / 2) if math.isfinite(left)
                              else whole_replay_seconds(run_seconds, len(tasks)), shown)
            return report
    finally:
        if shown:
            shown.done()
        if group:
            group.close()


def confirm(report: dict, replay, inputs, database: str, seconds: float, shown=None,
            timeout_seconds: float = 2.0) -> None:
    """Re-times each in-context task's fastest search records against the rule's kernel, in
    turn in the replay (csrc/slot/context_confirmation.h), for `seconds`, the largest claimed
    gain first. Adds to `report`: `confirmed` (per task: name, signature, weight, claimed_ms,
    rule_ms, best_ms, best_config, compared), `confirm_seconds`, and `confirmed_rule_ms` /
    `confirmed_best_ms` / `confirmed_claimed_ms`, the re-timed tasks' convolutions per call
    (weight x time, summed) with the rule's kernels, with the re-timed best and as the search
    claimed."""

    from .._C import kernels

    started = time.monotonic()
    each = shown.confirmed if shown else None
    done = kernels.confirm_in_context(replay, inputs, database, seconds, each=each,
                                      timeout_seconds=timeout_seconds)
    report["confirmed"] = done
    report["confirm_seconds"] = time.monotonic() - started
    for key in ("rule_ms", "best_ms", "claimed_ms"):
        report[f"confirmed_{key}"] = sum(t["weight"] * t[key] for t in done)


def confirm_whole(report: dict, replay, inputs, database: str, seconds: float,
                  shown=None) -> None:
    """Confirms the database's picks that differ from the rule's in the whole replay, one at a
    time by paired runs with and without it, then together against the rule's replay
    (csrc/slot/replay_confirmation.h), for at most `seconds`; `prepare(tuned=database)` binds
    the kept ones. Adds to `report`: `replay_confirmed` (per pick: key, spec, ops, gain_ms,
    comparison, tried, kept, reason), `replay_combination`, `replay_combination_kept`,
    `replay_confirm_seconds`."""
    from .._C import kernels

    each = shown.replay_confirmed if shown else None
    done = kernels.confirm_in_replay(replay, inputs, database, seconds, pairs=REPLAY_PAIRS,
                                     each=each)
    report["replay_confirmed"] = done["picks"]
    report["replay_combination"] = done["combination"]
    report["replay_combination_kept"] = done["combination_kept"]
    report["replay_confirm_seconds"] = done["seconds"]


def _unlowered_twin(fast):
    """`fast`'s model prepared again on its example with the CPU lowering off: the tuner's
    tasks are the convolutions as ATen runs them."""
    from ..replay.wrapper import Nimble

    with warnings.catch_warnings():  # `fast`'s prepare named them already
        warnings.simplefilter("ignore")
        return Nimble(fast.module).prepare(
            fast._example.static_args, fast._example.static_kwargs, lower_for_cpu=False,
            streams=fast._options.streams,
        )


def _workers(replay, workers: int, ray_address: str | None, model: dict | None, options: dict):
    """The Ray workers that measure for this run, or None to measure here."""
    if workers <= 1 and ray_address is None:
        return None
    from .distributed import WorkerGroup, require_ray

    require_ray()
    if model is None or model.get("kind") != "zoo":
        raise ValueError("tuning on workers needs model=nimble.tuning.distributed.zoo_model(...): "
                         "each worker rebuilds the model from it")
    for key in ("min_repeat_seconds", "timeout_seconds"):
        if key in options and options[key] != model[key]:
            raise ValueError(f"{key}={options[key]} differs from the workers' model[{key!r}]")
    # A worker runs torch on the driver's thread count (the spaces and the device key depend on
    # it): that many cores each, or a share of this machine's when it has fewer.
    cores = model["threads"] if ray_address else min(model["threads"],
                                                     (os.cpu_count() or 1) / workers)
    return WorkerGroup(workers, ray_address, cores_per_worker=cores,
                       batch_timeout=60 + 16 * model["timeout_seconds"] * options.get("batch_size", 8))

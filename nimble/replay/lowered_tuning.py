"""A tuning database's kernels for the lowered convolutions and linear layers, kept only where
the replay itself runs them faster than the rule's.

The tuner times a lowered replay's candidates in that replay (csrc/slot/context_measurer.h), one
shape at a time, each op in place among the rule's kernels; a database may also hold records
timed alone (an unlowered replay's, NCHW in and out), and the choices of several shapes were
never timed together. A kernel faster alone can be slower in the replay: on googlenet at 64x64
the 7x7 stem took 0.23 ms through oneDNN against 0.25 ms through nimble's kernel when tuned
alone, and 0.21 ms against 0.13 ms in the replay. So `prepare(tuned=...)` builds the replay with
the rule's kernels and with the database's, times both op by op, round after round, and keeps
the database's kernel only for the convolution shapes it made faster there: tuning never leaves
a lowered convolution slower than the untuned default. Then the whole replay: the program with
the kept kernels is timed against the rule's run by run, and kept only where it runs faster as a
whole. The ops' times miss what a choice costs its neighbours and the gaps between ops: on
session 10's machine (loaded) mobilenet_v2 at 64x64 bound 38 of 48 ops each faster in this
check, and the whole tuned replay ran 0.88x the untuned one, efficientnet_b0 0.96x. Many of
the bound choices ran on the calling thread alone (`threads=1`, or one piece of work); a guess,
not measured: the helper thread then sleeps and the next op split over two threads waits for
it. Where the whole replay is slower, the kept choices without their one-thread ones are tried
the same way, then none.

A database `tune` wrote since session 11 holds, for each pick that differs from the rule, its
verdict in the whole replay (csrc/slot/replay_confirmation.h: paired whole runs with and without
the pick, a sign test, then the kept picks together against the rule's replay). Where every
differing choice has one, none of the above is timed: the kept picks are bound, with one last
paired check of the whole replay (_bind_judged) that drops them only where it runs
significantly slower with them. The whole-replay check above, 31 runs a program and medians,
decided gains of a few percent by noise (efficientnet_b0 bound a database it found faster, and
the side-by-side timing right after ran 0.89x).
"""

from __future__ import annotations

import os
import statistics
from typing import Callable

from .prepare_options import with_changes

# As streams='auto' times its choice (streams.py): warm-ups that fill the memory pools, then
# enough alternating rounds that a median per op holds still against the machine's noise.
_WARM_UPS = 3
_ROUNDS = 15
# The whole replay's runs a program (each a median's sample): the whole-replay check below.
_WHOLE_ROUNDS = 31
# The last check of choices `tune` confirmed in the whole replay (_bind_judged): pairs, and
# the drop only where the tuned replay ran slower in significantly more pairs (one-sided 1%) and
# its median ratio is above 1 + _FINAL_MIN_LOSS: a veto, not a second judgement by noise.
_FINAL_PAIRS = 31
_FINAL_Z = 2.326
_FINAL_MIN_LOSS = 0.02


def build_with_choices(build: Callable[..., object], options, choices: dict):
    """The program `build(options)` makes with the database's `choices` (by convolution shape,
    `_C.kernels.lowering_choices`) that measured faster in it than the rule's kernels, and
    those choices, each with `kept` and, where the database's kernel is not the rule's,
    `default_ms` and `context_ms` (its shape's convolutions per call, summed, with the rule's
    kernel and with the database's)."""
    if not choices:
        return build(options), {}
    # The rule's program first: built alone when the database agrees with the rule. (A
    # program built after others were freed can run a few percent slower: glibc then serves
    # its large blocks from the heap instead of fresh mappings; docs/cpu.md, "Tuning the
    # lowering's kernels".)
    default = build(with_changes(options, tuned_convolutions={}))
    differing = _differing_ops(default.replays[0].ops(), choices)
    checked = {key: dict(choice, kept=True) for key, choice in choices.items()}
    if not differing:
        return default, checked
    judged = {key: checked[key].get("in_replay") for key in differing}
    if all(verdict is not None for verdict in judged.values()):
        return _bind_judged(build, options, default, checked, judged)
    tuned = build(with_changes(options, tuned_convolutions=_kernels(choices)))
    if [op["name"] for op in default.replays[0].ops()] != [op["name"] for op in tuned.replays[0].ops()]:
        raise RuntimeError("lowered_tuning: the programs built with and without the tuned "
                           "kernels do not pair up op by op")
    default_ns, tuned_ns = _per_op_ns(default, tuned)
    for key, ops in differing.items():
        checked[key]["default_ms"] = sum(default_ns[i] for i in ops) / 1e6
        checked[key]["context_ms"] = sum(tuned_ns[i] for i in ops) / 1e6
        checked[key]["kept"] = checked[key]["context_ms"] < checked[key]["default_ms"]
    kept = {key for key in differing if checked[key]["kept"]}
    if not kept:
        return default, checked
    program = tuned if len(kept) == len(differing) else _built(build, options, checked)
    default_ms, tuned_ms = _whole_replay_ms(default, program)
    if tuned_ms < default_ms:
        return program, checked
    # Faster op by op, slower as a whole: without the one-thread choices, else none.
    one_thread = {key for key in kept if _one_thread(checked[key]["spec"])}
    if one_thread and one_thread != kept:
        dropped = {key: dict(c, kept=c["kept"] and key not in one_thread)
                   for key, c in checked.items()}
        program = _built(build, options, dropped)
        default_ms, several_ms = _whole_replay_ms(default, program)
        if several_ms < default_ms:
            for key in one_thread:
                checked[key].update(kept=False, whole_ms=(default_ms, several_ms))
            return program, checked
    for key in kept:
        checked[key].update(kept=False, whole_ms=(default_ms, tuned_ms))
    return default, checked


def _bind_judged(build, options, default, checked: dict, judged: dict):
    """The program with the choices `tune` kept in the whole replay (judged: per differing shape,
    True kept, False dropped; replay_confirmation.h), not timed op by op again: only a last
    paired check of the whole replay against the rule's, which drops them together where they
    run it significantly slower (a database from another state of the machine)."""
    for key, kept in judged.items():
        checked[key]["kept"] = kept
    if not any(judged.values()):
        return default, checked
    program = _built(build, options, checked)
    comparison = _paired_whole_replay(default, program, _FINAL_PAIRS)
    if comparison["b_loses"]:
        for key, kept in judged.items():
            if kept:
                checked[key].update(kept=False,
                                    whole_ms=(comparison["a_ms"], comparison["b_ms"]))
        return default, checked
    return program, checked


def _paired_whole_replay(a, b, pairs: int) -> dict:
    """`_C.kernels.compare_pairs` of `pairs` paired runs of two programs' replays (wall time of
    each, run_timed's), the order alternating pair by pair, after _WARM_UPS of each."""
    from .._C import kernels

    times = ([], [])
    for i, (total_ns, _) in _timed_runs((a, b), pairs, alternate=True):
        times[i].append(total_ns * 1e-9)
    return kernels.compare_pairs(times[0], times[1], z=_FINAL_Z, min_gain=_FINAL_MIN_LOSS)


def _one_thread(spec: str) -> bool:
    """Whether a spec runs its op on the calling thread alone: one thread, or one piece of
    work (nothing to split)."""
    words = spec.split()
    return any(w in ("threads=1", "gemm.pieces=1", "depthwise.pieces=1") for w in words)


def _built(build, options, checked: dict):
    """The program with the database's kernels for the shapes `checked` keeps."""
    return build(with_changes(options, tuned_convolutions=_kernels(
        {k: c for k, c in checked.items() if c["kept"]})))


def _kernels(choices: dict) -> dict:
    """The lowering's `tuned_convolutions`: per shape, the kernel, threads and parameters."""
    return {key: choice["spec"] for key, choice in choices.items()}


def _differing_ops(default_ops: list[dict], choices: dict) -> dict:
    """Per shape key the database chose another kernel, thread count or kernel parameters for
    than the rule did, the indices of the ops of that shape (a program built from one capture
    and one lowering has its ops in the same order whichever kernels it runs)."""
    out: dict[str, list[int]] = {}
    for i, op in enumerate(default_ops):
        key = op.get("shape_key")
        if key in choices and op["tuning"] != choices[key]["spec"]:
            out.setdefault(key, []).append(i)
    return out


def _timed_runs(programs, rounds: int, alternate: bool = False):
    """(index of the program, run_timed's result) of `rounds` runs of each program's replay on
    its example inputs, the programs alternating run by run, after _WARM_UPS untimed rounds;
    `alternate`: every other round in reverse order (paired runs: neither program always
    first)."""
    with programs[0].snapshot():
        for round_ in range(_WARM_UPS + rounds):
            order = range(len(programs))
            for i in reversed(order) if alternate and round_ % 2 else order:
                timed = programs[i].replays[0].run_timed(programs[i].example_inputs)
                if round_ >= _WARM_UPS:
                    yield i, timed


def _per_op_ns(*programs) -> list[list[float]]:
    """Each program's median nanoseconds per op, its replay run alternating with the others'."""
    samples = [[[] for _ in p.replays[0].ops()] for p in programs]
    for i, (_, timings) in _timed_runs(programs, _ROUNDS):
        for op, _stream, start, end, _ in timings:
            samples[i][op].append(end - start)
    return [[statistics.median(s) if s else 0.0 for s in mine] for mine in samples]


def _whole_replay_ms(*programs) -> list[float]:
    """Each program's median milliseconds per run of its replay (the whole run's wall time),
    run alternating with the others'."""
    times = [[] for _ in programs]
    for i, (total_ns, _) in _timed_runs(programs, _WHOLE_ROUNDS):
        times[i].append(total_ns / 1e6)
    return [statistics.median(t) for t in times]


def database_choices(lowered_with: tuple | None) -> dict:
    """The lowering's kernels a tuning database (database, any_device) chose, by convolution
    shape: {shape key: {kernel, threads, parameters, spec, ms, signature}}; the program runs
    the spec (kernel, threads and kernel parameters) where build_with_choices keeps it."""
    if lowered_with is None or not os.path.exists(lowered_with[0]):
        return {}
    from .._C import kernels

    return kernels.lowering_choices(lowered_with[0], any_device=lowered_with[1])


def report_rows(replay, choices: dict) -> list[dict]:
    """use_tuned's rows for the lowered convolutions a database chose a kernel for (`choices`,
    as build_with_choices checked them in the replay): `aten_ms` is the rule's
    kernel there, `tuned_ms` the database's (its record, when it is the rule's own)."""
    rows = []
    for index, op in enumerate(replay.ops()):
        choice = choices.get(op.get("shape_key"))
        if choice is None:
            continue
        what, family = (("lowered linear layer", "prepacked_linear")
                        if op["shape_key"].startswith("linear ")
                        else ("lowered convolution", "prepacked"))
        if "whole_ms" in choice and choice.get("in_replay"):
            default_ms, tuned_ms = choice["whole_ms"]
            reason = (f"{what}: kept in the whole replay when tuned, but the whole replay ran "
                      f"{tuned_ms:.3f} ms with the database's kernels against {default_ms:.3f} ms "
                      f"now (significantly slower); the rule's kept")
        elif choice.get("in_replay") is not None and "context_ms" not in choice:
            reason = (f"{what}: the database's kernel, kept in the whole replay when tuned"
                      if choice["kept"] else
                      f"{what}: the database's kernel did not run the whole replay faster "
                      f"when tuned (paired runs with and without it); the rule's kept")
        elif "context_ms" not in choice:
            reason = f"{what}: the database's fastest is the rule's kernel"
        elif choice["kept"]:
            reason = f"{what}: the database's kernel, faster in this replay"
        elif "whole_ms" in choice:
            default_ms, tuned_ms = choice["whole_ms"]
            reason = (f"{what}: the database's kernel took {choice['context_ms']:.3f} ms in this "
                      f"replay against the rule's {choice['default_ms']:.3f} ms, but the whole "
                      f"replay ran {tuned_ms:.3f} ms with the database's kernels against "
                      f"{default_ms:.3f} ms; the rule's kept")
        else:
            reason = (f"{what}: the database's kernel took {choice['context_ms']:.3f}"
                      f" ms in this replay against the rule's {choice['default_ms']:.3f} ms; "
                      f"the rule's kept")
        rows.append(dict(
            op=index, absorbed=[], task=op["shape_key"], signature=choice["signature"],
            kernel=f"family={family} {family}.kernel={choice['spec']}",
            record_device="", aten_ms=choice.get("default_ms", 0.0),
            tuned_ms=choice.get("context_ms", choice["ms"]), bound=choice["kept"], reason=reason,
        ))
    return rows

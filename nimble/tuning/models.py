"""`python -m nimble tune --model ...`: tune a zoo model's kernels on this machine, bind the
winners, and show what they bought; `--compare` runs several schedulers on the same model and
budget, each from an empty database, and reports when each reached 95%/99% of the final
latency: of the *worst* final latency any scheduler reached on that seed, a level every run
reaches. (On real kernels runs end in different optima a few percent apart, so 99% of the
best final is never reached by the others; the simulator's runs all end at one optimum.)

A tuner's own latency curve is built from single noisy measurements, each task's best being
the minimum over them: it favours whichever run measured more candidates near the optimum
by luck. `--compare` therefore re-measures, side by side, every config that was any run's
best at any point of its curve, and redraws every curve from those times."""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time

import torch


def prepared(args, name: str):
    """(model, example input, prepared Nimble) of zoo model `name` at the command line's
    --batch, --image-size and --streams."""
    from .. import zoo
    from ..replay.wrapper import Nimble

    model, example = zoo.build(name, batch=args.batch, image_size=args.image_size)
    # The kernel families tune ATen's convolutions, which the CPU lowering replaces.
    return model, example, Nimble(model).prepare(example, streams=args.streams,
                                                 lower_for_cpu=False)


def tune_options(args, scheduler: str, database: str, seed: int) -> dict:
    """The command line's tuning options, as keywords of both nimble.tune and
    nimble._C.kernels.tune (the survey calls the latter with its own pool)."""
    return dict(
        budget_seconds=args.budget_seconds, scheduler=scheduler, database=database,
        budget_trials=args.budget_trials, slot_seconds=args.slot_seconds,
        early_stop_trials=args.early_stop_trials, survey_stop=args.survey_stop,
        resume=not args.no_resume, seed=seed, adaptive=not args.no_adaptive,
        cold_filter=not args.no_cold_filter, finish_when_cold=args.finish_when_cold,
        **({} if args.c is None else {"c": args.c}),
    )


def _tune(fast, args, scheduler: str, database: str, seed: int, progress: bool) -> dict:
    from .distributed import zoo_model
    from .tune import tune

    return tune(fast, progress=progress, workers=args.workers, ray_address=args.ray_address,
                model=zoo_model(args.model, args.batch, args.image_size, args.streams),
                **tune_options(args, scheduler, database, seed))


def side_by_side(model, example, untuned, tuned, rounds: int = 60) -> dict:
    """Median wall time of the untuned and the tuned replay, alternating call by call, and
    the tuned replay's largest difference from eager relative to eager's largest value."""
    from ..timing import alternate, median_ms

    with torch.no_grad():
        reference = model(example)
    out = tuned(example)
    error = ((out - reference).abs().max() / reference.abs().max().clamp_min(1e-30)).item()
    a, b = alternate([lambda: untuned(example), lambda: tuned(example)], runs=rounds, warmup=5)
    return {"untuned_ms": median_ms(a), "tuned_ms": median_ms(b),
            "speedup": median_ms(a) / median_ms(b), "max_relative_error": error}


def op_time_shares(names: list[str], tunable: set[int], runs: list[tuple]) -> dict:
    """Where a replay's time goes, from `runs` of `replay.run_timed` (total_ns, [(op, stream,
    start_ns, end_ns, release_ns)]): the median over runs of the tunable ops' share of the wall
    time (`tunable`: their op indices), the wall time (ms), and the other ops' median time per
    op name (ms, largest first); what is left, the replay's own time between ops."""
    walls, shares, others = [], [], {}
    for total_ns, ops in runs:
        inside = {}
        tuned_ns = 0
        for op, _stream, start, end, *_ in ops:
            if op in tunable:
                tuned_ns += end - start
            else:
                inside[names[op]] = inside.get(names[op], 0) + end - start
        walls.append(total_ns / 1e6)
        shares.append(tuned_ns / max(total_ns, 1))
        for name in set(names[op] for op, *_ in ops if op not in tunable):
            others.setdefault(name, []).append(inside.get(name, 0) / 1e6)
    rest = {name: statistics.median(ms) for name, ms in others.items()}
    return {"tunable_share": statistics.median(shares), "wall_ms": statistics.median(walls),
            "others_ms": dict(sorted(rest.items(), key=lambda kv: -kv[1]))}


def replay_time_shares(fast, runs: int = 30) -> dict:
    """op_time_shares of `fast`'s replay on its example inputs, its tunable ops those of its
    in-context tasks (a lowered replay's convolutions and linear layers) and of tuned_report()
    (an unlowered one's, where a record was found)."""
    from .._C import kernels

    tunable = {r["op"] for r in fast.tuned_report()}
    if fast._options.lowers:
        tunable |= {op for task in kernels.context_tasks(fast.replay) for op in task["ops"]}
    inputs = fast._program.example_inputs
    with torch.no_grad(), fast._program.snapshot():
        for _ in range(5):
            fast.replay.run_timed(inputs)
        timed = [fast.replay.run_timed(inputs) for _ in range(runs)]
    return op_time_shares(fast.schedule["ops"], tunable, timed)


def tune_model(args) -> int:
    """Tunes the replay `prepare` gives a user (on a CPU the lowered one, in context: each
    candidate timed in place in it), binds the winners, and shows the untuned and the tuned
    replay side by side, with ONNX Runtime and OpenVINO beside them where installed."""
    from .. import zoo
    from ..replay.wrapper import Nimble
    from .curves import print_curve, time_to_reach, write_plot

    from .cost import cost_summary, energy_counters, energy_delta, format_cost

    database = args.db or "tune.db"
    model, example = zoo.build(args.model, batch=args.batch, image_size=args.image_size)
    fast = Nimble(model).prepare(example, streams=args.streams)
    before, started = energy_counters(), time.monotonic()
    report = _tune(fast, args, args.scheduler, database, args.seed, not (args.quiet or args.json))
    cost = cost_summary(report, time.monotonic() - started, energy_delta(before, energy_counters()))
    bound = fast.use_tuned(database)
    untuned = Nimble(model).prepare(example, streams=args.streams)
    speed = side_by_side(model, example, untuned, fast)
    speed["lowered"] = fast._options.lowers
    shares = replay_time_shares(fast)
    peers = _peers_row(args, database) if speed["lowered"] and not args.no_peers else None
    if args.plot:
        write_plot(args.plot, {report["scheduler"]: report["curve"]}, title=args.model)
    final = report["final_model_ms"]
    if args.json:
        print(json.dumps({
            "model": args.model, "device": report["device"], "scheduler": report["scheduler"],
            "stop_reason": report["stop_reason"], "trials": report["trials"],
            "tuning_seconds": report["tuning_seconds"],
            "initial_model_ms": report["initial_model_ms"], "final_model_ms": final,
            "time_to_95_s": time_to_reach(report["curve"], final / 0.95),
            "time_to_99_s": time_to_reach(report["curve"], final / 0.99),
            "cold_time_share": report["cold_time_share"],
            "failed_time_share": report["failed_time_share"],
            "stalled_samples": report.get("stalled_samples", 0),
            "curve": report["curve"], "tasks": report["tasks"], "bound": bound, "cost": cost,
            **{k: v for k, v in report.items() if k.startswith(("confirm", "replay_"))},
            "peers": peers, "time_shares": shares, **speed,
        }))
        return 0
    where = "in the lowered replay, each in place" if speed["lowered"] else "alone, as ATen runs them"
    print(f"{args.model} on {report['device']}: {report['trials']} candidates timed {where}, "
          f"{report['tuning_seconds']:.0f} s of tuning ({report['scheduler']}), stopped by "
          f"{report['stop_reason']}; database {database}")
    print("estimated latency of the tunable ops (sum of weight x best time per task):")
    print_curve(report)
    print(format_cost(cost))
    if report.get("confirmed"):
        print(f"re-timed against the rule's kernels, in turn in the replay "
              f"({report['confirm_seconds']:.0f} s, {100 * report['confirm_share']:.0f}% of the "
              f"budget): {len(report['confirmed'])} tasks, their "
              f"ops {report['confirmed_rule_ms']:.3f} ms with the rule's, "
              f"{report['confirmed_best_ms']:.3f} ms with the best re-timed (the search had "
              f"{report['confirmed_claimed_ms']:.3f} ms)")
    if report.get("replay_confirmed") is not None:
        picks = report["replay_confirmed"]
        c = report["replay_combination"]
        # Without a kept pick there is no combination to compare (0 pairs).
        together = (f"together against the rule's replay: {c['a_ms']:.3f} -> {c['b_ms']:.3f} "
                    f"ms, faster in {c['faster']} of {c['pairs']} pairs "
                    f"({'kept' if report['replay_combination_kept'] else 'dropped'})"
                    if c["pairs"] else "the rule's kernels stay")
        print(f"confirmed in the whole replay (paired runs with and without each pick, "
              f"{report['replay_confirm_seconds']:.0f} s): {len(picks)} picks differ from the "
              f"rule, {sum(p['tried'] for p in picks)} tried, "
              f"{sum(p['kept'] for p in picks)} kept; {together}")
    _print_bound(fast)
    print(f"\nthe replay prepare gives (CPU lowering {'on' if speed['lowered'] else 'off'}), "
          f"side by side: untuned {speed['untuned_ms']:.3f} ms, with tuned={database} "
          f"{speed['tuned_ms']:.3f} ms: {speed['speedup']:.2f}x; tuned vs eager: max relative "
          f"difference {speed['max_relative_error']:.1e}")
    others = ", ".join(f"{name} {ms:.3f} ms" for name, ms in list(shares["others_ms"].items())[:4])
    print(f"the tunable ops took {100 * shares['tunable_share']:.0f}% of the tuned replay's "
          f"{shares['wall_ms']:.3f} ms (run_timed, median); the other ops: {others or 'none'}; "
          f"the rest is the replay's own time between ops")
    if peers is not None:
        from ..bench.peers import print_report

        print("\nagainst the peers (python -m nimble bench --peers --tuned DB), side by side:")
        print_report([peers])
    return 0


def _print_bound(fast) -> None:
    rows = fast.tuned_report()
    print(f"\nbound {sum(r['bound'] for r in rows)} of {len(rows)} tunable ops (each timed side "
          f"by side with its default kernel now: the rule's in a lowered replay, else ATen's):")
    print(f"{'op':>4} {'task':<24} {'default ms':>10} {'tuned ms':>9} {'speedup':>8}  "
          f"kernel / why not")
    for r in rows:
        speedup = f"{r['speedup']:.2f}x" if r["speedup"] else ""
        tuned = f"{r['tuned_ms']:.4f}" if r["tuned_ms"] else ""
        default = f"{r['aten_ms']:.4f}" if r["aten_ms"] else ""
        print(f"{r['op']:>4} {r['task']:<24} {default:>10} {tuned:>9} {speedup:>8}  "
              f"{r['kernel'] if r['bound'] else r['reason']}")


def _peers_row(args, database: str) -> dict | None:
    """`bench --peers --tuned database`'s row for the model (nimble untuned and tuned, ONNX
    Runtime, OpenVINO), or None when neither peer is installed."""
    from ..bench import peers

    if all(peers.missing_reason(m) for m in ("onnxruntime", "openvino")):
        return None
    return peers.measure_peers(args.model, args.batch, args.image_size, runs=args.peer_runs,
                               warmup=5, only=["nimble", "onnxruntime", "openvino"],
                               tuned=database)


def _run_records(database: str, signatures: list[str], device: str) -> list[dict]:
    """A run's measurements in the order the tuner recorded them (its trials)."""
    from .._C import tuning

    db = tuning.TuningDatabase(database)
    records = [r for sig in signatures for r in db.records(sig, device)]
    return sorted(records, key=lambda r: r["recorded_at"])


def _bests_along(records: list[dict], curve: list) -> list[dict[str, tuple]]:
    """Each task's best config (as the tuner judged it, by the mean of its timings) after
    the trials of every curve point."""
    best: dict[str, tuple[float, tuple]] = {}
    out, done = [], 0
    for _seconds, trials, _ms in curve:
        for r in records[done:trials]:
            if r["error"] == "none" and r["seconds"]:
                mean = sum(r["seconds"]) / len(r["seconds"])
                if r["signature"] not in best or mean < best[r["signature"]][0]:
                    best[r["signature"]] = (mean, tuple(r["config"]))
        done = max(done, trials)
        out.append({sig: config for sig, (_mean, config) in best.items()})
    return out


def remeasured_curves(fast, runs: list[dict], rounds: int = 5, repeats: int = 3,
                      log=lambda line: None) -> None:
    """Adds "curve_remeasured" to every run (with "database" and "report"): the tuner's curve
    with each task's best-so-far config timed again, all of them side by side (`rounds`
    rounds over every task's ATen kernel and configs, the median of the rounds)."""
    from .._C import kernels, tuning
    from ..replay.tunable import inference_replay

    replay = inference_replay(fast)
    tasks = kernels.tasks(replay)
    signatures = [t["signature"] for t in tasks]
    weight = {t["signature"]: len(t["ops"]) for t in tasks}
    device = kernels.device_key()
    configs: dict[str, set] = {sig: set() for sig in signatures}
    bests_of_runs = []  # per run, per curve point: each task's best config
    for run in runs:
        records = _run_records(run["database"], signatures, device)
        if len(records) != run["report"]["trials"]:
            raise RuntimeError(f"{run['database']} holds {len(records)} measurements for a run "
                               f"of {run['report']['trials']} trials: not a fresh database")
        bests_of_runs.append(_bests_along(records, run["report"]["curve"]))
        for bests in bests_of_runs[-1]:
            for sig, config in bests.items():
                configs[sig].add(config)
    measurer = kernels.ReplayMeasurer(replay)
    fixed = tuning.fixed_repeats(repeats)
    order = {sig: sorted(configs[sig]) for sig in signatures}
    samples: dict[tuple, list[float]] = {}
    log(f"re-measuring {sum(map(len, order.values()))} configs and {len(signatures)} ATen "
        f"kernels side by side, {rounds} rounds")
    for _ in range(rounds):
        for sig in signatures:
            samples.setdefault((sig, None), []).append(measurer.baseline_seconds(sig, repeats))
            results = measurer.measure(sig, [list(c) for c in order[sig]], fixed)
            for config, (seconds, error, *_rest) in zip(order[sig], results):
                ok = error == "none" and seconds
                samples.setdefault((sig, config), []).append(
                    sum(seconds) / len(seconds) if ok else float("inf"))
    timed = {key: statistics.median(values) for key, values in samples.items()}

    def latency_ms(bests: dict) -> float:
        return 1e3 * sum(weight[sig] * min(timed[(sig, None)],
                                           timed.get((sig, bests.get(sig)), float("inf")))
                         for sig in signatures)

    for run, bests_along in zip(runs, bests_of_runs):
        run["curve_remeasured"] = [(seconds, trials, latency_ms(bests)) for (seconds, trials, _),
                                   bests in zip(run["report"]["curve"], bests_along)]


def compare_on_model(args) -> int:
    from . import curves
    from .._C import tuning

    schedulers = [s for s in args.schedulers.split(",") if s] or tuning.scheduler_names()
    _, _, fast = prepared(args, args.model)
    runs = []
    with tempfile.TemporaryDirectory() as scratch:
        for seed in range(args.seeds):
            for name in schedulers:
                database = os.path.join(scratch, f"{name}-{seed}.db")  # every run starts empty
                if not args.quiet:
                    print(f"{name}, seed {seed}:", file=sys.stderr, flush=True)
                report = _tune(fast, args, name, database, seed, not (args.quiet or args.json))
                runs.append({"scheduler": name, "seed": seed, "report": report,
                             "database": database})
        remeasured_curves(fast, runs, log=(lambda line: None) if args.quiet else
                          (lambda line: print(line, file=sys.stderr, flush=True)))
    rows = []
    for r in runs:
        del r["database"]
        curve = r["curve_remeasured"]
        r["final_ms"] = curve[-1][2]
        level = max(x["curve_remeasured"][-1][2] for x in runs if x["seed"] == r["seed"])
        r["time_to_95_s"] = curves.time_to_reach(curve, level / 0.95)
        r["time_to_99_s"] = curves.time_to_reach(curve, level / 0.99)
    for name in schedulers:
        mine = [r for r in runs if r["scheduler"] == name]

        def med(key):
            values = [r[key] for r in mine if r[key] is not None]
            return statistics.median(values) if len(values) == len(mine) else None

        rep = [r["report"] for r in mine]
        rows.append({
            "scheduler": name, "time_to_95_s": med("time_to_95_s"), "time_to_99_s": med("time_to_99_s"),
            "final_ms": statistics.median(r["final_ms"] for r in mine),
            "estimated_final_ms": statistics.median(x["final_model_ms"] for x in rep),
            "overhead_share": statistics.median(curves.scheduler_overhead(x) for x in rep),
            "cold_time_share": statistics.median(x["cold_time_share"] for x in rep),
        })
    if args.plot:
        curves.write_plot(args.plot, {r["scheduler"]: r["curve_remeasured"] for r in runs
                                          if r["seed"] == 0}, title=args.model)
    if args.json:
        print(json.dumps({"model": args.model, "rows": rows, "runs": [
            {k: v for k, v in r.items() if k != "report"} | {"curve": r["report"]["curve"]}
            for r in runs]}))
        return 0
    print(f"{args.model}: {len(schedulers)} schedulers x {args.seeds} seeds, "
          f"budget {args.budget_seconds:g} s each; medians over seeds; latencies of every run's "
          f"best configs re-measured side by side; times to 95%/99% of the worst final latency "
          f"of each seed")
    print(f"| scheduler | time to 95% (s) | time to 99% (s) | final (ms) | tuner's own final "
          f"(ms) | overhead | cold time |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['scheduler']} | {curves.format_seconds(r['time_to_95_s'], '')} | "
              f"{curves.format_seconds(r['time_to_99_s'], '')} | {r['final_ms']:.3f} | "
              f"{r['estimated_final_ms']:.3f} | {100 * r['overhead_share']:.2f}% | "
              f"{100 * r['cold_time_share']:.1f}% |")
    print("\ntime to 99% (s) per seed:")
    for name in schedulers:
        times = [curves.format_seconds(r["time_to_99_s"], "") for r in runs if r["scheduler"] == name]
        print(f"  {name:<12} " + "  ".join(times))
    return 0

"""Schedulers on the lowered traces, scored against one reference per model and seed set.

    run:   python examples/scheduler_seed_sets.py run OUT.json --first-seed 0 --seeds 10 \
               [--label L] [--options '{"complete_share": 0.25}']
    score: python examples/scheduler_seed_sets.py score OUT1.json OUT2.json ...

`run` keeps every run's re-measured curve (tuning.compare, default budget and slot); `score`
takes, per model and seed set, the best re-measured final of every run in the files given (all
schedulers, all labels: one bar that does not move with a variant) and prints, per label,
issue 44's test against it beside the test against each call's own reference (the best of its
runs, as `tune --compare --trace` scores). Thin glue over nimble._C.tuning.compare.
"""

import argparse
import json
import math
import statistics
import sys

MODELS = ["resnet18", "mobilenet_v2", "googlenet", "shufflenet_v2_x1_0"]
SCHEDULERS = ["sequential", "round-robin", "gradient", "dynatune"]


def run(args):
    from nimble._C import tuning
    from nimble.tuning.trace import load

    out = []
    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    for model in args.models.split(","):
        tr = load(f"tests/data/traces/{model}_32_lowered.jsonl.gz")
        r = tuning.compare(schedulers=args.schedulers.split(","), seeds=seeds, trace=tr, threads=args.threads,
                           slot_seconds=tuning.trace_slot_seconds(tr, adaptive=True),
                           **json.loads(args.options))
        out.append({"label": args.label, "model": model, "seeds": seeds,
                    "reference_ms": r["reference_ms"],
                    "runs": [{k: x[k] for k in ("scheduler", "seed", "remeasured_final_ms",
                                                "cold_time_share", "remeasured_curve", "slots")}
                             for x in r["runs"]]})
        print(model, r["reference_ms"], file=sys.stderr)
    json.dump(out, open(args.out, "w"))


def time_to(curve, ms):
    return next((t for t, _, m in curve if m <= ms), math.inf)


def median(v):
    return statistics.median(v) if v else math.nan


def met(t99):
    """Issue 44: DynaTune's median time to 99% finite, <= 0.8x gradient's, 2.5x under sequential's."""
    d = t99["dynatune"]
    return math.isfinite(d) and d <= 0.8 * t99["gradient"] and 2.5 * d <= t99["sequential"]


def score(args):
    calls = [c for f in args.files for c in json.load(open(f))]
    pooled = {}
    for c in calls:
        key = (c["model"], tuple(c["seeds"]))
        best = min(r["remeasured_final_ms"] for r in c["runs"])
        pooled[key] = min(pooled.get(key, math.inf), best)
    print("| label | model | seeds | pooled ref ms (own) | scheduler | to 99% pooled, seeds there"
          " | to 99% own | final ms | cold |")
    print("| --- | --- | --- | --- | --- | --- | --- | ---: | ---: |")
    tally = {}
    for c in calls:
        ref = pooled[(c["model"], tuple(c["seeds"]))]
        t_pool, t_own = {}, {}
        for s in SCHEDULERS:
            runs = [r for r in c["runs"] if r["scheduler"] == s]
            if not runs:  # run with --schedulers: the first call on the same model and seeds
                runs = next(([r for r in o["runs"] if r["scheduler"] == s] for o in calls
                             if (o["model"], o["seeds"]) == (c["model"], c["seeds"])
                             and any(r["scheduler"] == s for r in o["runs"])), [])
            tp = [time_to(r["remeasured_curve"], ref / 0.99) for r in runs]
            to = [time_to(r["remeasured_curve"], c["reference_ms"] / 0.99) for r in runs]
            t_pool[s], t_own[s] = median(tp), median(to)
            there = sum(math.isfinite(t) for t in tp)
            print(f"| {c['label']} | {c['model']} | {c['seeds'][0]}-{c['seeds'][-1]} | "
                  f"{ref:.4f} ({c['reference_ms']:.4f}) | {s} | {t_pool[s]:.1f}, {there}/{len(tp)} | "
                  f"{t_own[s]:.1f} | {median([r['remeasured_final_ms'] for r in runs]):.4f} | "
                  f"{100 * median([r['cold_time_share'] for r in runs]):.1f}% |")
        k = (c["label"], c["seeds"][0])
        tally.setdefault(k, [[], []])
        if met(t_pool): tally[k][0].append(c["model"])
        if met(t_own): tally[k][1].append(c["model"])
    for (label, first), (p, o) in sorted(tally.items()):
        print(f"{label} seeds from {first}: met against the pooled reference on {len(p)} "
              f"({', '.join(p) or '-'}), against the call's own on {len(o)} ({', '.join(o) or '-'})")


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("out")
    r.add_argument("--first-seed", type=int, default=0)
    r.add_argument("--seeds", type=int, default=10)
    r.add_argument("--label", default="default")
    r.add_argument("--options", default="{}")
    r.add_argument("--models", default=",".join(MODELS))
    r.add_argument("--threads", type=int, default=1)
    r.add_argument("--schedulers", default=",".join(SCHEDULERS),
                   help="a subset: score borrows the others' runs from another call on the same "
                        "model and seeds (a DynaTune variant beside the default's baselines)")
    s = sub.add_parser("score")
    s.add_argument("files", nargs="+")
    a = p.parse_args()
    run(a) if a.cmd == "run" else score(a)


if __name__ == "__main__":
    main()

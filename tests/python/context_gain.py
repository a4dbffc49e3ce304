"""What tuning in context buys a lowered replay, against what the tuner claimed (issue 44):

    python -m tests.python.context_gain --model torchvision:mobilenet_v2 [--budget-seconds 120]
        [--image-size 64] [--db FILE] [--rounds 200]

tunes the model as `python -m nimble tune` does (unless `--db` names a database tuned already),
then times, alternating call by call in this process (medians), the untuned replay, the replay
tuned with the search's records alone (each shape's fastest search record, the re-timed ones
removed from a copy of the database) and the replay `prepare(tuned=db)` gives (the re-timed
records first, csrc/slot/context_confirmation.h). It prints the tuner's estimate (each task's
fastest time, weight x time summed, before and after the search), the re-timed tasks' sums, and
the three replays. Time it on a quiet machine: with other work beside it, every number moves.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import tempfile
import warnings

import torch

import nimble
from nimble import zoo
from nimble.timing import alternate, median_ms
from nimble.tuning.tune import busy_warning


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True)
    p.add_argument("--image-size", type=int, default=64)
    p.add_argument("--budget-seconds", type=float, default=120.0)
    p.add_argument("--db", help="a database tuned already (skips tuning)")
    p.add_argument("--rounds", type=int, default=200)
    args = p.parse_args(argv)
    torch.manual_seed(0)
    model, x = zoo.build(args.model, batch=1, image_size=args.image_size)
    work = tempfile.mkdtemp(prefix="context_gain_")
    db = args.db
    report = None
    if db is None:
        db = os.path.join(work, "tune.db")
        report = nimble.tune(nimble.Nimble(model).prepare(x), budget_seconds=args.budget_seconds,
                             database=db)
    search_only = os.path.join(work, "search_only.db")
    shutil.copy(db, search_only)
    with sqlite3.connect(search_only) as c:
        c.execute("delete from measurements where run = 'confirmed in context'")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        untuned = nimble.Nimble(model).prepare(x)
        search = nimble.Nimble(model).prepare(x, tuned=search_only)
        tuned = nimble.Nimble(model).prepare(x, tuned=db)
    kept = {name: sum(r["reason"].endswith("faster in this replay") for r in f.tuned_report())
            for name, f in (("search", search), ("tuned", tuned))}
    times = alternate([lambda: untuned(x), lambda: search(x), lambda: tuned(x)],
                      runs=args.rounds, warmup=10)
    print(f"{args.model} at {args.image_size}x{args.image_size}, batch 1, "
          f"{torch.get_num_threads()} threads; database {db}")
    if report is not None:
        print(f"tuner's estimate (weight x fastest time per task): "
              f"{report['initial_model_ms']:.3f} -> {report['final_model_ms']:.3f} ms "
              f"({report['initial_model_ms'] / report['final_model_ms']:.2f}x), "
              f"{report['trials']} candidates in {report['tuning_seconds']:.0f} s")
        if report.get("confirmed"):
            print(f"re-timed in turn with the rule's ({report['confirm_seconds']:.0f} s, "
                  f"{len(report['confirmed'])} tasks): rule {report['confirmed_rule_ms']:.3f} ms,"
                  f" best {report['confirmed_best_ms']:.3f} ms "
                  f"({report['confirmed_rule_ms'] / report['confirmed_best_ms']:.2f}x); the "
                  f"search had claimed {report['confirmed_claimed_ms']:.3f} ms for them")
    base = median_ms(times[0])
    for name, samples in zip(("untuned", "search's records", "prepare(tuned=db)"), times):
        print(f"  {name:<18} {median_ms(samples):.3f} ms  {base / median_ms(samples):.3f}x")
    print(f"  shapes running a database kernel: search's {kept['search']}, "
          f"prepare(tuned=db) {kept['tuned']}")
    busy = busy_warning()
    if busy:
        print(f"  note: {busy}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

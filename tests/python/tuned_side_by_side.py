"""A tuning database's lowered replay against the untuned one (issue 44), in a fresh process:

    python -m tests.python.tuned_side_by_side --model torchvision:resnet18 --db DB
        [--image-size 64] [--repetitions 3] [--rounds 200] [--whole-replay] [--ops]

`prepare(x)` and `prepare(x, tuned=db)`, then `repetitions` times the two alternating call by
call (`nimble.tuning.models.side_by_side`, `rounds` calls each, medians). Two programs built
apart can differ by more than their kernels do (docs/history/tuning-sessions.md, "Session 11"), so with
`--whole-replay` it also confirms the database's picks again in the untuned program's replay
itself (`_C.kernels.confirm_in_replay` on a copy of the database: paired runs with and without
each pick) and prints each pick's verdict. With `--ops`, each op's median time in the two
replays (`run_timed`, `rounds` runs each, alternating), where the ops differ marked: whether the
per-op gains add up to the whole replay's, and what a pick costs the ops next to it. Loaded
machines: repeat, and say so.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile

import torch

import nimble
from nimble import zoo
from nimble.tuning.models import side_by_side


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--db", required=True)
    parser.add_argument("--image-size", type=int, default=64)
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--whole-replay", action="store_true")
    parser.add_argument("--ops", action="store_true")
    args = parser.parse_args()
    torch.manual_seed(0)
    model, x = zoo.build(args.model, image_size=args.image_size)
    untuned = nimble.Nimble(model).prepare(x)
    tuned = nimble.Nimble(model).prepare(x, tuned=args.db)
    rows = tuned.tuned_report()
    print(f"{args.model}: {sum(r['bound'] for r in rows)} of {len(rows)} tunable ops on the "
          f"database's choice (the rule's own configuration included)")
    for r in range(args.repetitions):
        s = side_by_side(model, x, untuned, tuned, rounds=args.rounds)
        print(f"  repetition {r}: untuned {s['untuned_ms']:.3f} ms, tuned {s['tuned_ms']:.3f} ms: "
              f"{s['speedup']:.3f}x (tuned vs eager {s['max_relative_error']:.1e})")
    if args.ops:
        _per_op(untuned, tuned, args.rounds)
    if not args.whole_replay:
        return
    with tempfile.TemporaryDirectory() as scratch:
        copy = f"{scratch}/copy.db"
        shutil.copy(args.db, copy)
        program = untuned._program
        with program.snapshot():
            done = nimble._C.kernels.confirm_in_replay(program.replays[0],
                                                       program.example_inputs, copy, 120.0)
    for p in done["picks"]:
        c = p["comparison"]
        print(f"  {'kept   ' if p['kept'] else 'dropped'} faster in {c['faster']} of {c['pairs']} "
              f"pairs, median ratio {c['median_ratio']:.3f}: {p['spec']} [{p['key']}]")
    c = done["combination"]
    print(f"  together: {c['a_ms']:.3f} -> {c['b_ms']:.3f} ms, faster in {c['faster']} of "
          f"{c['pairs']} pairs, median ratio {c['median_ratio']:.3f}")


def _per_op(untuned, tuned, rounds: int) -> None:
    """Each op's median microseconds in both replays, their runs alternating in turn."""
    programs = (untuned._program, tuned._program)
    ops = [p.replays[0].ops() for p in programs]
    samples = [[[] for _ in mine] for mine in ops]
    walls = [[], []]
    with programs[0].snapshot():
        for r in range(5 + rounds):
            for i in ((0, 1) if r % 2 == 0 else (1, 0)):
                total_ns, timings = programs[i].replays[0].run_timed(programs[i].example_inputs)
                if r < 5:
                    continue
                walls[i].append(total_ns / 1e6)
                for op, _stream, start, end, _ in timings:
                    samples[i][op].append((end - start) / 1e3)
    med = [[statistics.median(s) if s else 0.0 for s in mine] for mine in samples]
    print(f"  run_timed, {rounds} runs each: whole replay {statistics.median(walls[0]):.3f} -> "
          f"{statistics.median(walls[1]):.3f} ms, its ops {sum(med[0]) / 1e3:.3f} -> "
          f"{sum(med[1]) / 1e3:.3f} ms")
    for i, (a, b) in enumerate(zip(*ops)):
        mark = "*" if a.get("tuning") != b.get("tuning") else " "
        print(f"  {i:4d}{mark} {med[0][i]:9.1f} {med[1][i]:9.1f} us  {a['name'][:32]:32s} "
              f"{b.get('tuning', '')}")


if __name__ == "__main__":
    main()

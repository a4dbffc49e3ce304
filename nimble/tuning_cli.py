"""`python -m nimble tune ...`: the auto-tuner from the command line.

A model's own kernels (`--model`), measured on this machine, or a simulated model
(`--simulate`); the tuner itself is C++ (tuning/, csrc/kernels/, csrc/slot/). Examples:

    python -m nimble tune --model torchvision:mobilenet_v2 --budget-seconds 1200 --db tune.db
    python -m nimble tune --model torchvision:resnet18 --compare --schedulers sequential,dynatune
    python -m nimble tune --simulate --scheduler dynatune --seed 0
    python -m nimble tune --simulate --compare --seeds 5 --plot compare.png
"""

from __future__ import annotations

import argparse
import json
import math
import struct
import sys
import time
import zlib

from . import tuning_workers


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m nimble tune",
        description="Tune a model's kernels; --simulate tunes a synthetic model (see tuning/README.md).",
    )
    p.add_argument("--model", default=None,
                   help="tune this model's kernels on this machine: torchvision:NAME (see nimble/zoo.py)")
    p.add_argument("--batch", type=int, default=1, help="with --model: batch size")
    p.add_argument("--image-size", type=int, default=64, help="with --model: image side")
    p.add_argument("--streams", type=int, default=1, help="with --model: streams of the replay")
    p.add_argument("--simulate", action="store_true", help="tune a simulated model")
    p.add_argument("--scheduler", default="dynatune", help="operator scheduler (default dynatune)")
    p.add_argument("--seed", type=int, default=0, help="seed of the simulated model")
    p.add_argument("--tasks", type=int, default=12, help="tasks in the simulated model")
    p.add_argument("--trials-per-task", type=int, default=400,
                   help="trial budget per task (total budget = tasks x this unless --budget-* is given)")
    p.add_argument("--budget-trials", type=int, default=0, help="total trial budget")
    p.add_argument("--budget-seconds", type=float, default=math.inf, help="total tuning-time budget")
    p.add_argument("--slot-seconds", type=float, default=None,
                   help="length of a scheduling slot (default 20 simulated, 3 with --model)")
    p.add_argument("--early-stop-trials", type=int, default=200,
                   help="a task without improvement for this many trials is finished")
    p.add_argument("--c", type=float, default=None,
                   help="DynaTune's UCB constant (default 0.5, or 0.2 under 1 ms model latency)")
    p.add_argument("--survey-stop", action="store_true",
                   help="stop when the improvement rate falls below --phi (Trimmer)")
    p.add_argument("--phi", type=float, default=-0.25, help="survey stop threshold")
    p.add_argument("--goal-ms", type=float, default=0.0, help="stop at this model latency")
    p.add_argument("--no-adaptive", action="store_true", help="fixed repeats instead of AdaTune's evaluator")
    p.add_argument("--no-cold-filter", action="store_true", help="disable Trimmer's cold-candidate filter")
    p.add_argument("--mcmc-steps", type=int, default=500, help="ensemble sampler steps")
    p.add_argument("--db", default=None, help="SQLite tuning database to write (and resume from)")
    p.add_argument("--no-resume", action="store_true", help="do not start from the database's records")
    p.add_argument("--export", default=None, metavar="FILE.jsonl", help="with --db: write every record as JSON lines")
    p.add_argument("--import", dest="import_", default=None, metavar="FILE.jsonl",
                   help="with --db: add the records of a JSON lines file")
    p.add_argument("--best", action="store_true",
                   help="with --db: print the best config of every task signature on --device")
    p.add_argument("--device", default="simulated", help="with --best: device of the records")
    p.add_argument("--compare", action="store_true", help="run every scheduler on the same models")
    p.add_argument("--seeds", type=int, default=None,
                   help="with --compare: seeds 0..N-1 (default 5 simulated, 1 with --model)")
    p.add_argument("--schedulers", default="", help="with --compare: comma-separated subset")
    p.add_argument("--threads", type=int, default=2, help="with --compare: runs in parallel")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--curve", default=None, help="write the latency-over-time curve as CSV")
    p.add_argument("--plot", default=None, help="plot the latency-over-time curve(s) to a PNG file")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    tuning_workers.add_arguments(p)
    return p


def time_to_reach(curve, latency_ms: float) -> float | None:
    for seconds, _trials, model_ms in curve:
        if model_ms is not None and model_ms <= latency_ms:
            return seconds
    return None


def _common_kwargs(args) -> dict:
    return dict(
        tasks=args.tasks, trials_per_task=args.trials_per_task, slot_seconds=args.slot_seconds,
        budget_trials=args.budget_trials, budget_seconds=args.budget_seconds,
        early_stop_trials=args.early_stop_trials, c=args.c, adaptive=not args.no_adaptive,
        cold_filter=not args.no_cold_filter, mcmc_steps=args.mcmc_steps,
    )


def _fmt(v, unit="s") -> str:
    return "never" if v is None else f"{v:.0f} {unit}"


def _run_one(args) -> int:
    from nimble._C import tuning

    progress = None
    if not args.quiet and not args.json:
        last = [0.0]

        def progress(e):
            now = time.monotonic()
            if now - last[0] >= 0.5:
                last[0] = now
                print(f"  slot {e['slot']:4d}  task {e['task']:<8} trials {e['task_trials']:4d}"
                      f"  total {e['trials']:5d}  t={e['tuning_seconds']:7.0f} s"
                      f"  model {e['model_ms']:.3f} ms", file=sys.stderr, flush=True)

    from .tuning_cost import cost_summary, energy_counters, energy_delta, format_cost

    before, started = energy_counters(), time.monotonic()
    with tuning_workers.worker_group(args) as group:
        report = tuning.simulate(
            scheduler=args.scheduler, seed=args.seed, survey_stop=args.survey_stop, phi=args.phi,
            goal_ms=args.goal_ms, database=args.db, resume=not args.no_resume, progress=progress,
            pool=tuning_workers.simulated_pool(group, args), **_common_kwargs(args))
    cost = cost_summary(report, time.monotonic() - started, energy_delta(before, energy_counters()))
    curve = report["curve"]
    final = report["final_model_ms"]
    t95 = time_to_reach(curve, final / 0.95)
    t99 = time_to_reach(curve, final / 0.99)
    slots = max(report["slots"], 1)
    overhead = report["scheduler_wall_seconds"] / (slots * report["slot_seconds"])
    if args.curve:
        _write_csv(args.curve, curve)
    if args.plot:
        write_plot(args.plot, {report["scheduler"]: curve},
                   title=f"simulated model seed {args.seed}")
    if args.json:
        out = {
            "scheduler": report["scheduler"], "seed": args.seed, "stop_reason": report["stop_reason"],
            "initial_model_ms": report["initial_model_ms"], "final_model_ms": final,
            "time_to_95_s": t95, "time_to_99_s": t99, "tuning_seconds": report["tuning_seconds"],
            "trials": report["trials"], "slots": report["slots"],
            "scheduler_overhead_share": overhead, "cold_time_share": report["cold_time_share"],
            "failed_time_share": report["failed_time_share"], "cut_short": report["cut_short"],
            "curve": curve, "tasks": report["tasks"], "cost": cost,
        }
        print(json.dumps(out))
        return 0
    print(f"scheduler {report['scheduler']}, simulated model seed {args.seed}: "
          f"{report['trials']} trials in {report['slots']} slots, stopped by {report['stop_reason']}")
    print_curve(report)
    print(format_cost(cost))
    return 0


def print_curve(report: dict) -> None:
    """The model latency at each tenth of the tuning time, then times to 95%/99% of the final
    latency, scheduler overhead and the share of time on cold and failing candidates."""
    curve, final = report["curve"], report["final_model_ms"]
    t95 = time_to_reach(curve, final / 0.95)
    t99 = time_to_reach(curve, final / 0.99)
    slots = max(report["slots"], 1)
    overhead = report["scheduler_wall_seconds"] / (slots * report["slot_seconds"])
    print(f"{'tuning time (s)':>16} {'trials':>7} {'model latency (ms)':>19}")
    marks = [i * report["tuning_seconds"] / 10 for i in range(11)]
    shown = 0
    for seconds, trials, model_ms in curve:
        if shown < len(marks) and seconds >= marks[shown]:
            print(f"{seconds:16.0f} {trials:7d} {model_ms:19.3f}")
            while shown < len(marks) and seconds >= marks[shown]:
                shown += 1
    print(f"initial {report['initial_model_ms']:.3f} ms, final {final:.3f} ms")
    print(f"time to 95% of the final latency: {_fmt(t95)}; to 99%: {_fmt(t99)}")
    print(f"scheduler overhead {100 * overhead:.3f}% of the slot time; "
          f"{100 * report['cold_time_share']:.1f}% of measurement time on cold candidates, "
          f"{100 * report['failed_time_share']:.1f}% on failing ones; "
          f"{report['cut_short']} candidates cut short")


def _run_compare(args) -> int:
    from nimble._C import tuning

    schedulers = [s for s in args.schedulers.split(",") if s] or tuning.scheduler_names()
    seeds = list(range(args.seeds))
    started = time.monotonic()
    result = tuning.compare(schedulers=schedulers, seeds=seeds, threads=args.threads,
                            **_common_kwargs(args))
    wall = time.monotonic() - started
    if args.plot:
        first_seed = [r for r in result["runs"] if r["seed"] == seeds[0]]
        write_plot(args.plot, {r["scheduler"]: r["curve"] for r in first_seed},
                   title=f"simulated model seed {seeds[0]}")
    if args.curve:
        with open(args.curve, "w") as f:
            f.write("scheduler,seed,seconds,trials,model_ms\n")
            for r in result["runs"]:
                for s, t, ms in r["curve"]:
                    f.write(f"{r['scheduler']},{r['seed']},{s:.6g},{t},{ms:.9g}\n")
    if args.json:
        runs = [{"scheduler": r["scheduler"], "seed": r["seed"], "time_to_95_s": r["time_to_95_s"],
                 "time_to_99_s": r["time_to_99_s"], "final_model_ms": r["final_model_ms"],
                 "tuning_seconds": r["tuning_seconds"], "slots": r["slots"],
                 "scheduler_wall_seconds": r["scheduler_wall_seconds"]} for r in result["runs"]]
        print(json.dumps({"seeds": seeds, "rows": result["rows"], "runs": runs,
                          "table": result["table"], "wall_seconds": wall}))
        return 0
    print(f"{len(schedulers)} schedulers on simulated models (seeds {seeds[0]}..{seeds[-1]}, "
          f"{args.tasks} tasks, {args.trials_per_task} trials/task, {args.slot_seconds:g} s slots); "
          f"medians over seeds; times to 95%/99% of the best final latency of each seed")
    print(result["table"], end="")
    print(f"({wall:.0f} s wall)")
    return 0


def _database_command(args) -> int:
    from nimble._C import tuning

    if not args.db:
        print("python -m nimble tune: --export, --import and --best need --db", file=sys.stderr)
        return 2
    db = tuning.TuningDatabase(args.db)
    if args.import_:
        print(f"imported {db.import_jsonl(args.import_)} records into {args.db}", file=sys.stderr)
    if args.export:
        print(f"exported {db.export_jsonl(args.export)} records to {args.export}", file=sys.stderr)
    if args.best:
        best = {sig: db.best(sig, args.device) for sig in db.signatures(args.device)}
        if args.json:
            print(json.dumps(best))
        else:
            for sig, rec in best.items():
                if rec is None:
                    print(f"{sig}: no successful measurement")
                else:
                    ms = 1e3 * sum(rec["seconds"]) / len(rec["seconds"])
                    print(f"{sig}: config {rec['config']} {ms:.4f} ms")
    return 0


def _write_csv(path: str, curve) -> None:
    with open(path, "w") as f:
        f.write("seconds,trials,model_ms\n")
        for s, t, ms in curve:
            f.write(f"{s:.6g},{t},{ms:.9g}\n")


# --- a small PNG plotter: no plotting dependency, zlib from the standard library -------------

_FONT = {  # 3x5 glyphs, rows top to bottom
    "0": "###|#.#|#.#|#.#|###", "1": ".#.|##.|.#.|.#.|###", "2": "###|..#|###|#..|###",
    "3": "###|..#|.##|..#|###", "4": "#.#|#.#|###|..#|..#", "5": "###|#..|###|..#|###",
    "6": "###|#..|###|#.#|###", "7": "###|..#|..#|.#.|.#.", "8": "###|#.#|###|#.#|###",
    "9": "###|#.#|###|..#|###", "a": ".#.|#.#|###|#.#|#.#", "b": "##.|#.#|##.|#.#|##.",
    "c": ".##|#..|#..|#..|.##", "d": "##.|#.#|#.#|#.#|##.", "e": "###|#..|##.|#..|###",
    "f": "###|#..|##.|#..|#..", "g": ".##|#..|#.#|#.#|.##", "h": "#.#|#.#|###|#.#|#.#",
    "i": "###|.#.|.#.|.#.|###", "j": "..#|..#|..#|#.#|.#.", "k": "#.#|#.#|##.|#.#|#.#",
    "l": "#..|#..|#..|#..|###", "m": "#.#|###|###|#.#|#.#", "n": "##.|#.#|#.#|#.#|#.#",
    "o": ".#.|#.#|#.#|#.#|.#.", "p": "##.|#.#|##.|#..|#..", "q": ".#.|#.#|#.#|##.|.##",
    "r": "##.|#.#|##.|#.#|#.#", "s": ".##|#..|.#.|..#|##.", "t": "###|.#.|.#.|.#.|.#.",
    "u": "#.#|#.#|#.#|#.#|###", "v": "#.#|#.#|#.#|#.#|.#.", "w": "#.#|#.#|###|###|#.#",
    "x": "#.#|#.#|.#.|#.#|#.#", "y": "#.#|#.#|.#.|.#.|.#.", "z": "###|..#|.#.|#..|###",
    ".": "...|...|...|...|.#.", "-": "...|...|###|...|...", ":": "...|.#.|...|.#.|...",
    "%": "#.#|..#|.#.|#..|#.#", "(": "..#|.#.|.#.|.#.|..#", ")": "#..|.#.|.#.|.#.|#..",
    "/": "..#|..#|.#.|#..|#..", " ": "...|...|...|...|...",
}
_COLORS = [(31, 119, 180), (255, 127, 14), (44, 160, 44), (214, 39, 40), (148, 103, 189),
           (140, 86, 75), (227, 119, 194), (127, 127, 127)]


class _Canvas:
    def __init__(self, width: int, height: int):
        self.w, self.h = width, height
        self.px = bytearray(b"\xff" * (width * height * 3))

    def dot(self, x: int, y: int, color, size: int = 1) -> None:
        for dx in range(size):
            for dy in range(size):
                xx, yy = x + dx, y + dy
                if 0 <= xx < self.w and 0 <= yy < self.h:
                    i = (yy * self.w + xx) * 3
                    self.px[i:i + 3] = bytes(color)

    def line(self, x0, y0, x1, y1, color, width: int = 1) -> None:
        x0, y0, x1, y1 = int(round(x0)), int(round(y0)), int(round(x1)), int(round(y1))
        dx, dy = abs(x1 - x0), -abs(y1 - y0)
        sx, sy = (1 if x0 < x1 else -1), (1 if y0 < y1 else -1)
        err = dx + dy
        while True:  # Bresenham
            self.dot(x0, y0, color, width)
            if x0 == x1 and y0 == y1:
                return
            e2 = 2 * err
            if e2 >= dy:
                err += dy
                x0 += sx
            if e2 <= dx:
                err += dx
                y0 += sy

    def text(self, x: int, y: int, s: str, color=(0, 0, 0), scale: int = 2) -> None:
        for ch in s.lower():
            rows = _FONT.get(ch, _FONT[" "]).split("|")
            for r, row in enumerate(rows):
                for c, cell in enumerate(row):
                    if cell == "#":
                        self.dot(x + c * scale, y + r * scale, color, scale)
            x += 4 * scale

    def png(self) -> bytes:
        raw = b"".join(b"\x00" + bytes(self.px[y * self.w * 3:(y + 1) * self.w * 3])
                       for y in range(self.h))

        def chunk(kind: bytes, data: bytes) -> bytes:
            return (struct.pack(">I", len(data)) + kind + data
                    + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))

        header = struct.pack(">IIBBBBB", self.w, self.h, 8, 2, 0, 0, 0)  # 8-bit RGB
        return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header)
                + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


def _ticks(lo: float, hi: float, n: int = 5):
    span = (hi - lo) or 1.0
    raw = span / n
    mag = 10 ** math.floor(math.log10(raw))
    step = min((m * mag for m in (1, 2, 5, 10) if m * mag >= raw), default=raw)
    first = math.ceil(lo / step) * step
    return [first + i * step for i in range(int((hi - first) / step) + 1)]


def write_plot(path: str, curves: dict, title: str = "", width: int = 900, height: int = 540) -> None:
    """Model latency (ms) over tuning time (s), one step line per curve, to a PNG file."""
    cv = _Canvas(width, height)
    left, right, top, bottom = 90, 200, 40, 60
    pts = [(s, ms) for c in curves.values() for s, _t, ms in c if ms is not None]
    if not pts:
        raise ValueError("nothing to plot")
    x_max = max(s for s, _ in pts) or 1.0
    y_min, y_max = min(ms for _, ms in pts), max(ms for _, ms in pts)
    y_min, y_max = max(0.0, y_min - 0.05 * (y_max - y_min)), y_max + 0.05 * (y_max - y_min or 1)

    def X(s):
        return left + (width - left - right) * s / x_max

    def Y(ms):
        return height - bottom - (height - top - bottom) * (ms - y_min) / (y_max - y_min)

    grey, black = (220, 220, 220), (0, 0, 0)
    for t in _ticks(0, x_max):
        cv.line(X(t), top, X(t), height - bottom, grey)
        label = f"{t:g}"
        cv.text(int(X(t)) - 4 * len(label), height - bottom + 8, label)
    for t in _ticks(y_min, y_max):
        cv.line(left, Y(t), width - right, Y(t), grey)
        label = f"{t:g}"
        cv.text(left - 8 - 8 * len(label), int(Y(t)) - 5, label)
    cv.line(left, height - bottom, width - right, height - bottom, black)
    cv.line(left, top, left, height - bottom, black)
    cv.text(left + (width - left - right) // 2 - 80, height - 24, "tuning time (s)")
    cv.text(8, 12, "model latency (ms)")
    if title:
        cv.text(left + 160, 12, title)
    for i, (name, curve) in enumerate(curves.items()):
        color = _COLORS[i % len(_COLORS)]
        prev = None
        for s, _t, ms in curve:
            if ms is None:
                continue
            if prev is not None:  # a step: best-so-far holds until the next measurement
                cv.line(X(prev[0]), Y(prev[1]), X(s), Y(prev[1]), color, 2)
                cv.line(X(s), Y(prev[1]), X(s), Y(ms), color, 2)
            prev = (s, ms)
        ly = top + 10 + 22 * i
        cv.line(width - right + 15, ly + 4, width - right + 40, ly + 4, color, 3)
        cv.text(width - right + 48, ly, name)
    with open(path, "wb") as f:
        f.write(cv.png())


def main(argv: list[str]) -> int:
    if argv and argv[0] == "tune":  # accept both `tune ...` and the arguments after it
        argv = argv[1:]
    args = _parser().parse_args(argv)
    if args.export or args.import_ or args.best:
        return _database_command(args)
    if not args.simulate and not args.model:
        print("python -m nimble tune: give --model torchvision:NAME (real kernels) or --simulate; "
              "see --help", file=sys.stderr)
        return 2
    try:
        from nimble._C import tuning
    except ImportError as e:
        print(f"python -m nimble tune: nimble._C is not built ({e})", file=sys.stderr)
        return 2
    names = tuning.scheduler_names()
    for name in ([s for s in args.schedulers.split(",") if s] if args.compare else [args.scheduler]):
        if name not in names and name != "ansor":
            print(f"unknown scheduler '{name}' (known: {', '.join(names)})", file=sys.stderr)
            return 2
    if args.compare and tuning_workers.uses_workers(args):
        print("python -m nimble tune: --compare runs in this process; drop --workers",
              file=sys.stderr)
        return 2
    try:
        return _dispatch(args)
    except ImportError as e:  # workers without the ray extra
        print(f"python -m nimble tune: {e}", file=sys.stderr)
        return 2


def _dispatch(args) -> int:
    if args.model:
        from .tuning_models import compare_on_model, tune_model

        args.slot_seconds = 3.0 if args.slot_seconds is None else args.slot_seconds
        args.seeds = 1 if args.seeds is None else args.seeds
        return compare_on_model(args) if args.compare else tune_model(args)
    args.slot_seconds = 20.0 if args.slot_seconds is None else args.slot_seconds
    args.seeds = 5 if args.seeds is None else args.seeds
    if args.models:
        return tuning_workers.run_survey(args, _common_kwargs(args))
    return _run_compare(args) if args.compare else _run_one(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

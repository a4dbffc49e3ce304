"""Where the lowering's rule leaves time on this machine (issue 44): each in-context task's
rule configuration against every configuration one knob away from it, in the lowered replay:

    python -m tests.python.knob_probe --model torchvision:resnet18 [--image-size 64]
        [--rounds 10] [--repeats 2] [--only conv3x3] [--top 4]

Per task (a lowered convolution or linear layer shape and epilogue) it times, in rounds of
rotating order, the rule's configuration and each one-knob neighbour as the tuner times a
candidate (`_C.kernels.ContextRecorder`: swapped into the replay, checked against the rule's
kernel, `repeats` timed replays each), and prints the neighbours by the median over rounds of
their time over the rule's in the same round, with the rounds they won. A move that wins most
rounds by a margin, on several runs, is one the tuner's space holds and should find; a move
that nobody wins says the rule is near the space's best there. Loaded machines: repeat.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from nimble import zoo
from nimble._C import kernels
from nimble.replay.wrapper import Nimble
from nimble.tuning.trace import _repeats


def _labels(task: dict, config) -> list[str]:
    return [f"{k['name']}={(k.get('labels') or k.get('values'))[v]}"
            for k, v in zip(task["knobs"], config)]


def _neighbours(task: dict) -> list[tuple]:
    start, valid = tuple(task["start"]), set(map(tuple, task["configs"]))
    out = [start]
    for k, knob in enumerate(task["knobs"]):
        for v in range(len(knob.get("labels") or knob.get("values"))):
            c = start[:k] + (v,) + start[k + 1:]
            if c in valid and c not in out:
                out.append(c)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True)
    p.add_argument("--image-size", type=int, default=64)
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--only", default="", help="tasks whose name contains this")
    p.add_argument("--top", type=int, default=4)
    a = p.parse_args()
    torch.manual_seed(0)
    model, example = zoo.build(a.model, batch=1, image_size=a.image_size)
    fast = Nimble(model.eval()).prepare(example)
    program = fast._program
    with program.snapshot():
        recorder = kernels.ContextRecorder(fast.replay, program.example_inputs)
        tasks = [t for t in recorder.tasks() if a.only in t["name"]]

        def measure(task, config):
            (seconds, error, *_), = recorder.measure(task["signature"], [list(config)],
                                                     _repeats(a.repeats))
            return statistics.mean(seconds) if error == "none" and seconds else None

        if tasks:
            measure(tasks[0], tasks[0]["start"])  # the process's first measurement pays once
        for task in tasks:
            configs = _neighbours(task)
            samples = {c: [] for c in configs}
            started = time.monotonic()
            for r in range(a.rounds):
                for c in configs[r % len(configs):] + configs[:r % len(configs)]:
                    samples[c].append(measure(task, c))
            rule = samples[configs[0]]
            if any(s is None for s in rule):
                print(f"\n{task['name']}: the rule's configuration failed")
                continue
            rows = []
            for c in configs[1:]:
                if any(s is None for s in samples[c]):
                    continue
                ratios = [s / r for s, r in zip(samples[c], rule)]
                wins = sum(s < r for s, r in zip(samples[c], rule))
                moved = [x for x, y in zip(_labels(task, c), _labels(task, configs[0])) if x != y]
                rows.append((statistics.median(ratios), wins, " ".join(moved)))
            rows.sort()
            print(f"\n{task['name']} x{task['weight']:.0f}: rule {statistics.median(rule) * 1e3:.4f}"
                  f" ms, {len(configs)} configurations, {time.monotonic() - started:.0f} s")
            for ratio, wins, moved in rows[:a.top]:
                print(f"   {ratio:.3f} of the rule's, faster in {wins}/{a.rounds} rounds: {moved}")


if __name__ == "__main__":
    main()

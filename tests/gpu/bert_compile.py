"""`torch.compile(backend="nimble")` on BERT with a padding mask, on a GPU: outputs against
eager on two batches, then eager, inductor's default and nimble alternating; medians.
Writes one JSON object to the path given (tests/gpu/run.sh's `bert` part).

    python tests/gpu/bert_compile.py OUT.json [--runs N]
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from nimble.timing import CudaTimer, alternate, median_ms
from nimble.zoo import build_call


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()
    model, _, kwargs = build_call("hf:bert", batch=4, sequence=32)
    model = model.cuda().eval()
    kwargs = {k: v.cuda() if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}
    row = {"model": "hf:bert", "batch": 4, "sequence": 32, "mask": True,
           "device": torch.cuda.get_device_name()}
    with torch.no_grad():
        compiled = torch.compile(model, backend="nimble")
        start = time.perf_counter()
        compiled(**kwargs)
        torch.cuda.synchronize()
        row["compile_s"] = round(time.perf_counter() - start, 2)
        worst = 0.0
        for seed in range(2):
            torch.manual_seed(seed)
            batch = dict(kwargs, input_ids=torch.randint_like(kwargs["input_ids"], 0, 1000))
            got = compiled(**batch).last_hidden_state
            expected = model(**batch).last_hidden_state
            worst = max(worst, float((got - expected).abs().max()))
        row["max_abs_diff"] = worst
        row["matches_eager"] = worst <= 1e-3
        eager_t, nimble_t = alternate([lambda: model(**kwargs), lambda: compiled(**kwargs)],
                                      args.runs, 5, measure=CudaTimer())
    row["eager_ms"] = round(median_ms([w for w, _ in eager_t]), 4)
    row["nimble_ms"] = round(median_ms([w for w, _ in nimble_t]), 4)
    row["nimble_vs_eager"] = round(row["eager_ms"] / row["nimble_ms"], 3)
    with open(args.out, "w") as f:
        json.dump(row, f, indent=2)
    print(json.dumps(row))
    return 0 if row["matches_eager"] else 1


if __name__ == "__main__":
    raise SystemExit(main())

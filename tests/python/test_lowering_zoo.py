"""torchvision's whole classification zoo at 32, 64 and 224 pixels, batch 1: every model whose
unlowered replay works must replay lowered (prepare's default) without a raise, without the
lowering's fallback, and equal to eager relative to the output's scale.

Slow (hours on 2 cores, the large models at 224 most of it): runs with NIMBLE_LOWERING_ZOO=1;
`python -m tests.python.test_lowering_zoo [--sizes 32 64 224] [--models a b]` prints a table.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings

import pytest
import torch
import torchvision

import nimble

sys.path.insert(0, os.path.dirname(__file__))
from layout_fuzz import assert_close_to_scale, realistic_weights_  # noqa: E402

SIZES = [32, 64, 224]


def classification_models() -> list[str]:
    return sorted(torchvision.models.list_models(module=torchvision.models))


def check(name: str, size: int) -> tuple[str, str]:
    """(outcome, detail): outcome is "ok", "skip" (eager or the unlowered replay refuses the
    model at this size) or "FAIL"."""
    torch.manual_seed(0)
    try:
        model = torchvision.models.get_model(name)
    except Exception as error:  # noqa: BLE001 - reported, not raised
        return "skip", f"cannot build: {error}"
    model = realistic_weights_(model).eval()
    x = torch.randn(1, 3, size, size)
    with torch.no_grad():
        try:
            want = model(x)
        except Exception as error:  # noqa: BLE001
            return "skip", f"eager: {str(error).splitlines()[0][:80]}"
        try:
            unlowered = nimble.Nimble(model).prepare(x, streams=1, lower_for_cpu=False)
            unlowered(x)
        except Exception as error:  # noqa: BLE001
            return "skip", f"unlowered: {str(error).splitlines()[0][:80]}"
        del unlowered
        if isinstance(want, tuple) or not isinstance(want, torch.Tensor):
            want = want[0] if isinstance(want, (tuple, list)) else want.logits
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                fast = nimble.Nimble(model).prepare(x, streams=1)
                got = fast(x)
        except Exception as error:  # noqa: BLE001
            return "FAIL", f"raised {type(error).__name__}: {str(error).splitlines()[0][:120]}"
        fallback = [str(w.message) for w in caught if "lowering failed" in str(w.message)]
        if fallback:
            return "FAIL", f"fell back: {fallback[0][:160]}"
        if not isinstance(got, torch.Tensor):
            got = got[0] if isinstance(got, (tuple, list)) else got.logits
        try:
            assert_close_to_scale(got, want)
        except AssertionError as error:
            return "FAIL", f"differs: {error}"
    return "ok", ""


@pytest.mark.skipif(os.environ.get("NIMBLE_LOWERING_ZOO") != "1",
                    reason="slow: NIMBLE_LOWERING_ZOO=1 runs torchvision's zoo lowered")
@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("name", classification_models())
def test_zoo_model_lowered_equals_eager(name, size):
    outcome, detail = check(name, size)
    if outcome == "skip":
        pytest.skip(detail)
    assert outcome == "ok", detail


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, nargs="+", default=SIZES)
    parser.add_argument("--models", nargs="+", default=None)
    args = parser.parse_args(argv)
    failures = 0
    for name in args.models or classification_models():
        for size in args.sizes:
            start = time.perf_counter()
            outcome, detail = check(name, size)
            failures += outcome == "FAIL"
            print(f"| {name} | {size} | {outcome} | {time.perf_counter() - start:.0f} s | {detail} |",
                  flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

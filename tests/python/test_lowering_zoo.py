"""The lowering on whole model zoos, batch 1: torchvision's classification zoo at 32, 64 and
224 pixels, and the timm zoo of the test suite (`nimble.zoo.TIMM_MODELS`) at 64 and 224. Every
model whose unlowered replay works must replay lowered (prepare's default) without a raise,
without the lowering's fallback, and equal to eager relative to the output's scale.

Weights are `nimble.zoo.realistic_weights` (outputs of order one), not the libraries' default
initialisations, whose near-zero logits would pass any comparison.

Slow (hours on 2 cores, the large models at 224 most of it): runs with NIMBLE_LOWERING_ZOO=1;
`python -m tests.python.test_lowering_zoo [--zoo torchvision|timm] [--sizes 32 64 224]
[--models a b] [--batch B] [--calls N] [--threads T]` prints a table. CI runs `CI_SAMPLE`, small
models at each size. `--calls N` replays N times, a second input between the example's calls (a
stale result shows), each call against eager; the table's last column counts the pieces of
nimble's kernels the helper thread ran (their GEMM claims run backwards: with one torch thread,
or a single call, few or none run).
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
import nimble._C  # noqa: F401  (the helper threads' piece count)
from nimble.testing import assert_matches_eager
from nimble.zoo import TIMM_MODELS, realistic_weights

SIZES = {"torchvision": [32, 64, 224], "timm": [64, 224]}


def classification_models() -> list[str]:
    return sorted(torchvision.models.list_models(module=torchvision.models))


def _build(zoo: str, name: str, size: int) -> tuple[torch.nn.Module, int]:
    """The model with its library's defaults, and the image side it runs at: `size`, or a
    timm model's fixed input size."""
    if zoo == "torchvision":
        return torchvision.models.get_model(name), size
    import timm

    model = timm.create_model(name, pretrained=False)
    config = model.pretrained_cfg
    return model, config["input_size"][-1] if config.get("fixed_input_size") else size


def check(name: str, size: int, zoo: str = "torchvision", batch: int = 1,
          calls: int = 1) -> tuple[str, str]:
    """(outcome, detail): outcome is "ok", "skip" (eager or the unlowered replay refuses the
    model at this size) or "FAIL". `calls` > 1: the lowered replay runs that many times, a
    second input between the example's calls, each result against eager."""
    torch.manual_seed(0)
    try:
        model, size = _build(zoo, name, size)
    except Exception as error:  # noqa: BLE001 - reported, not raised
        return "skip", f"cannot build: {error}"
    model.eval()
    x = torch.randn(batch, 3, size, size)
    other = torch.randn(batch, 3, size, size, generator=torch.Generator().manual_seed(2))
    typical = torch.randn(2, 3, size, size, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        try:
            realistic_weights(model, lambda: model(typical))
            want = model(x)
            want_other = model(other) if calls > 1 else None
        except Exception as error:  # noqa: BLE001
            return "skip", f"eager: {str(error).splitlines()[0][:80]}"
        try:
            unlowered = nimble.Nimble(model).prepare(x, streams=1, lower_for_cpu=False)
            unlowered(x)
        except Exception as error:  # noqa: BLE001
            return "skip", f"unlowered: {str(error).splitlines()[0][:80]}"
        del unlowered
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                fast = nimble.Nimble(model).prepare(x, streams=1)
                got = fast(x)
        except Exception as error:  # noqa: BLE001
            return "FAIL", f"raised {type(error).__name__}: {str(error).splitlines()[0][:120]}"
        fallback = [str(w.message) for w in caught if "lowering failed" in str(w.message)]
        if fallback:
            return "FAIL", f"fell back: {fallback[0][:200]}"
        try:  # judged against float64 where the model is ill-conditioned in float32
            assert_matches_eager(got, want, model=model, inputs=(x,))
        except AssertionError as error:
            return "FAIL", f"differs: {error}"
        for call in range(1, calls):
            given, expected = (other, want_other) if call % 2 else (x, want)
            try:
                got = fast(given)
            except Exception as error:  # noqa: BLE001
                return "FAIL", f"call {call} raised {type(error).__name__}: {str(error)[:120]}"
            try:
                assert_matches_eager(got, expected, model=model, inputs=(given,))
            except AssertionError as error:
                return "FAIL", f"call {call} differs: {error}"
    return "ok", ""


_CASES = [("torchvision", n, s) for n in classification_models() for s in SIZES["torchvision"]]
_CASES += [("timm", n, s) for n in TIMM_MODELS for s in SIZES["timm"]]


# Cheap ones (seconds each) at every size of each zoo (test_timm_zoo.py runs more of timm's at
# 64, tiny_vit among them).
CI_SAMPLE = [("torchvision", "squeezenet1_1", 32), ("torchvision", "shufflenet_v2_x0_5", 64),
             ("torchvision", "mnasnet0_5", 224), ("timm", "lcnet_050", 224)]


def _expect_lowered_equal(zoo: str, name: str, size: int) -> None:
    if zoo == "timm":
        pytest.importorskip("timm")
    outcome, detail = check(name, size, zoo)
    if outcome == "skip":
        pytest.skip(detail)
    assert outcome == "ok", detail


@pytest.mark.parametrize("zoo,name,size", CI_SAMPLE)
def test_zoo_sample_lowered_equals_eager(zoo, name, size):
    _expect_lowered_equal(zoo, name, size)


@pytest.mark.skipif(os.environ.get("NIMBLE_LOWERING_ZOO") != "1",
                    reason="slow: NIMBLE_LOWERING_ZOO=1 runs the zoos lowered")
@pytest.mark.parametrize("zoo,name,size", _CASES)
def test_zoo_model_lowered_equals_eager(zoo, name, size):
    _expect_lowered_equal(zoo, name, size)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--zoo", choices=sorted(SIZES), default="torchvision")
    parser.add_argument("--sizes", type=int, nargs="+", default=None)
    parser.add_argument("--models", nargs="+", default=None)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--calls", type=int, default=1)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default torch's)")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    everything = classification_models() if args.zoo == "torchvision" else TIMM_MODELS
    counts = {"ok": 0, "skip": 0, "FAIL": 0}
    began = time.perf_counter()
    print(f"torch threads {torch.get_num_threads()}, batch {args.batch}, calls {args.calls}")
    for name in args.models or everything:
        for size in args.sizes or SIZES[args.zoo]:
            start, pieces = time.perf_counter(), nimble._C._kernel_helper_pieces()
            outcome, detail = check(name, size, args.zoo, args.batch, args.calls)
            counts[outcome] += 1
            print(f"| {args.zoo}:{name} | {size} | {outcome} | {time.perf_counter() - start:.0f} s "
                  f"| {detail} | {nimble._C._kernel_helper_pieces() - pieces} |", flush=True)
    print(f"{sum(counts.values())} cases: {counts['ok']} ok, {counts['skip']} skip, "
          f"{counts['FAIL']} FAIL, {time.perf_counter() - began:.0f} s")
    return 1 if counts["FAIL"] else 0


if __name__ == "__main__":
    sys.exit(main())

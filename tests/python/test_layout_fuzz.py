"""The CPU lowering's layout plan on random stacks of the ops it touches (layout_fuzz.py):
each lowered replay equals eager relative to the output's scale, with no raise and no fallback.

60 programs here, each replayed twice on torch's threads (two on this project's machines);
`NIMBLE_FUZZ_PROGRAMS=5000` (and `NIMBLE_FUZZ_SEED`, the first seed) for the
full suite. A failing program is shown with `python -m tests.python.layout_fuzz --program SEED
--show`."""

from __future__ import annotations

import os

import pytest

from layout_fuzz import Generator, check

PROGRAMS = int(os.environ.get("NIMBLE_FUZZ_PROGRAMS", "60"))
FIRST = int(os.environ.get("NIMBLE_FUZZ_SEED", "0"))


@pytest.mark.parametrize("seed", range(FIRST, FIRST + PROGRAMS))
def test_random_program_lowered_equals_eager(seed):
    # Two calls, a second input between them: on two threads the helper then takes pieces of
    # the kernels' work (its claims run another code path than the caller's).
    problem = check(seed, calls=2)
    assert problem is None, f"program {seed}: {problem}\n{Generator(seed).program()[0].describe()}"


def test_the_generator_covers_the_ops_the_lowering_touches():
    """A sample this size holds every kind of step (else the fuzz would test less than it says)."""
    described = "\n".join(Generator(seed).program()[0].describe() for seed in range(FIRST, FIRST + 60))
    for needle in ["groups=", "dilation=(2, 2)", "stride=(2, 2)", "Conv2d(", "kernel_size=(1, 1)",
                   "MaxPool2d", "AvgPool2d", "AdaptiveAvgPool2d", "AdaptiveMaxPool2d", "split",
                   "chunk", "se", "residual", "flatten", "view", "reshape", "permute linear",
                   "transpose_hw", "bn", "linear", "mul", "add", "conv_transpose"]:
        assert needle in described, needle

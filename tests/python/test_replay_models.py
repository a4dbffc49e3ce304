"""Replay equals eager on real architectures, on fresh inputs (not the example)."""

import pytest
import torch

import nimble
from nimble.testing import assert_matches_eager
from nimble.zoo import ALL_MODELS, build


@pytest.mark.parametrize("batch", [1, 8])
@pytest.mark.parametrize("spec", ALL_MODELS)
def test_replay_matches_eager(spec, batch):
    model, example = build(spec, batch=batch, image_size=64)
    fast = nimble.Nimble(model).prepare(example)
    for seed in (1, 2):
        torch.manual_seed(seed)
        x = torch.randn_like(example)
        with torch.no_grad():
            expected = model(x)
        # Convolutions are lowered to oneDNN and MKL calls with batch norms folded
        # (passes/cpu_lowering.h): equal up to float rounding.
        assert_matches_eager(fast(x), expected, what=f"{spec} seed {seed}")

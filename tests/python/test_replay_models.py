"""Replay equals eager on real architectures, on fresh inputs (not the example)."""

import pytest
import torch

import nimble
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
        torch.testing.assert_close(fast(x), expected)

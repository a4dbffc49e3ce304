"""Multi-stream replays under stress: a pause of random length before random ops changes
how far each stream gets before the others, so any dependency the schedule's events miss,
or any value dropped while another stream still reads it, gives a wrong result or a
crash. The CPU twin of the CUDA stress test in test_cuda.py (same plan, same hook)."""

import random

import pytest
import torch

import nimble
from nimble.testing import assert_matches_eager
from nimble.zoo import build


@pytest.mark.parametrize("spec", ["torchvision:googlenet", "torchvision:squeezenet1_1", "torchvision:inception_v3"])
def test_random_delays_on_random_streams_never_change_the_result(spec):
    model, example = build(spec, batch=1, image_size=32 if "googlenet" in spec else 75)
    fast = nimble.Nimble(model).prepare(example, streams=3)
    assert fast.schedule["physical_streams"] >= 2
    rng = random.Random(spec)
    for _ in range(3):
        delays = [rng.choice([0] * 12 + [50, 200, 1000]) for _ in range(fast.num_ops)]
        fast.replay.set_stress_delays(delays)
        for _ in range(2):
            x = torch.randn_like(example)
            with torch.no_grad():
                expected = model(x)
            assert_matches_eager(fast(x), expected)
    fast.replay.set_stress_delays([])
    x = torch.randn_like(example)
    with torch.no_grad():
        assert_matches_eager(fast(x), model(x))


def test_stress_delays_need_one_per_op():
    model, example = build("torchvision:resnet18", batch=1, image_size=32)
    fast = nimble.Nimble(model).prepare(example, streams=2)
    with pytest.raises(ValueError, match="one stress delay per op"):
        fast.replay.set_stress_delays([1, 2, 3])
    # The replay keeps its executor and still works.
    with torch.no_grad():
        assert_matches_eager(fast(example), model(example))

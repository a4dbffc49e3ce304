"""timm as a second model zoo: architectures of every family (residual and grouped convnets,
mobile nets, re-parametrisable nets, hybrids, vision transformers, MLP mixers), randomly
initialised, prepared as a user would (`Nimble(model).prepare(x)`: the CPU lowering on) and
replayed against eager.

CI runs a fixed sample across the families; NIMBLE_FULL_LOWERING=1 runs all of
`nimble.zoo.TIMM_MODELS` (the flag of the other whole-zoo comparisons)."""

from __future__ import annotations

import os

import pytest
import torch

import nimble
from nimble.testing import assert_matches_eager
from nimble.zoo import TIMM_MODELS, build

pytest.importorskip("timm")

FULL = os.environ.get("NIMBLE_FULL_LOWERING") == "1"
# One or two of each family: residual, depthwise with squeeze-excite, re-parametrisable,
# hybrid convolution-attention, vision transformer, MLP mixer.
CI_SAMPLE = ["resnet18d", "mobilenetv3_small_050", "lcnet_050", "repvgg_a0", "convnext_atto",
             "mobilevit_xxs", "deit_tiny_patch16_224", "mixer_s32_224"]


def _compare(name: str, batch: int, image_size: int) -> None:
    model, example = build(f"timm:{name}", batch=batch, image_size=image_size)
    fast = nimble.Nimble(model).prepare(example)
    # Fresh inputs, not the example prepare ran, each against eager's output on it.
    for call in range(2):
        x = torch.randn_like(example)
        with torch.no_grad():
            expected = model(x)
        got = fast(x)
        # tiny_vit is ill-conditioned in float32: there the replay is judged against float64.
        assert_matches_eager(got, expected, what=f"{name} call {call}", model=model, inputs=(x,))
        assert torch.equal(fast(x), got), f"{name}: two replays of one input differ"


@pytest.mark.parametrize("name", TIMM_MODELS if FULL else CI_SAMPLE)
def test_timm_model_replays_equal_to_eager(name):
    _compare(name, batch=1, image_size=64)


@pytest.mark.parametrize("name", TIMM_MODELS[::4] if FULL else ["resnet10t", "efficientnet_b0"])
def test_timm_model_at_batch_2_and_a_larger_image(name):
    _compare(name, batch=2, image_size=96)


"""Beyond the classification zoo: recurrent nets, integer inputs, segmentation (dict
outputs), video (5-D inputs), windowed attention; detection is refused, not mis-replayed."""

import pytest
import torch
import torchvision

import nimble
from nimble.testing import assert_matches_eager
from nimble.zoo import realistic_weights


def _cases():
    tv = torchvision.models
    return {
        "lstm": (lambda: torch.nn.LSTM(16, 32, num_layers=2, batch_first=True), lambda: torch.randn(2, 10, 16)),
        "gru": (lambda: torch.nn.GRU(16, 32, batch_first=True), lambda: torch.randn(2, 10, 16)),
        "embedding": (
            lambda: torch.nn.Sequential(torch.nn.Embedding(100, 16), torch.nn.Flatten(), torch.nn.Linear(160, 4)),
            lambda: torch.randint(0, 100, (3, 10)),
        ),
        "deeplabv3": (
            lambda: tv.segmentation.deeplabv3_mobilenet_v3_large(weights=None, weights_backbone=None, num_classes=5),
            lambda: torch.randn(1, 3, 64, 64),
        ),
        "r3d_18": (lambda: tv.video.r3d_18(), lambda: torch.randn(1, 3, 4, 32, 32)),
        "swin_t": (lambda: tv.swin_t(), lambda: torch.randn(1, 3, 64, 64)),
    }


@pytest.mark.parametrize("name", list(_cases()))
def test_replay_matches_eager(name):
    make_model, make_input = _cases()[name]
    torch.manual_seed(0)
    model = make_model().eval()
    # Outputs of order one (torchvision's initialisation leaves some about zero).
    realistic_weights(model, lambda: model(make_input()))
    fast = nimble.Nimble(model).prepare(make_input())
    x = make_input()
    with torch.no_grad():
        expected = model(x)
    # Convolutions are lowered (passes/cpu_lowering.h): equal up to float rounding.
    assert_matches_eager(fast(x), expected)


def test_detection_is_refused_at_the_data_dependent_line():
    model = torchvision.models.detection.fasterrcnn_mobilenet_v3_large_320_fpn(
        weights=None, weights_backbone=None
    ).eval()
    with pytest.raises(nimble.NotStaticError, match=r"torchvision/ops/boxes\.py:\d+"):
        nimble.Nimble(model).prepare(([torch.rand(3, 64, 64)],))

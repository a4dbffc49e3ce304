"""Buffers whose lifetimes cannot overlap share storage, in every stream mode."""

import pytest
import torch

import nimble
from nimble.zoo import build


@pytest.mark.parametrize("streams", [1, 2, 4])
@pytest.mark.parametrize("spec", ["torchvision:densenet121", "torchvision:googlenet", "transformer:encoder"])
def test_planned_buffers_shrink_and_replay_stays_exact(spec, streams):
    model, example = build(spec, batch=2)
    fast = nimble.Nimble(model).prepare(example, streams=streams)
    memory = fast.memory
    assert 0 < memory["buffer_bytes"] < memory["buffer_bytes_unplanned"]
    for _ in range(2):
        x = torch.randn_like(example)
        with torch.no_grad():
            expected = model(x)
        tol = {} if streams == 1 else {"rtol": 1e-4, "atol": 1e-4}
        torch.testing.assert_close(fast(x), expected, **tol)


def test_planning_can_be_switched_off():
    model, example = build("torchvision:resnet18")
    fast = nimble.Nimble(model).prepare(example, plan_memory=False)
    assert fast.memory["buffer_bytes"] == fast.memory["buffer_bytes_unplanned"] > 0


def test_outputs_never_share_storage_with_later_buffers():
    class TwoHeads(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = torch.nn.Linear(8, 8)
            self.b = torch.nn.Linear(8, 8)

        def forward(self, x):
            first = self.a(x).relu()
            second = self.b(first).sigmoid() * 3
            return first, second

    model = TwoHeads().eval()
    fast = nimble.Nimble(model).prepare(torch.randn(4, 8), copy_outputs=False)
    x = torch.randn(4, 8)
    with torch.no_grad():
        expected = model(x)
    torch.testing.assert_close(fast(x), expected)


def test_large_results_can_be_left_to_the_allocator():
    model, example = build("torchvision:googlenet", batch=2)
    everything = nimble.Nimble(model).prepare(example)
    small_only = nimble.Nimble(model).prepare(example, out_variant_max_bytes=16 * 1024)
    assert small_only.memory["buffer_bytes_unplanned"] < everything.memory["buffer_bytes_unplanned"]
    x = torch.randn_like(example)
    with torch.no_grad():
        expected = model(x)
    torch.testing.assert_close(small_only(x), expected, rtol=0, atol=0)

"""Inference on the graph backends (graph_backends.py): the CUDA graph on a GPU, its CPU
twin in CI. Every call right, outputs handed out earlier unchanged by later calls,
outputs handed out without copies overwritten as a graph's are, prepare changing nothing."""

from __future__ import annotations

import os

import pytest
import torch

import nimble
from graph_backends import (
    BACKEND_NAME,
    BACKENDS,
    assert_matches,
    check_calls,
    device_of,
    prepare_options,
)
from nimble.zoo import build

# Eight zoo models: plain CNN, depthwise, inception branches (two kinds), dense
# concatenation, squeeze-excitation, channel shuffle, attention.
MODELS = [
    "torchvision:resnet18", "torchvision:mobilenet_v2", "torchvision:googlenet",
    "torchvision:inception_v3", "torchvision:densenet121", "torchvision:efficientnet_b0",
    "torchvision:shufflenet_v2_x1_0", "transformer:encoder",
]
IMAGE_SIZE = {"torchvision:inception_v3": 75}


def _model(spec, backend, batch=2):
    model, example = build(spec, batch=batch, image_size=IMAGE_SIZE.get(spec, 32))
    device = device_of(backend)
    return model.to(device), example.to(device)


# CI: every model on one stream, the branchy ones on four; NIMBLE_FULL_GRAPH_SUITE=1: all.
MULTI_STREAM = ["torchvision:googlenet", "torchvision:inception_v3", "torchvision:densenet121"]
CASES = [(spec, streams) for spec in MODELS for streams in (1, 4)
         if streams == 1 or spec in MULTI_STREAM or os.environ.get("NIMBLE_FULL_GRAPH_SUITE")]


@pytest.mark.parametrize("spec, streams", CASES)
@pytest.mark.parametrize("backend", BACKENDS)
def test_graph_matches_eager_on_every_call(backend, spec, streams):
    model, example = _model(spec, backend)
    fast = nimble.Nimble(model).prepare(example, streams=streams, **prepare_options(backend))
    assert fast.replay.backend == BACKEND_NAME[backend]
    assert fast.schedule["physical_streams"] == min(streams, fast.schedule["logical_streams"])
    check_calls(model, fast, example, backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_outputs_without_copies_are_overwritten_by_the_next_replay(backend):
    model, example = _model("torchvision:resnet18", backend)
    fast = nimble.Nimble(model).prepare(example, copy_outputs=False, **prepare_options(backend))
    first = fast(torch.randn_like(example))
    x = torch.randn_like(example)
    second = fast(x)
    assert first.data_ptr() == second.data_ptr()  # one buffer, as a graph's output is
    with torch.no_grad():
        assert_matches(first, model(x), backend, "the earlier output holds the latest result")


@pytest.mark.parametrize("backend", BACKENDS)
def test_prepare_leaves_buffers_inputs_and_generators_as_it_found_them(backend):
    """Warm-up and recording run the program: a module that writes its buffers and inputs
    and draws random numbers must be left as prepare found it."""

    class Writes(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("calls", torch.zeros(3))

        def forward(self, x):
            self.calls.add_(1)
            x.mul_(2)
            return x + torch.rand_like(x) + self.calls

    device = device_of(backend)
    model = Writes().to(device)
    example = torch.randn(3, device=device)
    before = example.clone()
    torch.manual_seed(5)
    state = torch.get_rng_state()
    fast = nimble.Nimble(model).prepare(example, **prepare_options(backend))
    assert torch.equal(torch.get_rng_state(), state)
    torch.testing.assert_close(model.calls, torch.zeros(3, device=device), rtol=0, atol=0)
    torch.testing.assert_close(example, before, rtol=0, atol=0)
    x = torch.randn(3, device=device)
    eager_x, eager_model = x.clone(), Writes().to(device)
    torch.manual_seed(9)
    expected = eager_model(eager_x)
    torch.manual_seed(9)
    got = fast(x)
    assert_matches(got, expected, backend, "output")
    assert_matches(x, eager_x, backend, "the input written in place")
    assert_matches(model.calls, eager_model.calls, backend, "the buffer")


def test_a_parameter_whose_memory_moved_is_recorded_again():
    """A CUDA graph reads the addresses it captured: a parameter given new storage
    (`.data = ...`, of the same shape) is followed by recording the graph again (the replay
    checks every parameter before each call); the twin would refuse an old recording."""
    model = torch.nn.Conv1d(2, 2, 3).eval()  # the convolution reads its weight directly
    fast = nimble.Nimble(model).prepare(torch.randn(1, 2, 8), _graph_twin=True)
    model.weight.data = torch.randn(2, 2, 3)
    x = torch.randn(1, 2, 8)
    with torch.no_grad():
        torch.testing.assert_close(fast(x), model(x))


def test_the_twin_refuses_stress_delays():
    fast = nimble.Nimble(torch.nn.Linear(4, 4).eval()).prepare(torch.randn(2, 4), _graph_twin=True)
    with pytest.raises(ValueError, match="stress delays would test nothing"):
        fast.replay.set_stress_delays([5] * fast.num_ops)

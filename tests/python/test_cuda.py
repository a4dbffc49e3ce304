"""The CUDA graph backend. Runs where a GPU is present; skips cleanly elsewhere."""

import pytest
import torch

import nimble
from nimble.zoo import build

needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")


def test_extension_was_built_with_the_cuda_backend_when_torch_has_cuda():
    # Compile-and-link check that holds without a device: torch's CUDA build plus nvcc
    # must give a module whose CPU programs still run.
    fast = nimble.Nimble(torch.nn.Linear(3, 3).eval()).prepare(torch.randn(2, 3))
    assert fast.replay.backend == "cpu"


@needs_gpu
@pytest.mark.parametrize("spec", ["torchvision:resnet18", "torchvision:mobilenet_v2", "transformer:encoder"])
def test_cuda_graph_replay_matches_eager(spec):
    model, example = build(spec, batch=2)
    model, example = model.cuda(), example.cuda()
    fast = nimble.Nimble(model).prepare(example)
    assert fast.replay.backend == "cuda-graph"
    for _ in range(2):
        x = torch.randn_like(example)
        with torch.no_grad():
            expected = model(x)
        torch.testing.assert_close(fast(x), expected, rtol=1e-3, atol=1e-3)


@needs_gpu
def test_cuda_outputs_are_copied_by_default():
    model = torch.nn.Linear(4, 4).cuda().eval()
    fast = nimble.Nimble(model).prepare(torch.randn(2, 4, device="cuda"))
    a = torch.randn(2, 4, device="cuda")
    first = fast(a)
    fast(torch.randn(2, 4, device="cuda"))
    with torch.no_grad():
        torch.testing.assert_close(first, model(a))


@needs_gpu
def test_training_on_cuda_is_refused_clearly():
    model = torch.nn.Linear(4, 2).cuda()
    with pytest.raises(nimble.UnsupportedOpError, match="CPU backend"):
        nimble.Nimble(model).prepare(torch.randn(3, 4, device="cuda"), training=True)

"""The CUDA graph backend: one and several streams captured into one graph. Runs where a
GPU is present; skips cleanly elsewhere (the schedule these tests rely on is proven on
the CPU in tests/cpp/scheduling/issue_plan_test.cpp and tests/python/test_stream_stress.py)."""

import json
import random

import pytest
import torch

import nimble
from graph_backends import check_calls
from nimble.zoo import build

needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")

# The models issue 13 names: a plain CNN, depthwise, inception branches (two kinds), dense
# concatenation, squeeze-excitation, attention (ViT and a Transformer encoder).
MODELS = [
    "torchvision:resnet18", "torchvision:mobilenet_v2", "torchvision:googlenet",
    "torchvision:inception_v3", "torchvision:densenet121", "torchvision:efficientnet_b0",
    "torchvision:vit_b_16", "transformer:encoder",
]
# Wide enough for streams to matter; small enough for a quick suite.
IMAGE_SIZE = {"torchvision:vit_b_16": 224, "torchvision:inception_v3": 96}
TOLERANCE = dict(rtol=2e-3, atol=2e-3)  # TF32-free float32, other kernel choices than eager's


def _cuda_model(spec, batch):
    model, example = build(spec, batch=batch, image_size=IMAGE_SIZE.get(spec, 64))
    return model.cuda(), example.cuda()


def test_extension_was_built_with_the_cuda_backend_when_torch_has_cuda():
    # Compile-and-link check that holds without a device: torch's CUDA build plus nvcc
    # must give a module whose CPU programs still run.
    fast = nimble.Nimble(torch.nn.Linear(3, 3).eval()).prepare(torch.randn(2, 3))
    assert fast.replay.backend == "cpu"


@needs_gpu
@pytest.mark.parametrize("batch", [1, 8])
@pytest.mark.parametrize("spec", MODELS)
def test_one_stream_graph_matches_eager_on_every_call(spec, batch):
    model, example = _cuda_model(spec, batch)
    fast = nimble.Nimble(model).prepare(example, streams=1)
    assert fast.replay.backend == "cuda-graph"
    assert fast.schedule["physical_streams"] == 1
    check_calls(model, fast, example, "cuda", calls=3)


@needs_gpu
@pytest.mark.parametrize("batch", [1, 8])
@pytest.mark.parametrize("spec", MODELS)
def test_multi_stream_graph_matches_eager_on_every_call(spec, batch):
    model, example = _cuda_model(spec, batch)
    fast = nimble.Nimble(model).prepare(example, streams=4)
    s = fast.schedule
    assert s["physical_streams"] == min(4, s["logical_streams"])
    assert len(s["physical_stream"]) == fast.num_ops
    check_calls(model, fast, example, "cuda", calls=3)


@needs_gpu
@pytest.mark.parametrize("spec", ["torchvision:googlenet", "torchvision:inception_v3"])
def test_inception_blocks_run_on_several_cuda_streams(spec):
    model, example = _cuda_model(spec, 1)
    fast = nimble.Nimble(model).prepare(example, streams=8)
    s = fast.schedule
    assert s["physical_streams"] >= 4  # four branches per block
    assert s["physical_syncs"] > 0
    assert len(set(s["physical_stream"])) == s["physical_streams"]


@needs_gpu
@pytest.mark.parametrize("spec", ["torchvision:googlenet", "torchvision:resnet18"])
def test_auto_keeps_one_stream_or_the_default_count(spec):
    model, example = _cuda_model(spec, 1)
    fast = nimble.Nimble(model).prepare(example, streams="auto")
    chosen = fast.schedule["physical_streams"]
    reference = nimble.Nimble(model).prepare(example)
    reference.replay.set_streams(0)  # the backend's default: the graph's width, at most 8
    default = reference.schedule["physical_streams"]
    assert 1 <= default <= 8
    assert chosen in (1, default)
    check_calls(model, fast, example, "cuda", calls=3)


@needs_gpu
@pytest.mark.parametrize("spec", ["torchvision:googlenet", "torchvision:densenet121", "transformer:encoder"])
def test_random_delays_on_random_streams_never_change_the_result(spec):
    """Memory and ordering under concurrency: spinning kernels of random length before
    random ops (captured with the graph) reorder how far each stream gets; a dependency
    the events miss, or memory reused while another stream still reads it, shows up as
    a wrong result."""
    model, example = _cuda_model(spec, 1)
    fast = nimble.Nimble(model).prepare(example, streams=4)
    rng = random.Random(0)
    for trial in range(3):
        delays = [rng.choice([0, 0, 0, 5, 20, 100]) for _ in range(fast.num_ops)]
        fast.replay.set_stress_delays(delays)
        for _ in range(5):
            x = torch.randn_like(example)
            with torch.no_grad():
                expected = model(x)
            torch.testing.assert_close(fast(x), expected, **TOLERANCE)
    fast.replay.set_stress_delays([])


@needs_gpu
def test_cuda_outputs_are_copied_by_default_and_reused_without_copies():
    model = torch.nn.Linear(4, 4).cuda().eval()
    fast = nimble.Nimble(model).prepare(torch.randn(2, 4, device="cuda"))
    a = torch.randn(2, 4, device="cuda")
    first = fast(a)
    fast(torch.randn(2, 4, device="cuda"))
    with torch.no_grad():
        torch.testing.assert_close(first, model(a))
    shared = nimble.Nimble(model).prepare(a, copy_outputs=False)
    assert shared(a).data_ptr() == shared(torch.randn_like(a)).data_ptr()


@needs_gpu
def test_several_models_prepared_in_a_row_in_one_process():
    # A process that prepared several CUDA models in a row once aborted with a corrupted
    # heap (a use-after-free at the first prepare).
    for spec in MODELS[:4]:
        model, example = _cuda_model(spec, 1)
        for streams in (1, 4):
            fast = nimble.Nimble(model).prepare(example, streams=streams)
            check_calls(model, fast, example, "cuda", calls=2)
            del fast


@needs_gpu
def test_trace_has_one_row_per_cuda_stream(tmp_path):
    model, example = _cuda_model("torchvision:googlenet", 1)
    fast = nimble.Nimble(model).prepare(example, streams=4)
    path = tmp_path / "trace.json"
    fast.trace(str(path))
    events = [e for e in json.loads(path.read_text())["traceEvents"] if e.get("ph") == "X"]
    assert len(events) == fast.num_ops
    assert {e["tid"] for e in events} == set(fast.schedule["physical_stream"])
    assert all(e["dur"] >= 0 for e in events)
    # The graph still replays right after the ops were issued outside it.
    check_calls(model, fast, example, "cuda", calls=2)
    dot = tmp_path / "g.dot"
    fast.to_dot(str(dot))
    assert dot.read_text().startswith("digraph")


@needs_gpu
def test_wrong_input_device_is_refused():
    model, example = _cuda_model("torchvision:resnet18", 1)
    fast = nimble.Nimble(model).prepare(example)
    with pytest.raises(ValueError, match="cuda"):
        fast(example.cpu())

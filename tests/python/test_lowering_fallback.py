"""The CPU lowering never turns a working model into an error: models it once broke replay
lowered and equal to eager, and a lowering that fails to build, raises on the example or
differs from eager falls back to the unlowered replay with a one-line warning."""

from __future__ import annotations

import warnings

import pytest
import torch
import torchvision
from torch import nn

import nimble
from nimble import _C
from layout_fuzz import assert_close_to_scale, realistic_weights_
from nimble.replay import lowering_fallback, pipeline


def _prepare_without_warnings(model, x):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return nimble.Nimble(model).prepare(x, streams=1)


def _lowered_ops(fast) -> list[str]:
    return [op["name"] for op in fast.replay.ops() if op["name"].startswith("nimble::")]


@pytest.mark.parametrize("name,size", [("alexnet", 64), ("alexnet", 96), ("vgg11", 32),
                                       ("vgg11", 64)])
def test_small_maps_under_an_upsampling_adaptive_pool(name, size):
    """The feature map is smaller than AdaptiveAvgPool2d's output, and flatten views the
    pooled value: it must reach the view in the model's layout."""
    torch.manual_seed(0)
    model = realistic_weights_(getattr(torchvision.models, name)()).eval()
    x = torch.randn(1, 3, size, size)
    with torch.no_grad():
        want = model(x)
        fast = _prepare_without_warnings(model, x)
        assert "nimble::convolution_prepacked" in _lowered_ops(fast)
        assert_close_to_scale(fast(x), want)
        x2 = torch.randn(1, 3, size, size)
        assert_close_to_scale(fast(x2), model(x2))


@pytest.mark.parametrize("name", ["mixnet_s", "tf_mixnet_s"])
def test_mixed_depthwise_kernels_split_and_concatenated(name):
    timm = pytest.importorskip("timm")
    torch.manual_seed(0)
    model = realistic_weights_(timm.create_model(name, pretrained=False)).eval()
    x = torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        want = model(x)
        fast = _prepare_without_warnings(model, x)
        assert "nimble::convolution_prepacked" in _lowered_ops(fast)
        assert_close_to_scale(fast(x), want)


def _small_net() -> nn.Module:
    torch.manual_seed(0)
    return realistic_weights_(nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 8 * 8, 10),
    )).eval()


class BrokenReplay:
    """A lowered replay that misbehaves on its first runs (as a lowering bug would)."""

    def __init__(self, replay, how: str) -> None:
        self._replay, self._how = replay, how

    def run(self, inputs, copy_outputs=True, *rest):
        if self._how == "raise":
            raise RuntimeError("aten::view: view size is not compatible (injected)")
        return [2 * t + 1 for t in self._replay.run(inputs, copy_outputs, *rest)]

    def __getattr__(self, name):
        return getattr(self._replay, name)


def _inject(monkeypatch, how: str) -> None:
    real = pipeline.build_replay

    def build_replay(part, options):
        if options.lower_for_cpu and how == "build":
            raise RuntimeError("nimble::convolution_prepacked: cannot pack (injected)")
        replay = real(part, options)
        return BrokenReplay(replay, how) if options.lower_for_cpu else replay

    monkeypatch.setattr(pipeline, "build_replay", build_replay)


@pytest.mark.parametrize("how,named", [
    ("build", "nimble::convolution_prepacked: cannot pack"),
    ("raise", "aten::view: view size is not compatible"),
    ("differ", "output 0 differs from eager"),
])
def test_a_broken_lowering_falls_back_with_a_warning(monkeypatch, how, named):
    _inject(monkeypatch, how)
    model = _small_net()
    x = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        with pytest.warns(UserWarning, match="CPU lowering failed") as caught:
            fast = nimble.Nimble(model).prepare(x, streams=1)
        messages = [str(w.message) for w in caught if "lowering failed" in str(w.message)]
        assert len(messages) == 1 and "\n" not in messages[0] and named in messages[0]
        assert not _lowered_ops(fast), "the fallback replays ATen's ops"
        for _ in range(2):
            x = torch.randn(2, 3, 16, 16)
            assert_close_to_scale(fast(x), model(x))


def test_a_working_lowering_is_kept_without_a_warning():
    model = _small_net()
    x = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        fast = _prepare_without_warnings(model, x)
        assert "nimble::convolution_prepacked" in _lowered_ops(fast)
        assert_close_to_scale(fast(x), model(x))


def test_the_unlowered_replay_is_never_checked():
    """lower_for_cpu=False builds once and runs nothing at prepare."""
    calls = []

    def build(options):
        calls.append(options)
        return object()

    options = _C.BuildOptions()
    options.lower_for_cpu = False
    lowering_fallback.build_checked(build, options, lambda r: calls.append("run"))
    assert calls == [options]


def test_difference_is_relative_to_the_scale():
    ref = torch.tensor([1000.0, 0.0, float("nan")])
    assert lowering_fallback.difference([ref + 0.5], [ref]) is None  # 5e-4 of the scale
    assert lowering_fallback.difference([ref + 2.0], [ref])[0] == 0
    tiny = torch.tensor([1e-9, -2e-9])
    assert lowering_fallback.difference([tiny * (1 + 1e-5)], [tiny]) is None
    assert lowering_fallback.difference([tiny * 2], [tiny]) is not None
    # a NaN where eager is finite, a changed integer output, another shape
    assert lowering_fallback.difference([torch.tensor([float("nan")])], [torch.tensor([1.0])])
    assert lowering_fallback.difference([torch.tensor([1, 2])], [torch.tensor([1, 3])])
    assert lowering_fallback.difference([torch.ones(2)], [torch.ones(3)])


class _IllConditioned(nn.Module):
    """Zero-mean weights on inputs of about 3e4 plus noise: the output, of order one, is what
    is left of sums of terms of order 1e3, and float32's rounding of those sums is ~3e-3 of it
    whatever their order (eager's own error against float64)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.linear, self.conv = nn.Linear(256, 64), nn.Conv2d(16, 16, 3, padding=1)
        with torch.no_grad():
            w = torch.randn(64, 256) / 16
            self.linear.weight.copy_(w - w.mean(1, keepdim=True))
            w = torch.randn(16, 16, 3, 3) / 12
            self.conv.weight.copy_(w - w.mean((1, 2, 3), keepdim=True))

    def forward(self, x):
        return self.conv(self.linear(x).reshape(-1, 16, 2, 2))


def _ill_conditioned_input(seed: int) -> torch.Tensor:
    return 3e4 + torch.randn(8, 256, generator=torch.Generator().manual_seed(seed))


def test_float32_rounding_of_an_ill_conditioned_model_is_not_blamed_on_the_lowering():
    """The lowered result differs from eager by more than the check's tolerance, but no more
    from float64 than eager does: the lowering is kept, without a warning."""
    model, x = _IllConditioned().eval(), _ill_conditioned_input(0)
    with torch.no_grad():
        fast = _prepare_without_warnings(model, x)
        assert "nimble::convolution_prepacked" in _lowered_ops(fast)
        x = _ill_conditioned_input(1)
        want, exact = model(x), lowering_fallback.float64_outputs(model, (x,), {})[0]
        got = fast(x)
        scale = exact.abs().max().item()
        assert (want.double() - exact).abs().max().item() > 1e-3 * scale, "not ill-conditioned"
        assert lowering_fallback.difference([got], [want]) is not None, "eager's check passes"
        assert lowering_fallback.within_float32_error(got, want, exact)


def test_an_ill_conditioned_model_whose_lowering_is_wrong_still_falls_back(monkeypatch):
    _inject(monkeypatch, "differ")
    model, x = _IllConditioned().eval(), _ill_conditioned_input(0)
    with torch.no_grad(), pytest.warns(UserWarning, match="CPU lowering failed"):
        fast = nimble.Nimble(model).prepare(x, streams=1)
    assert not _lowered_ops(fast)


def test_the_float64_reference_runs_only_where_eager_differs(monkeypatch):
    def refuse(*args):
        raise AssertionError("float64 reference computed for a lowering that matches eager")

    monkeypatch.setattr(lowering_fallback, "float64_outputs", refuse)
    with torch.no_grad():
        _prepare_without_warnings(_small_net(), torch.randn(2, 3, 16, 16))


def test_within_float32_error_is_relative_to_eagers_own_error():
    exact = torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64)
    eager = (exact + torch.tensor([0.01, 0.0, 0.0], dtype=torch.float64)).float()
    check = lowering_fallback.within_float32_error
    assert check(exact.float() + torch.tensor([0.0, 0.03, 0.0]), eager, exact)  # 3x eager's
    assert not check(exact.float() + torch.tensor([0.0, 0.05, 0.0]), eager, exact)
    assert check(exact.float() + 1e-3, exact.float(), exact)  # the tolerance, where eager is exact
    assert not check(exact.float()[:2], eager, exact)
    assert not check(torch.tensor([float("nan"), -2.0, 0.5]), eager, exact)

"""Per-part fallback of the CPU lowering: where lowering one op breaks a model, prepare keeps
that op as ATen's, the rest stays lowered, and one line warns naming the op. `keep_aten_ops`
(the mechanism) is sound for every op the lowering touches: any one kept as ATen's still
replays equal to eager."""

from __future__ import annotations

import math
import warnings

import pytest
import torch
from torch import nn

import nimble
from nimble import _C
from layout_fuzz import realistic_weights_
from nimble.replay import lowering_fallback, pipeline
from nimble.replay.prepare_options import with_changes
from nimble.testing import assert_matches_eager
from test_lowering_fallback import BrokenReplay


class _Mixed(nn.Module):
    """Every kind of op the lowering and layout plan touch: folded and plain convolutions, a
    residual add and activations fused into them, a pooling, a channel split and concatenation,
    a batch norm left alone, an adaptive pooling, a flatten view and a linear layer."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU())
        self.pool = nn.MaxPool2d(2)
        self.left = nn.Conv2d(8, 8, 3, padding=1)
        self.right = nn.Conv2d(8, 8, 1)
        self.norm = nn.BatchNorm2d(16)
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(3), nn.Flatten(), nn.Linear(16 * 9, 10))

    def forward(self, x):
        y = self.pool(self.stem(x))
        a, b = torch.split(y, 8, dim=1)
        z = torch.cat([torch.relu(self.left(a) + a), self.right(b)], dim=1)
        return self.head(torch.relu(self.norm(z)) * 0.5)


def _model() -> nn.Module:
    torch.manual_seed(0)
    model = realistic_weights_(_Mixed()).eval()
    with torch.no_grad():  # batch norms that do something
        for bn in (model.stem[1], model.norm):
            bn.running_mean.uniform_(-0.5, 0.5)
            bn.running_var.uniform_(0.5, 2.0)
    return model


def _names(fast) -> list[str]:
    return [op["name"] for op in fast.replay.ops()]


def _trace_ops(model, x) -> list[str]:
    """The captured trace's op names, as prepare numbers them."""
    seen = []
    real = pipeline.build_replay

    def build_replay(part, options):
        seen[:] = [str(op.func._schema.name) for op in part.ops]
        return real(part, options)

    pipeline.build_replay = build_replay
    try:
        nimble.Nimble(model).prepare(x, streams=1, lower_for_cpu=False)
    finally:
        pipeline.build_replay = real
    return seen


def _break_when_lowered(monkeypatch, positions: set[int], how: str, builds: list) -> None:
    """Lowered programs misbehave while an op at one of the trace `positions` is lowered
    (not in keep_aten_ops), as a lowering bug confined to those ops would."""
    real = pipeline.build_replay

    def build_replay(part, options):
        builds.append(options)
        broken = options.lower_for_cpu and bool(positions - set(options.keep_aten_ops))
        if broken and how == "build":
            raise RuntimeError("nimble::convolution_prepacked: cannot pack (injected)")
        replay = real(part, options)
        return BrokenReplay(replay, how) if broken else replay

    monkeypatch.setattr(pipeline, "build_replay", build_replay)


@pytest.mark.parametrize("how", ["build", "raise", "differ"])
def test_only_the_op_whose_lowering_breaks_keeps_aten(monkeypatch, how):
    model = _model()
    x = torch.randn(1, 3, 16, 16)
    trace = _trace_ops(model, x)
    convolutions = [i for i, name in enumerate(trace) if name == "aten::convolution"]
    target = convolutions[1]  # `left`: the one with a residual add fused into it
    builds: list = []
    _break_when_lowered(monkeypatch, {target}, how, builds)
    with torch.no_grad():
        with pytest.warns(UserWarning, match="CPU lowering failed") as caught:
            fast = nimble.Nimble(model).prepare(x, streams=1)
        messages = [str(w.message) for w in caught if "lowering failed" in str(w.message)]
        assert len(messages) == 1 and "\n" not in messages[0], messages
        assert f"aten::convolution (op {target} of the trace) keeps ATen's op" in messages[0]
        names = _names(fast)
        # The other three convolutions and the linear layer stay lowered.
        assert names.count("nimble::convolution_prepacked") == len(convolutions) - 1, names
        assert "nimble::linear_prepacked" in names
        assert any(n.startswith("aten::convolution") for n in names), names
        # One round of bisection: the first try, log2(ops) tries, the try that keeps it.
        assert len(builds) <= 2 + math.ceil(math.log2(len(trace))), len(builds)
        for _ in range(2):
            x2 = torch.randn(1, 3, 16, 16)
            assert_matches_eager(fast(x2), model(x2))


def test_two_broken_ops_both_keep_aten(monkeypatch):
    model = _model()
    x = torch.randn(1, 3, 16, 16)
    trace = _trace_ops(model, x)
    convolutions = [i for i, name in enumerate(trace) if name == "aten::convolution"]
    _break_when_lowered(monkeypatch, {convolutions[0], convolutions[2]}, "differ", [])
    with torch.no_grad():
        with pytest.warns(UserWarning, match="CPU lowering failed") as caught:
            fast = nimble.Nimble(model).prepare(x, streams=1)
        messages = [str(w.message) for w in caught if "lowering failed" in str(w.message)]
        assert len(messages) == 1
        for i in (convolutions[0], convolutions[2]):
            assert f"(op {i} of the trace)" in messages[0]
        assert _names(fast).count("nimble::convolution_prepacked") == len(convolutions) - 2
        assert_matches_eager(fast(x), model(x))


def test_more_broken_ops_than_rounds_replays_unlowered(monkeypatch):
    model = _model()
    x = torch.randn(1, 3, 16, 16)
    trace = _trace_ops(model, x)
    convolutions = {i for i, name in enumerate(trace) if name == "aten::convolution"}
    assert len(convolutions) > lowering_fallback.MAX_CULPRITS
    _break_when_lowered(monkeypatch, convolutions, "raise", [])
    with torch.no_grad():
        with pytest.warns(UserWarning, match="replaying it unlowered"):
            fast = nimble.Nimble(model).prepare(x, streams=1)
        assert not [n for n in _names(fast) if n.startswith("nimble::")]
        assert_matches_eager(fast(x), model(x))


def test_any_one_op_kept_as_aten_replays_equal(monkeypatch):
    """The mechanism itself: keeping any single op of the trace as ATen's (a convolution,
    a batch norm, the pooling, split, cat, an elementwise op, the view, the linear layer)
    leaves a program that replays equal to eager, and changes the program where the op was
    one the lowering touched."""
    model = _model()
    x = torch.randn(1, 3, 16, 16)
    trace = _trace_ops(model, x)
    real = pipeline.build_replay
    keep: set[int] = set()

    def build_replay(part, options):
        return real(part, with_changes(options, keep_aten_ops=keep))

    monkeypatch.setattr(pipeline, "build_replay", build_replay)
    with torch.no_grad():
        want = model(x)
        lowered = _names(nimble.Nimble(model).prepare(x, streams=1))
        changed = set()
        for position in range(len(trace)):
            keep.clear()
            keep.add(position)
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                fast = nimble.Nimble(model).prepare(x, streams=1)
            assert_matches_eager(fast(x), want, what=f"{trace[position]} at {position} kept")
            if _names(fast) != lowered:
                changed.add(trace[position])
    for name in ("aten::convolution", "aten::native_batch_norm", "aten::addmm",
                 "aten::max_pool2d_with_indices", "aten::cat"):
        assert any(name == c or name in c for c in changed), (name, sorted(changed))


@pytest.mark.parametrize("culprits", [[637], [0], [999], [12, 700]])
def test_the_bisection_finds_the_breaking_ops_within_its_bound(culprits):
    """build_checked alone, on a 1000-op trace whose lowering breaks while any op of
    `culprits` is lowered: it names exactly those, in about log2(1000) tries a round."""
    trace = [f"aten::op{i}" for i in range(1000)]
    tries = []

    def build(options):
        tries.append(options)
        if options.lower_for_cpu and set(culprits) - set(options.keep_aten_ops):
            raise RuntimeError(f"{trace[culprits[0]]}: broken (injected)")
        return options

    def check(replay):
        return None

    with pytest.warns(UserWarning, match="keep ATen's op|keeps ATen's op") as caught:
        replay = lowering_fallback.build_checked(
            build, with_changes(_C.BuildOptions(), lower_for_cpu=True), check, trace)
    assert replay.keep_aten_ops == set(culprits)
    message = str(caught[0].message)
    for i in culprits:
        assert f"aten::op{i} (op {i} of the trace)" in message
    rounds = len(culprits)
    assert len(tries) <= 1 + rounds * (1 + math.ceil(math.log2(len(trace)))), len(tries)

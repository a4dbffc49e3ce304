"""Ops with several returns (batch norm in training, max pooling with indices, topk, sort)
through the one op-call path, on the CPU backend and on the CPU twin of the CUDA graph,
in inference and in training: every return right on every call. The C++ side
(tests/cpp/runtime/multi_return_op_test.cpp) adds an op whose `.out` kernel replaces an
out argument, the pattern behind the use-after-free seen at the first CUDA prepare; both
suites run under AddressSanitizer in tests/sanitize.sh."""

from __future__ import annotations

import copy

import pytest
import torch

import nimble


class SeveralReturns(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 6, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(6)

    def forward(self, x):
        y = self.bn(self.conv(x))  # native_batch_norm / _native_batch_norm_legit: 3 returns
        pooled, indices = torch.nn.functional.max_pool2d(y, 2, return_indices=True)
        top, where = pooled.flatten(1).topk(4, dim=1)
        ordered, order = y.flatten(2).sort(dim=-1)
        return (top + where.float(), indices.float().mean() + ordered[..., :3].sum(-1)
                + order[..., 0].float())


# ATen's convolutions, so that every return can be compared bit for bit; "cpu-lowered" runs
# the CPU lowering (prepacked kernels: float rounding differs from eager's).
OPTIONS = {"cpu": {"lower_for_cpu": False},
           "cpu-graph": {"_graph_twin": True, "lower_for_cpu": False},
           "cpu-lowered": {}}
MULTI_RETURN_OPS = ("native_batch_norm", "max_pool2d_with_indices", "topk", "sort")


@pytest.mark.parametrize("train", [False, True])
@pytest.mark.parametrize("backend", list(OPTIONS))
def test_every_return_is_right_on_every_call(backend, train):
    torch.manual_seed(0)
    model = SeveralReturns().train(train)
    eager = copy.deepcopy(model)
    fast = nimble.Nimble(model).prepare(torch.randn(2, 3, 8, 8), **OPTIONS[backend])
    names = " ".join(op["captured"] for op in fast.replay.ops())
    assert sum(op in names for op in MULTI_RETURN_OPS) >= 3, names
    for call in range(3):
        x = torch.randn(2, 3, 8, 8)
        with torch.no_grad():
            expected = eager(x)
        got = fast(x)
        exact = backend != "cpu-lowered"
        for g, e in zip(got, expected, strict=True):
            tolerance = 0 if exact or not g.is_floating_point() else 1e-5
            torch.testing.assert_close(g, e, rtol=tolerance, atol=tolerance,
                                       msg=lambda m: f"call {call}: {m}")
    # Running statistics of a batch norm in training mode, from the lowered convolution's
    # result: the same float rounding.
    tolerance = 0 if backend != "cpu-lowered" else 1e-6
    torch.testing.assert_close(model.bn.running_mean, eager.bn.running_mean, rtol=tolerance,
                               atol=tolerance)


@pytest.mark.parametrize("backend", list(OPTIONS))
def test_several_returns_in_forward_and_backward_replays(backend):
    torch.manual_seed(0)
    model = SeveralReturns().train()
    eager = copy.deepcopy(model)
    fast = nimble.Nimble(model).prepare(torch.randn(2, 3, 8, 8), training=True,
                                        **OPTIONS[backend])
    for _ in range(3):
        x = torch.randn(2, 3, 8, 8)
        model.zero_grad(set_to_none=True)
        eager.zero_grad(set_to_none=True)
        sum(o.sum() for o in eager(x)).backward()
        sum(o.sum() for o in fast(x)).backward()
        for (name, p), q in zip(eager.named_parameters(), model.parameters(), strict=True):
            torch.testing.assert_close(q.grad, p.grad, rtol=0, atol=0, msg=name)


def test_ops_with_several_returns_keep_their_functional_overload():
    """A `.out` overload with several returns hands back references into the boxed call's
    destroyed arguments; the builder never picks one (op_call.h, program_builder.cpp)."""
    fast = nimble.Nimble(SeveralReturns().train()).prepare(torch.randn(2, 3, 8, 8))
    for op in fast.replay.ops():
        if op["captured"].split(".")[0].removeprefix("aten::") in MULTI_RETURN_OPS:
            assert op["name"] == op["captured"], op

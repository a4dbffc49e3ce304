"""The user contract: output structures, state and input mutation, output ownership."""

import threading

import numpy as np
import pytest
import torch

import nimble
from nimble.replay.host_reads import HostReadGuard
from nimble.testing import assert_matches_eager


class Structured(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 4)

    def forward(self, x, scale=2.0):
        y = self.lin(x)
        return {"y": y * scale, "pair": (y.relu(), [y.sum(dim=1), x.t()]), "tag": "ok"}


def test_nested_outputs_and_kwargs():
    model = Structured().eval()
    fast = nimble.Nimble(model).prepare(torch.randn(3, 8), {"scale": 3.0})
    x = torch.randn(3, 8)
    with torch.no_grad():
        expected = model(x, scale=3.0)
    got = fast(x, scale=3.0)
    assert got.pop("tag") == expected.pop("tag") == "ok"
    assert isinstance(got["pair"], tuple) and isinstance(got["pair"][1], list)
    torch.testing.assert_close(got, expected)


class CountsCalls(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("calls", torch.zeros(()))
        self.register_buffer("running", torch.zeros(4))

    def forward(self, x):
        self.calls.add_(1)
        self.running.mul_(0.5).add_(x.mean(0))
        return x * self.calls


@pytest.mark.parametrize("streams", [1, "auto"])
def test_buffer_mutation_replays_like_eager(streams):
    eager, replayed = CountsCalls(), CountsCalls()
    fast = nimble.Nimble(replayed).prepare(torch.randn(2, 4), streams=streams)
    # prepare leaves the model as it found it
    assert replayed.calls.item() == 0
    for _ in range(3):
        x = torch.randn(2, 4)
        torch.testing.assert_close(fast(x), eager(x))
    torch.testing.assert_close(replayed.running, eager.running)
    assert replayed.calls.item() == 3


class MutatesInput(torch.nn.Module):
    def forward(self, x):
        x.mul_(2)
        x[:, 0].add_(1)  # through a view
        return x.sum(1)


def test_input_mutation_replays_like_eager():
    fast = nimble.Nimble(MutatesInput()).prepare(torch.randn(3, 4))
    x = torch.randn(3, 4)
    x_eager = x.clone()
    expected = MutatesInput()(x_eager)
    got = fast(x)
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(x, x_eager)


def test_outputs_are_not_overwritten_by_default():
    model = torch.nn.Linear(4, 4).eval()
    fast = nimble.Nimble(model).prepare(torch.randn(2, 4))
    a, b = torch.randn(2, 4), torch.randn(2, 4)
    first = fast(a)
    fast(b)
    with torch.no_grad():
        torch.testing.assert_close(first, model(a))


class ReturnsWeightView(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(4, 4))

    def forward(self, x):
        return x @ self.w, self.w.t()


def test_zero_copy_outputs_are_the_replays_own_memory():
    model = ReturnsWeightView().eval()
    fast = nimble.Nimble(model).prepare(torch.randn(2, 4), copy_outputs=False)
    _, view = fast(torch.randn(2, 4))
    assert view.data_ptr() == model.w.data_ptr()
    # By default the caller gets a copy: writing it leaves the model alone.
    fast = nimble.Nimble(model).prepare(torch.randn(2, 4))
    _, view = fast(torch.randn(2, 4))
    assert view.data_ptr() != model.w.data_ptr()
    before = model.w.detach().clone()
    view.add_(1)
    torch.testing.assert_close(model.w.detach(), before)


def test_outputs_made_by_their_op_are_handed_out_without_a_copy():
    # An op whose result is an output writes no buffer: it makes the result fresh each
    # replay, so the caller owns it with or without copy_outputs.
    model = torch.nn.Linear(4, 4).eval()
    fast = nimble.Nimble(model).prepare(torch.randn(2, 4), copy_outputs=False)
    assert [op["name"] for op in fast.replay.ops()] == ["nimble::linear_prepacked"]
    a, b = torch.randn(2, 4), torch.randn(2, 4)
    first = fast(a)
    second = fast(b)
    assert first.data_ptr() != second.data_ptr()
    with torch.no_grad():
        torch.testing.assert_close(first, model(a))
        torch.testing.assert_close(second, model(b))


def test_random_ops_draw_fresh_numbers():
    class Noisy(torch.nn.Module):
        def forward(self, x):
            return x + torch.rand_like(x)

    fast = nimble.Nimble(Noisy()).prepare(torch.zeros(4))
    x = torch.zeros(4)
    assert not torch.equal(fast(x), fast(x))
    torch.manual_seed(7)
    expected = Noisy()(x)
    torch.manual_seed(7)
    torch.testing.assert_close(fast(x), expected)


def test_prepare_does_not_shift_the_users_random_stream():
    class Noisy(torch.nn.Module):
        def forward(self, x):
            return x + torch.rand_like(x)

    torch.manual_seed(3)
    expected = torch.rand(3)
    torch.manual_seed(3)
    nimble.Nimble(Noisy()).prepare(torch.zeros(4))
    torch.testing.assert_close(torch.rand(3), expected)


class AddsInPlace(torch.nn.Module):
    def forward(self, x, y):
        x.add_(y)
        return (x * 2).sum(0)


def test_inputs_read_in_place_leave_no_trace_between_calls():
    fast = nimble.Nimble(AddsInPlace()).prepare((torch.randn(3, 4), torch.randn(3, 4)))
    a, b = torch.randn(3, 4), torch.randn(3, 4)
    a_eager = a.clone()
    expected = AddsInPlace()(a_eager, b)
    torch.testing.assert_close(fast(a, b), expected)
    torch.testing.assert_close(a, a_eager)  # the write landed in the caller's tensor
    a.fill_(100.0)  # the replay must not still be reading the caller's memory
    c, d = torch.randn(3, 4), torch.randn(3, 4)
    c_eager = c.clone()
    torch.testing.assert_close(fast(c, d), AddsInPlace()(c_eager, d))
    torch.testing.assert_close(c, c_eager)


def test_one_tensor_passed_for_two_inputs():
    fast = nimble.Nimble(AddsInPlace()).prepare((torch.randn(3, 4), torch.randn(3, 4)))
    x = torch.randn(3, 4)
    x_eager = x.clone()
    expected = AddsInPlace()(x_eager, x_eager)
    torch.testing.assert_close(fast(x, x), expected)
    torch.testing.assert_close(x, x_eager)


def test_output_that_views_the_input():
    class Reshapes(torch.nn.Module):
        def forward(self, x):
            return x.view(-1), x.sum()

    fast = nimble.Nimble(Reshapes()).prepare(torch.randn(2, 3))
    x = torch.randn(2, 3)
    flat, total = fast(x)
    torch.testing.assert_close(flat, x.view(-1))
    kept = flat.clone()
    x.zero_()
    fast(torch.randn(2, 3))
    # A copy: neither the caller's memory (zeroed) nor the replay's own (written again).
    assert torch.equal(flat, kept)
    assert flat.untyped_storage().data_ptr() != x.untyped_storage().data_ptr()


class WritesItsState(torch.nn.Module):
    """Writes its parameters and buffers every way a forward can: in place, through a view,
    through `.data`, and by ops whose schemas do not declare the write (a batch norm in
    training inside an eval model, `batch_norm_update_stats`)."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.untouched = torch.nn.Linear(4, 4)
        self.bn = torch.nn.BatchNorm1d(4)
        self.register_buffer("mean", torch.zeros(4))
        self.register_buffer("var", torch.ones(4))

    def forward(self, x):
        self.lin.weight[0].add_(1)
        self.lin.bias.data.mul_(1.5)
        torch.ops.aten.batch_norm_update_stats(x, self.mean, self.var, 0.1)
        return self.untouched(self.bn(self.lin(x)))


def test_prepare_puts_back_every_write_and_copies_only_what_is_written():
    model = WritesItsState().eval()
    model.bn.train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    saved = []
    real_init = nimble.replay.model_snapshot.ModelSnapshot.__init__

    def keep(self, *args, **kwargs):
        real_init(self, *args, **kwargs)
        saved.append(self)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(nimble.replay.model_snapshot.ModelSnapshot, "__init__", keep)
        nimble.Nimble(model).prepare(torch.randn(3, 4))
    for name, value in model.state_dict().items():
        torch.testing.assert_close(value, before[name], rtol=0, atol=0, msg=name)
    # The capture's snapshot copied the written tensors, not the untouched layer's.
    capture_snapshot = saved[0]
    copied = {id(capture_snapshot._layouts[i][0]) for i in capture_snapshot._saved}
    written = [model.lin.weight, model.lin.bias, model.bn.running_mean, model.bn.running_var,
               model.bn.num_batches_tracked, model.mean, model.var]
    assert {id(t) for t in written} <= copied
    assert id(model.untouched.weight) not in copied and id(model.untouched.bias) not in copied


class FailsInForward(torch.nn.Module):
    def forward(self, x):
        raise ValueError("the user's own error")


class SeesTheCollector(torch.nn.Linear):
    """Records whether Python's cycle collector was on each time it ran."""

    def __init__(self):
        super().__init__(4, 4)
        self.collector_on = []

    def forward(self, x):
        import gc

        self.collector_on.append(gc.isenabled())
        return super().forward(x)


@pytest.mark.parametrize("enabled", [True, False])
def test_prepare_pauses_pythons_cycle_collector_and_leaves_it_as_it_found_it(enabled):
    # prepare pauses the collector while it captures (docs/replays.md), and puts it back.
    import gc

    (gc.enable if enabled else gc.disable)()
    try:
        model = SeesTheCollector().eval()
        nimble.Nimble(model).prepare(torch.randn(2, 4))
        assert model.collector_on and not any(model.collector_on)  # paused in every run
        assert gc.isenabled() == enabled
        with pytest.raises(ValueError, match="the user's own error"):
            nimble.Nimble(FailsInForward()).prepare(torch.randn(2, 4))
        assert gc.isenabled() == enabled
    finally:
        gc.enable()


def test_capture_runs_the_path_eager_runs():
    """nn.TransformerEncoderLayer runs one fused op in eval under no_grad, unless a torch
    function mode is active. The capture, always under one, recorded the unfused layer, which
    calls the layer's inner modules, so a global forward hook on one of them (that eager's
    fused op never calls) was in the trace: the replay was off by the hook's change. With a
    global hook registered the capture now runs the fused op as eager does."""
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, batch_first=True)
    model = torch.nn.Sequential(layer, torch.nn.Linear(16, 4)).eval()
    x = torch.randn(2, 5, 16)
    inner = layer.linear1
    handle = torch.nn.modules.module.register_module_forward_hook(
        lambda module, args, out: out * 1.5 if module is inner else out)
    try:
        with torch.no_grad():
            expected = model(x)
        fast = nimble.Nimble(model).prepare(x)
        assert_matches_eager(fast(x), expected)
        assert "aten::_transformer_encoder_layer_fwd" in [op["name"] for op in fast.replay.ops()]
    finally:
        handle.remove()


def test_a_hook_on_a_fused_layers_inner_module_is_skipped_as_eager_skips_it():
    """The same with a hook of the inner module's own: eager's fused op never calls it either,
    so the capture must not take the unfused path that would."""
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, batch_first=True)
    model = torch.nn.Sequential(layer, torch.nn.Linear(16, 4)).eval()
    x = torch.randn(2, 5, 16)
    layer.linear1.register_forward_hook(lambda module, args, out: out * 1.5)
    with torch.no_grad():
        expected = model(x)
    fast = nimble.Nimble(model).prepare(x)
    assert_matches_eager(fast(x), expected)


class ScaledLinear(torch.nn.Linear):
    """A subclass with a forward of its own, as a user's adapter layer might be."""

    def forward(self, x):
        return super().forward(x) * 1.5


@pytest.mark.parametrize("how", ["assigned to the instance", "a subclass's"])
def test_an_inner_module_with_its_own_forward_is_skipped_as_eager_skips_it(how):
    """eager's fused op reads the inner modules' weights and never calls their forward, so
    the capture must not take the unfused path, which calls it (the model-change fuzz's
    encoder at sequence 210: forwards assigned to a layer's attention and linear layers, the
    replay off by 0.26 of the scale, on a fresh prepare too)."""
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, batch_first=True)
    model = torch.nn.Sequential(layer, torch.nn.Linear(16, 4)).eval()
    x = torch.randn(2, 5, 16)
    if how == "a subclass's":
        scaled = ScaledLinear(16, 32)
        scaled.load_state_dict(layer.linear1.state_dict())
        layer.linear1 = scaled
    else:
        original = layer.self_attn.out_proj.forward
        layer.self_attn.out_proj.forward = lambda x: original(x) * 1.5
    with torch.no_grad():
        expected = model(x)
    fast = nimble.Nimble(model).prepare(x)
    assert_matches_eager(fast(x), expected)
    assert "aten::_transformer_encoder_layer_fwd" in [op["name"] for op in fast.replay.ops()]


def test_host_reads_are_refused_on_the_capturing_thread_only():
    """The capture wraps Tensor.tolist/numpy/__array__ while it runs and puts them back.
    (np.asarray calls __array__, which calls numpy: both are seen.)"""
    refused = []
    inherited = "tolist" not in vars(torch.Tensor)
    t = torch.arange(3.0)
    with HostReadGuard(refused.append), HostReadGuard(refused.append):
        t.tolist(), np.asarray(t)
        other = threading.Thread(target=lambda: t.numpy())
        other.start(), other.join()
    assert refused == ["tolist", "__array__", "numpy"]
    assert ("tolist" not in vars(torch.Tensor)) == inherited
    t.tolist()
    assert len(refused) == 3

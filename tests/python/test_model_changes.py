"""The model may change between calls: every change is followed, prepared again or refused,
never replayed stale (docs: "When the model changes after prepare"). One test per kind of
change, on one stream and on several, for inference and training."""

import copy
import io
import pickle
import warnings

import pytest
import torch
import torch.nn.utils.parametrize as parametrize
import torch.nn.utils.prune as prune

import nimble
from nimble.testing import assert_matches_eager
from nimble.replay.capture import MAX_RECORDED_RUNS


class Net(torch.nn.Module):
    """Convolutions, batch norm, two branches and a linear head: every kind of state."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.left = torch.nn.Conv2d(8, 8, 1)
        self.right = torch.nn.Conv2d(8, 8, 3, padding=1)
        self.fc = torch.nn.Linear(8, 5)

    def forward(self, x):
        y = torch.relu(self.bn(self.conv(x)))
        y = self.left(y) + self.right(y)
        return self.fc(y.mean((2, 3)))


def _randomize(model):
    torch.manual_seed(0)
    with torch.no_grad():
        for name, t in list(model.named_parameters()) + list(model.named_buffers()):
            if t.is_floating_point():
                t.copy_(torch.rand_like(t) + 0.5 if name.endswith("var") else torch.randn_like(t))
    return model


# Seeded: the input must not depend on which test files were imported before this one.
X = torch.randn(2, 3, 8, 8, generator=torch.Generator().manual_seed(0))


def _prepared(streams=1, **options):
    model = _randomize(Net()).eval()
    return model, nimble.Nimble(model).prepare(X, streams=streams, **options)


def _check(fast, model, *, warns):
    """The replay equals eager after the change; `warns`: a part of the one warning that says
    the model was prepared again, or None where the change is followed silently."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = fast(X)
    with torch.no_grad():
        want = model(X)
    # Float rounding is relative to the output's scale: the lowered replay sums in another order
    # (folded batch norm, packed kernels), and an output near zero amid values near 100 differs
    # by ~1e-5 however correct. A stale replay differs by the scale itself.
    assert_matches_eager(got, want, tolerance=1e-5)
    messages = [str(w.message) for w in caught if "preparing again" in str(w.message)]
    if warns is None:
        assert messages == []
    else:
        assert len(messages) == 1 and warns in messages[0], messages
    return got


def _set_weight_data(m):
    m.fc.weight.data = torch.randn_like(m.fc.weight)


def _set_storage(m):
    with torch.no_grad():
        m.right.weight.set_(torch.randn_like(m.right.weight))


# (name, change, part of the warning, or None where the replay follows the change silently)
CHANGES = [
    ("in-place write", lambda m: torch.no_grad()(m.fc.weight.mul_)(2), None),
    ("load_state_dict", lambda m: m.load_state_dict({k: v * 2 for k, v in m.state_dict().items()}), None),
    (".data = same layout", _set_weight_data, None),
    ("set_", _set_storage, None),
    ("channels_last", lambda m: m.to(memory_format=torch.channels_last), "conv.weight changed since prepare"),
    ("new Parameter", lambda m: setattr(m.fc, "weight", torch.nn.Parameter(torch.randn(5, 8))), "fc.weight replaced"),
    ("new submodule", lambda m: setattr(m, "left", torch.nn.Conv2d(8, 8, 1)), "left replaced"),
    ("new buffer", lambda m: setattr(m.bn, "running_mean", torch.randn(8)), "bn.running_mean replaced"),
    ("load_state_dict assign", lambda m: m.load_state_dict(
        {k: v + 1 for k, v in m.state_dict().items()}, assign=True), "replaced"),
    ("forward hook", lambda m: m.fc.register_forward_hook(lambda mod, i, o: o * 2), "fc: forward hook #"),
    ("forward pre-hook", lambda m: m.left.register_forward_pre_hook(lambda mod, i: (i[0] * 3,)),
     "left: forward pre-hook #"),
    ("global hook", lambda m: _global_hook(), "global forward hook #"),
    ("parametrization", lambda m: parametrize.register_parametrization(m.fc, "weight", _Double()), "fc."),
    ("pruning", lambda m: prune.l1_unstructured(m.right, "weight", 0.5), "right.weight"),
    ("submodule to train mode", lambda m: m.bn.train(), "bn.training (train/eval mode) changed"),
    ("forward replaced", lambda m: setattr(m.fc, "forward", lambda x: x[:, :5] * 2), "fc.forward added"),
]

_global_handles = []


def _global_hook():
    _global_handles.append(
        torch.nn.modules.module.register_module_forward_hook(lambda mod, i, o: o)
    )


@pytest.fixture(autouse=True)
def _no_global_hooks_left():
    yield
    while _global_handles:
        _global_handles.pop().remove()


class _Double(torch.nn.Module):
    def forward(self, w):
        return w * 2


@pytest.mark.parametrize("streams", [1, 3])
@pytest.mark.parametrize("name,change,warns", CHANGES, ids=[c[0] for c in CHANGES])
def test_inference_follows_or_prepares_again(name, change, warns, streams):
    model, fast = _prepared(streams)
    fast(X)
    change(model)
    _check(fast, model, warns=warns)
    # The program made after the change replays equal to eager too, without a warning.
    _check(fast, model, warns=None)


@pytest.mark.parametrize(
    "name,change,warns", [c for c in CHANGES if c[2] is not None], ids=[c[0] for c in CHANGES if c[2] is not None]
)
def test_on_change_error_raises_before_anything_runs(name, change, warns):
    model, fast = _prepared(on_change="error")
    change(model)
    after_change = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(nimble.StaleModelError, match="changed since prepare") as info:
        fast(X)
    assert warns.split(" #")[0] in str(info.value)
    # Nothing ran: the model is as the change left it (a batch norm in train mode would
    # have moved its running statistics).
    now = model.state_dict()
    assert now.keys() == after_change.keys()
    for k, v in now.items():
        torch.testing.assert_close(v, after_change[k], rtol=0, atol=0)


def test_a_change_after_preparing_again_and_before_the_replay_prepares_again(monkeypatch):
    """A change made between a reprepare's watch and its replay (a global hook removed by a
    finalizer that the cycle collector, paused during the capture, runs right after it) is
    prepared again too: with on_change="reprepare" a call never raises StaleModelError."""
    hook = torch.nn.modules.module.register_module_forward_hook(lambda mod, i, o: o)
    _global_handles.append(hook)  # someone else's, registered before prepare
    model, fast = _prepared()
    model.fc = torch.nn.Linear(8, 5)
    watch = nimble.replay.model_watch.watch

    def watch_then_remove(*args, **kwargs):
        w = watch(*args, **kwargs)
        hook.remove()
        return w

    monkeypatch.setattr(nimble.replay.model_watch, "watch", watch_then_remove)
    with pytest.warns(UserWarning) as caught:
        got = fast(X)
    messages = [str(w.message) for w in caught if "preparing again" in str(w.message)]
    assert len(messages) == 2 and "fc replaced" in messages[0], messages
    assert "global forward hook #" in messages[1] and "removed" in messages[1], messages
    with torch.no_grad():
        assert_matches_eager(got, model(X), tolerance=1e-5)


def test_deleted_parameter_prepares_again_and_eager_raises_the_same():
    model, fast = _prepared()
    del model.fc.bias
    with pytest.raises(AttributeError, match="bias"):
        model(X)
    with pytest.warns(UserWarning, match="fc.bias removed"), pytest.raises(AttributeError, match="bias"):
        fast(X)


def test_dtype_conversion_is_refused_or_fails_as_eager_does():
    model, fast = _prepared(on_change="error")
    model.double()
    with pytest.raises(nimble.StaleModelError, match=r"conv.weight changed since prepare: it was float32 .* it is float64"):
        fast(X)
    model, fast = _prepared()
    model.double()
    with pytest.raises(RuntimeError, match="should be the same"):
        model(X)
    with pytest.warns(UserWarning, match="changed since prepare"), pytest.raises(RuntimeError, match="should be the same"):
        fast(X)


def test_moved_storage_is_followed_without_preparing_again():
    model, fast = _prepared(streams=2)
    program = fast.replay
    # The linear layer's weight is read through a view computed at prepare (its transpose).
    _set_weight_data(model)
    _check(fast, model, warns=None)
    assert fast.replay is program
    # A batch-norm folded at prepare is recomputed from the moved storage as well.
    model2, fast2 = _prepared(fold_batchnorm=True)
    model2.bn.running_var.data = torch.rand(8) + 2
    _check(fast2, model2, warns=None)


def test_storages_shared_after_prepare_are_followed_where_nothing_is_written():
    model, fast = _prepared()
    model.right.weight.data = model.right.weight.data  # the same storage again
    model.left.bias.data = model.right.bias.data  # two parameters share one storage now
    _check(fast, model, warns=None)


def test_reprepare_keeps_the_prepare_options():
    model, fast = _prepared(streams=2, copy_outputs=False, fold_batchnorm=True, lower_for_cpu=False)
    model.fc = torch.nn.Linear(8, 5)
    _check(fast, model, warns="fc replaced")
    assert fast.replay.num_streams == 2
    assert fast._options.fold_batchnorm and not fast._options.copy_outputs
    assert not fast._options.lower_for_cpu


def test_paper_mode_training_prepares_again_after_a_parameter_is_replaced():
    model = _randomize(Net()).train()
    fast = nimble.Nimble(model).prepare(X, training=True)
    fast(X).sum().backward()
    model.fc = torch.nn.Linear(8, 5)
    model.zero_grad(set_to_none=True)
    reference = copy.deepcopy(model)
    with pytest.warns(UserWarning, match="fc replaced"):
        out = fast(X)
    out.sum().backward()
    reference(X).sum().backward()
    named = dict(reference.named_parameters())
    assert named.keys() == {n for n, _ in model.named_parameters()}
    for n, p in model.named_parameters():
        torch.testing.assert_close(p.grad, named[n].grad, rtol=1e-4, atol=1e-5, msg=n)


def test_paper_mode_training_follows_a_moved_weight():
    model = _randomize(Net()).train()
    fast = nimble.Nimble(model).prepare(X, training=True, streams=2)
    _set_weight_data(model)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # followed: no preparing again
        got = fast(X)
    assert_matches_eager(got, model(X))


@pytest.mark.parametrize("streams", [1, 2])
def test_whole_step_prepares_again_after_a_hook_and_refuses_a_stale_optimizer(streams):
    torch.manual_seed(0)
    model = Net().train()  # torch's initialisation: a few steps stay well conditioned
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    y = torch.randn(2, 5)
    loss_fn = torch.nn.functional.mse_loss
    fast = nimble.Nimble(model).prepare(
        X, training=True, loss_fn=loss_fn, optimizer=optimizer, example_targets=y, streams=streams
    )
    fast.step(X, y)
    fast.step(X, y)
    handle = model.left.register_forward_hook(lambda mod, i, o: o * 0.5)
    reference = copy.deepcopy(model)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.01, momentum=0.9)
    ref_opt.load_state_dict(copy.deepcopy(optimizer.state_dict()))
    with pytest.warns(UserWarning, match="left: forward hook #"):
        loss = fast.step(X, y)
    ref_opt.zero_grad()
    want = loss_fn(reference(X), y)
    want.backward()
    ref_opt.step()
    assert_matches_eager(loss, want.detach(), tolerance=1e-5)
    for (n, p), q in zip(model.named_parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-6, msg=n)
    handle.remove()
    # A new head whose parameters the optimizer does not update: refused, not replayed.
    model.fc = torch.nn.Linear(8, 5)
    with pytest.warns(UserWarning, match="preparing again"), pytest.raises(ValueError, match="not parameters of the wrapped module"):
        fast.step(X, y)


class Counter(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.calls = 0
        self.seen = []

    def forward(self, x):
        self.calls += 1
        self.seen.append(1)
        return self.lin(x)


def _log_hook(module, inputs, output):
    return None


def test_side_effects_are_named_at_prepare():
    model = Counter().eval()
    model.lin.register_forward_hook(_log_hook)
    with pytest.warns(UserWarning) as caught:
        nimble.Nimble(model).prepare(torch.randn(2, 4))
    text = " ".join(str(w.message) for w in caught)
    assert "lin: forward hook test_model_changes._log_hook" in text
    assert "calls" in text and "seen" in text


def test_side_effects_error_refuses_and_keeps_the_previous_program():
    model = Counter().eval()
    fast = nimble.Nimble(model)
    with pytest.raises(nimble.SideEffectError, match="calls"):
        fast.prepare(torch.randn(2, 4), side_effects="error")
    with pytest.raises(nimble.NotPreparedError, match="before prepare"):
        fast(torch.randn(2, 4))


def test_a_model_without_side_effects_prepares_silently():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        nimble.Nimble(Net().eval()).prepare(X)


class SettlesLate(torch.nn.Module):
    """Takes another branch on each of its first `late` calls."""

    def __init__(self, late):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.late = late
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        if self.calls <= self.late:
            return self.lin(x) * self.calls
        return self.lin(x)


def test_warm_up_is_proven_by_a_second_recorded_run():
    x = torch.randn(2, 4)
    model = SettlesLate(late=2).eval()  # the warm-up and the first recorded run differ
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fast = nimble.Nimble(model).prepare(x)
    with torch.no_grad():
        assert_matches_eager(fast(x), model(x), tolerance=1e-5)


def test_a_model_that_never_settles_is_refused_naming_the_op():
    model = SettlesLate(late=10**6).eval()
    with pytest.raises(nimble.NotStaticError, match=r"did not give the same trace twice.*aten.mul.Tensor.*test_model_changes.py:\d+"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            nimble.Nimble(model).prepare(torch.randn(2, 4))
    assert model.calls == MAX_RECORDED_RUNS


def test_deepcopy_is_an_independent_replay():
    # ATen's convolutions: lowered, the two branches fuse into one chain (a residual post-op).
    model, fast = _prepared(streams=2, lower_for_cpu=False)
    clone = copy.deepcopy(fast)
    assert clone.module is not model
    assert_matches_eager(clone(X), fast(X), tolerance=1e-5)
    with torch.no_grad():
        clone.module.fc.weight.mul_(0)
    assert_matches_eager(fast(X), model(X), tolerance=1e-5)
    assert_matches_eager(clone(X), clone.module(X), tolerance=1e-5)
    assert clone.replay.num_streams == 2


def test_deepcopy_of_a_whole_step_is_refused_and_save_is_refused():
    model = Net().train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    fast = nimble.Nimble(model).prepare(
        X, training=True, loss_fn=lambda o, t: (o - t).pow(2).mean(), optimizer=optimizer,
        example_targets=torch.randn(2, 5),
    )
    with pytest.raises(TypeError, match="make an optimizer for the copy"):
        copy.deepcopy(fast)
    with pytest.raises(TypeError, match="Save the model"):
        torch.save(fast, io.BytesIO())
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(fast)
    # Still usable after both refusals.
    fast.step(X, torch.randn(2, 5))

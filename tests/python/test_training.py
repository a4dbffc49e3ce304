"""Training replays against eager PyTorch: 20-step parity, training semantics, errors.

No tolerances. A replay calls the very kernels eager calls, on the same data, in the same
order; `.out` overloads share the functional overloads' kernels. What can change a float
result is the number of intra-op threads a kernel runs with (it changes the order of the
reductions in convolution and batch-norm backward): one stream uses the caller's count, as
eager does; with N streams each kernel gets cores / N threads, so the eager reference runs
with that count too. Training is then expected to be bit-identical to eager over all 20
steps, and is checked exactly: any difference is a bug (a wrong scalar, a missed
dependency, an RNG call out of order).
"""

from __future__ import annotations

import contextlib
import copy
import os
import warnings

import pytest
import torch
import torchvision

import nimble
from graph_backends import assert_optimizer_states_alike
from nimble.errors import NotPreparedError

STEPS = 20


class TransformerClassifier(torch.nn.Module):
    """A small Transformer-encoder classifier (with dropout, so RNG order matters)."""

    def __init__(self, vocab=100, dim=32, classes=10):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, dim)
        layer = torch.nn.TransformerEncoderLayer(dim, 4, 64, dropout=0.1, batch_first=True)
        self.encoder = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = torch.nn.Linear(dim, classes)

    def forward(self, tokens):
        return self.head(self.encoder(self.embed(tokens)).mean(1))


def _resnet18():
    return torchvision.models.resnet18(num_classes=10), lambda b: torch.randn(b, 3, 32, 32)


def _mobilenet_v2():
    return torchvision.models.mobilenet_v2(num_classes=10), lambda b: torch.randn(b, 3, 32, 32)


def _transformer():
    return TransformerClassifier(), lambda b: torch.randint(0, 100, (b, 12))


MODELS = {"resnet18": _resnet18, "mobilenet_v2": _mobilenet_v2, "transformer": _transformer}
OPTIMIZERS = {
    "sgd-momentum": lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, weight_decay=1e-4),
    "sgd-momentum-foreach": lambda p: torch.optim.SGD(
        p, lr=0.05, momentum=0.9, dampening=0.1, nesterov=False, foreach=True
    ),
    "sgd-nesterov": lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, nesterov=True),
    "adam": lambda p: torch.optim.Adam(p, lr=1e-3),
    "adam-foreach": lambda p: torch.optim.Adam(p, lr=1e-3, weight_decay=1e-4, foreach=True),
    "adamw": lambda p: torch.optim.AdamW(p, lr=1e-3, weight_decay=1e-2),
    "adamw-foreach-amsgrad": lambda p: torch.optim.AdamW(p, lr=1e-3, amsgrad=True, foreach=True),
}


def _assert_same(a, b, what: str):
    torch.testing.assert_close(a, b, rtol=0, atol=0, msg=lambda m: f"{what}: {m}")


@contextlib.contextmanager
def _eager_threads_like(streams: int):
    """Eager with the intra-op threads each of `streams` CPU streams gets."""
    saved = torch.get_num_threads()
    if streams > 1:
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // streams))
    try:
        yield
    finally:
        torch.set_num_threads(saved)


def _assert_models_equal(eager, replayed):
    a, b = eager.state_dict(), replayed.state_dict()
    assert list(a) == list(b), "the models' state entries differ"
    for name in a:
        _assert_same(b[name], a[name], name)


def _assert_optimizers_equal(eager_opt, replayed_opt):
    assert_optimizer_states_alike(eager_opt, replayed_opt, _assert_same)


def _pair(model_name, optimizer_name, seed=0):
    torch.manual_seed(seed)
    model, make_input = MODELS[model_name]()
    model.train()
    twin = copy.deepcopy(model)
    make = OPTIMIZERS[optimizer_name]
    return model, make(model.parameters()), twin, make(twin.parameters()), make_input


def _batches(make_input, batch, steps, seed=1):
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    return [(make_input(batch), torch.randint(0, 10, (batch,), generator=g)) for _ in range(steps)]


def _whole_step_parity(model_name, optimizer_name, streams=1, batch=16, scheduler=False):
    eager, eager_opt, twin, twin_opt, make_input = _pair(model_name, optimizer_name)
    loss_fn = torch.nn.CrossEntropyLoss()
    data = _batches(make_input, batch, STEPS)
    fast = nimble.Nimble(twin).prepare(
        data[0][0],
        training=True,
        loss_fn=loss_fn,
        optimizer=twin_opt,
        example_targets=data[0][1],
        streams=streams,
    )
    assert fast.schedule["physical_streams"] == streams
    schedulers = []
    if scheduler:
        schedulers = [
            torch.optim.lr_scheduler.StepLR(o, step_size=3, gamma=0.5)
            for o in (eager_opt, twin_opt)
        ]
    for step, (x, y) in enumerate(data):
        # Both start the step from the same generator state (dropout masks).
        torch.manual_seed(1000 + step)
        # nimble's first step runs eagerly (it creates the optimizer state), on the caller's threads
        with _eager_threads_like(streams if step > 0 else 1):
            eager_opt.zero_grad()
            expected = loss_fn(eager(x), y)
            expected.backward()
            eager_opt.step()
        torch.manual_seed(1000 + step)
        got = fast.step(x, y)
        _assert_same(got, expected.detach(), f"loss at step {step}")
        for s in schedulers:
            s.step()
    _assert_models_equal(eager, twin)
    _assert_optimizers_equal(eager_opt, twin_opt)
    for p, q in zip(eager.parameters(), twin.parameters(), strict=True):
        _assert_same(q.grad, p.grad, "grad")


@pytest.mark.parametrize("model_name", list(MODELS))
@pytest.mark.parametrize("optimizer_name", ["sgd-momentum", "adam"])
def test_whole_step_matches_eager_for_20_steps(model_name, optimizer_name):
    _whole_step_parity(model_name, optimizer_name)


@pytest.mark.parametrize(
    "optimizer_name",
    ["sgd-momentum-foreach", "sgd-nesterov", "adam-foreach", "adamw", "adamw-foreach-amsgrad"],
)
def test_whole_step_optimizer_variants(optimizer_name):
    _whole_step_parity("transformer", optimizer_name)


def test_learning_rate_changes_take_effect():
    _whole_step_parity("transformer", "adam", scheduler=True)
    _whole_step_parity("resnet18", "sgd-momentum", scheduler=True, batch=4)


def test_whole_step_on_two_streams():
    _whole_step_parity("resnet18", "sgd-momentum", streams=2, batch=4)


@pytest.mark.parametrize("model_name, optimizer_name, streams", [
    ("transformer", "adamw", 3), ("mobilenet_v2", "sgd-nesterov", 2)])
def test_whole_step_on_more_streams_and_models(model_name, optimizer_name, streams):
    """Dropout's generator calls, attention's branches and depthwise convolutions spread
    over streams, with Adam's and Nesterov's updates."""
    _whole_step_parity(model_name, optimizer_name, streams=streams, batch=4)


def test_whole_step_with_optimizer_state_from_earlier_eager_steps():
    eager, eager_opt, twin, twin_opt, make_input = _pair("transformer", "adam")
    loss_fn = torch.nn.CrossEntropyLoss()
    data = _batches(make_input, 8, 6)
    for step, (x, y) in enumerate(data[:3]):
        for model, opt in ((eager, eager_opt), (twin, twin_opt)):
            torch.manual_seed(step)  # the same dropout masks for both
            opt.zero_grad()
            loss_fn(model(x), y).backward()
            opt.step()
    fast = nimble.Nimble(twin).prepare(
        data[0][0], training=True, loss_fn=loss_fn, optimizer=twin_opt, example_targets=data[0][1]
    )
    _assert_optimizers_equal(eager_opt, twin_opt)  # prepare changed nothing
    for x, y in data[3:]:
        state = torch.get_rng_state()
        eager_opt.zero_grad()
        loss_fn(eager(x), y).backward()
        eager_opt.step()
        torch.set_rng_state(state)
        fast.step(x, y)
    _assert_models_equal(eager, twin)
    _assert_optimizers_equal(eager_opt, twin_opt)


# -- the paper's mode: forward and backward replays, eager optimizer ---------------------


def _forward_backward_parity(model_name, streams=1, batch=16, accumulate=False):
    eager, eager_opt, twin, twin_opt, make_input = _pair(model_name, "sgd-momentum")
    loss_fn = torch.nn.CrossEntropyLoss()
    data = _batches(make_input, batch, STEPS)
    fast = nimble.Nimble(twin).prepare(data[0][0], training=True, streams=streams)
    assert fast.schedule["physical_streams"] == streams
    for step, (x, y) in enumerate(data):
        for model, opt, threads in ((eager, eager_opt, streams), (fast, twin_opt, 1)):
            with _eager_threads_like(threads):
                torch.manual_seed(step)
                if not accumulate or step % 2 == 0:
                    opt.zero_grad()
                out = model(x)
                assert out.requires_grad
                loss_fn(out, y).backward()
                if not accumulate or step % 2 == 1:
                    opt.step()
        for p, q in zip(eager.parameters(), twin.parameters(), strict=True):
            _assert_same(q.grad, p.grad, f"grad at step {step}")
    _assert_models_equal(eager, twin)
    _assert_optimizers_equal(eager_opt, twin_opt)


@pytest.mark.parametrize("model_name", list(MODELS))
def test_forward_backward_matches_eager_for_20_steps(model_name):
    _forward_backward_parity(model_name)


def test_forward_backward_accumulates_gradients_like_eager():
    _forward_backward_parity("transformer", accumulate=True, batch=8)


def test_forward_backward_on_two_streams():
    _forward_backward_parity("resnet18", streams=2, batch=4)


def test_forward_backward_of_a_transformer_on_three_streams():
    _forward_backward_parity("transformer", streams=3, batch=4)


def test_backward_of_an_older_forward_is_refused():
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 1))
    fast = nimble.Nimble(model).prepare(torch.randn(3, 4), training=True)
    first = fast(torch.randn(3, 4)).sum()
    fast(torch.randn(3, 4))
    with pytest.raises(NotPreparedError, match="older forward"):
        first.backward()


def test_dropout_draws_fresh_masks_from_torchs_generator():
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.Dropout(0.5))
    fast = nimble.Nimble(model).prepare(torch.randn(4, 16), training=True)
    x = torch.randn(4, 16)
    torch.manual_seed(7)
    a, b = fast(x), fast(x)
    assert not torch.equal(a, b)  # a new mask every call
    torch.manual_seed(7)
    torch.testing.assert_close(a, model(x), rtol=0, atol=0)


# -- errors: clear, and nothing changed ---------------------------------------------------


def _snapshot(model, opt):
    return copy.deepcopy(model.state_dict()), copy.deepcopy(opt.state_dict())


def _assert_untouched(model, opt, snapshot):
    state, opt_state = snapshot
    torch.testing.assert_close(model.state_dict(), state, rtol=0, atol=0)
    torch.testing.assert_close(opt.state_dict(), opt_state, rtol=0, atol=0)


def _prepared_step(optimizer_name="sgd-momentum", on_change="reprepare"):
    model, _ = _transformer()
    opt = OPTIMIZERS[optimizer_name](model.parameters())
    x, y = torch.randint(0, 100, (4, 12)), torch.randint(0, 10, (4,))
    fast = nimble.Nimble(model).prepare(
        x, training=True, loss_fn=torch.nn.CrossEntropyLoss(), optimizer=opt, example_targets=y,
        on_change=on_change,
    )
    fast.step(x, y)
    fast.step(x, y)  # the first step runs eagerly; this one replays
    return model, opt, fast, x, y


@pytest.mark.parametrize(
    "targets, match",
    [
        (
            torch.randint(0, 10, (5,)),
            r"targets\[0\]: expected Tensor\[4, int64, cpu\].*got Tensor\[5, int64",
        ),
        (torch.zeros(4), r"targets\[0\]: expected Tensor\[4, int64, cpu\].*got Tensor\[4, float32"),
    ],
)
def test_targets_of_the_wrong_shape_or_dtype(targets, match):
    model, opt, fast, x, _ = _prepared_step()
    snapshot = _snapshot(model, opt)
    with pytest.raises(ValueError, match=match):
        fast.step(x, targets)
    _assert_untouched(model, opt, snapshot)


def test_replaced_parameters_are_refused():
    model, opt, fast, x, y = _prepared_step(on_change="error")
    model.head = torch.nn.Linear(32, 10)
    snapshot = _snapshot(model, opt)
    with pytest.raises(nimble.StaleModelError, match="head replaced"):
        fast.step(x, y)
    _assert_untouched(model, opt, snapshot)


@pytest.mark.parametrize("mode", ["whole step", "paper"])
def test_a_parameter_frozen_or_unfrozen_after_prepare_is_refused(mode):
    """Freezing changes no module dictionary (the model watch sees none): each call compares
    the parameters' requires_grad with prepare's, without walking the module tree."""
    model, opt, fast, x, y = _prepared_step(on_change="error")
    if mode == "paper":
        fast = nimble.Nimble(model).prepare(x, training=True, on_change="error")
    first = next(model.parameters())
    for flag in (False, True):
        first.requires_grad_(flag)
        call = (lambda: fast.step(x, y)) if mode == "whole step" else (lambda: fast(x))
        if flag:
            call()  # as at prepare again
        else:
            with pytest.raises(nimble.StaleModelError, match=r"replaced, added, removed or \(un\)frozen"):
                call()


def test_changed_parameter_groups_are_refused():
    model, opt, fast, x, y = _prepared_step("adam", on_change="error")
    extra = torch.nn.Parameter(torch.zeros(3))
    opt.add_param_group({"params": [extra]})
    snapshot = _snapshot(model, opt)
    with pytest.raises(nimble.StaleModelError, match="optimizer changed since prepare: its parameter groups"):
        fast.step(x, y)
    _assert_untouched(model, opt, snapshot)


def test_a_structural_optimizer_change_is_refused():
    model, opt, fast, x, y = _prepared_step("adam", on_change="error")
    opt.param_groups[0]["amsgrad"] = True
    with pytest.raises(nimble.StaleModelError, match="decides which update runs"):
        fast.step(x, y)


def test_a_loss_that_is_not_a_scalar_is_refused_at_prepare():
    model, _ = _transformer()
    opt = torch.optim.Adam(model.parameters())
    snapshot = _snapshot(model, opt)
    with pytest.raises(ValueError, match="scalar"):
        nimble.Nimble(model).prepare(
            torch.randint(0, 100, (4, 12)),
            training=True,
            optimizer=opt,
            loss_fn=torch.nn.CrossEntropyLoss(reduction="none"),
            example_targets=torch.randint(0, 10, (4,)),
        )
    _assert_untouched(model, opt, snapshot)
    assert all(p.grad is None for p in model.parameters())


def test_switching_train_eval_after_prepare_is_refused():
    model, opt, fast, x, y = _prepared_step(on_change="error")
    model.eval()
    with pytest.raises(nimble.StaleModelError, match=r"training \(train/eval mode\) changed"):
        fast.step(x, y)


def test_an_unsupported_optimizer_is_refused():
    model, _ = _transformer()
    opt = torch.optim.RMSprop(model.parameters())
    with pytest.raises(nimble.UnsupportedOpError, match="SGD, Adam and AdamW"):
        nimble.Nimble(model).prepare(
            torch.randint(0, 100, (4, 12)),
            training=True,
            optimizer=opt,
            loss_fn=torch.nn.CrossEntropyLoss(),
            example_targets=torch.randint(0, 10, (4,)),
        )


def test_step_needs_the_whole_step_mode():
    model = torch.nn.Linear(4, 2)
    fast = nimble.Nimble(model).prepare(torch.randn(3, 4), training=True)
    with pytest.raises(NotPreparedError, match="step"):
        fast.step(torch.randn(3, 4), torch.zeros(3))


def test_introspection_of_a_training_replay(tmp_path):
    model, opt, fast, x, y = _prepared_step("adam")
    snapshot = _snapshot(model, opt)
    fast.trace(str(tmp_path / "step.json"))
    fast.to_dot(str(tmp_path / "step.dot"))
    _assert_untouched(model, opt, snapshot)  # the timed replay was a real step: undone
    assert fast.schedule["ops"] and (tmp_path / "step.json").stat().st_size > 0


def test_gradients_for_inputs_that_require_grad():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    example = torch.randn(3, 4, requires_grad=True)
    fast = nimble.Nimble(model).prepare(example, training=True)
    x = torch.randn(3, 4, requires_grad=True)
    fast(x).sum().backward()
    x_eager = x.detach().clone().requires_grad_()
    model(x_eager).sum().backward()
    torch.testing.assert_close(x.grad, x_eager.grad, rtol=0, atol=0)
    other = nimble.Nimble(model).prepare(torch.randn(3, 4), training=True)
    with pytest.raises(NotPreparedError, match="requires grad"):
        other(torch.randn(3, 4, requires_grad=True))


@pytest.mark.parametrize(
    "name", ["squeezenet1_1", "efficientnet_b0", "mobilenet_v3_small", "regnet_y_400mf"]
)
def test_whole_step_on_more_architectures(name):
    """Stochastic depth (efficientnet), squeeze-excitation, grouped convs, hardswish."""
    from nimble.zoo import build

    model, x = build("torchvision:" + name, batch=4, image_size=32, num_classes=10)
    model.train()
    twin = copy.deepcopy(model)
    y = torch.randint(0, 10, (4,))
    loss_fn = torch.nn.CrossEntropyLoss()
    eager_opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    twin_opt = torch.optim.SGD(twin.parameters(), lr=0.01, momentum=0.9)
    fast = nimble.Nimble(twin).prepare(
        x, training=True, loss_fn=loss_fn, optimizer=twin_opt, example_targets=y
    )
    for step in range(3):
        batch = torch.randn_like(x)
        torch.manual_seed(step)
        eager_opt.zero_grad()
        loss_fn(model(batch), y).backward()
        eager_opt.step()
        torch.manual_seed(step)
        fast.step(batch, y)
    _assert_models_equal(model, twin)


def test_training_off_the_cpu_is_refused_before_anything_runs():
    # A GPU is not needed to see the check: any non-CPU device takes the same path.
    model = torch.nn.Linear(4, 2, device="meta")
    with pytest.raises(nimble.UnsupportedOpError, match="CPU backend"):
        nimble.Nimble(model).prepare(torch.randn(3, 4, device="meta"), training=True)


# -- optimizer settings after prepare (nimble/replay/optimizer_scalars.py) -----------------


def _mlp_pair(make_optimizer, seed=0):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))
    twin = copy.deepcopy(model)
    return model, make_optimizer(model), twin, make_optimizer(twin)


def _mlp_steps(eager, eager_opt, twin, twin_opt, steps=6, change=None, **prepare):
    """`steps` whole steps of eager and a replay side by side, `change(optimizer)` applied to
    both optimizers after the third; every state entry compared exactly at the end."""
    loss_fn = torch.nn.CrossEntropyLoss()
    g = torch.Generator().manual_seed(1)
    data = [(torch.randn(8, 8, generator=g), torch.randint(0, 4, (8,), generator=g))
            for _ in range(steps)]
    fast = nimble.Nimble(twin).prepare(data[0][0], training=True, loss_fn=loss_fn,
                                       optimizer=twin_opt, example_targets=data[0][1], **prepare)
    for step, (x, y) in enumerate(data):
        if step == 3 and change is not None:
            change(eager_opt)
            change(twin_opt)
        eager_opt.zero_grad()
        expected = loss_fn(eager(x), y)
        expected.backward()
        eager_opt.step()
        _assert_same(fast.step(x, y), expected.detach(), f"loss at step {step}")
    _assert_models_equal(eager, twin)
    _assert_optimizers_equal(eager_opt, twin_opt)
    return fast


def _set(**settings):
    def change(optimizer):
        for group in optimizer.param_groups:
            group.update(settings)
    return change


@pytest.mark.parametrize("make, change", [
    (lambda m: torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4),
     _set(momentum=0.5)),
    (lambda m: torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4),
     _set(weight_decay=3e-3, dampening=0.25)),
    (lambda m: torch.optim.Adam(m.parameters(), lr=1e-2), _set(betas=(0.8, 0.99))),
    (lambda m: torch.optim.Adam(m.parameters(), lr=1e-2, weight_decay=1e-4, foreach=True),
     _set(eps=1e-6, weight_decay=2e-3)),
    (lambda m: torch.optim.AdamW(m.parameters(), lr=1e-2, weight_decay=1e-2), _set(weight_decay=0.1)),
], ids=["sgd-momentum", "sgd-weight-decay-dampening", "adam-betas", "adam-eps-weight-decay",
        "adamw-weight-decay"])
def test_settings_other_than_the_learning_rate_changed_after_prepare_take_effect(make, change):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # followed by the replay, not prepared again
        _mlp_steps(*_mlp_pair(make), change=change)


@pytest.mark.parametrize("make", [
    lambda m: torch.optim.SGD([
        {"params": m[0].parameters(), "lr": 0.1, "momentum": 0.9},
        {"params": m[2].parameters(), "lr": 0.02, "momentum": 0.5, "weight_decay": 1e-3}]),
    lambda m: torch.optim.Adam([
        {"params": m[0].parameters(), "lr": 1e-2, "betas": (0.8, 0.95)},
        {"params": m[2].parameters(), "lr": 3e-3, "weight_decay": 1e-3}]),
], ids=["sgd", "adam"])
def test_several_parameter_groups_at_prepare_keep_their_own_settings(make):
    def change(optimizer):  # one group's learning rate only
        optimizer.param_groups[1]["lr"] *= 0.5

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _mlp_steps(*_mlp_pair(make), change=change)


ZERO_CHANGES = [
    (lambda m: torch.optim.SGD(m.parameters(), lr=0.05, weight_decay=1e-4), _set(weight_decay=0)),
    (lambda m: torch.optim.SGD(m.parameters(), lr=0.05), _set(momentum=0.9)),
    (lambda m: torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9), _set(momentum=0)),
    (lambda m: torch.optim.Adam(m.parameters(), lr=1e-2), _set(weight_decay=1e-3)),
]
ZERO_IDS = ["sgd-weight-decay-to-zero", "sgd-momentum-from-zero", "sgd-momentum-to-zero",
            "adam-weight-decay-from-zero"]


@pytest.mark.parametrize("make, change", ZERO_CHANGES, ids=ZERO_IDS)
def test_a_setting_going_to_or_from_zero_is_refused(make, change):
    """A zero term is a term the captured step does not have: another update, not another
    number."""
    model, opt, _, _ = _mlp_pair(make)
    x, y = torch.randn(8, 8), torch.randint(0, 4, (8,))
    fast = nimble.Nimble(model).prepare(x, training=True, loss_fn=torch.nn.CrossEntropyLoss(),
                                        optimizer=opt, example_targets=y, on_change="error")
    fast.step(x, y)
    fast.step(x, y)
    change(opt)
    snapshot = _snapshot(model, opt)
    with pytest.raises(nimble.StaleModelError, match="a setting that decides which update runs"):
        fast.step(x, y)
    _assert_untouched(model, opt, snapshot)


@pytest.mark.parametrize("make, change", ZERO_CHANGES, ids=ZERO_IDS)
def test_a_setting_going_to_or_from_zero_prepares_again_by_default(make, change):
    with pytest.warns(UserWarning, match="decides which update runs.*preparing again"):
        _mlp_steps(*_mlp_pair(make), change=change)


class _FakeCudaGenerators:
    """torch.cuda's generator functions, for a machine without a GPU: two devices whose
    states a run advances."""

    def __init__(self, monkeypatch, initialized=True):
        self.states = [torch.tensor([1, 2], dtype=torch.uint8), torch.tensor([3, 4], dtype=torch.uint8)]
        self.reads = 0
        monkeypatch.setattr(torch.cuda, "is_initialized", lambda: initialized)
        monkeypatch.setattr(torch.cuda, "get_rng_state_all", self.get_all)
        monkeypatch.setattr(torch.cuda, "set_rng_state_all", self.set_all)

    def get_all(self):
        self.reads += 1
        return [s.clone() for s in self.states]

    def set_all(self, states):
        self.states = [s.clone() for s in states]

    def advance(self):
        self.states = [s + 1 for s in self.states]


def test_the_snapshot_puts_back_every_cuda_devices_generator(monkeypatch):
    """Issue 45: prepare's recorded runs of a CUDA model draw from the device's generator;
    the snapshot put back only the CPU's, and the replay's dropout masks were not eager's."""
    from nimble.replay.model_snapshot import ModelSnapshot

    cuda = _FakeCudaGenerators(monkeypatch)
    model = torch.nn.Linear(2, 2)  # (its initialization draws from the CPU's generator)
    found = [s.clone() for s in cuda.states]
    cpu = torch.get_rng_state()
    snapshot = ModelSnapshot(model)
    cuda.advance()
    torch.rand(3)
    snapshot.restore()
    assert all(torch.equal(a, b) for a, b in zip(cuda.states, found))
    assert torch.equal(torch.get_rng_state(), cpu)


def test_the_snapshot_never_initializes_cuda_for_a_cpu_user(monkeypatch):
    from nimble.replay.model_snapshot import ModelSnapshot

    cuda = _FakeCudaGenerators(monkeypatch, initialized=False)
    with ModelSnapshot(torch.nn.Linear(2, 2)):
        cuda.advance()
    assert cuda.reads == 0


def test_prepare_leaves_the_cuda_generators_as_it_found_them(monkeypatch):
    """The whole prepare, with a CUDA generator that the recorded runs advance (here by
    the dropout's CPU draws, standing in for a device's)."""
    cuda = _FakeCudaGenerators(monkeypatch)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Dropout(0.5))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    original_dropout = torch.nn.functional.dropout

    def dropout(*args, **kwargs):
        cuda.advance()
        return original_dropout(*args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "dropout", dropout)
    found = [s.clone() for s in cuda.states]
    x, y = torch.randn(4, 8), torch.randn(4, 8)
    nimble.Nimble(model).prepare(x, training=True, loss_fn=torch.nn.MSELoss(), optimizer=opt,
                                 example_targets=y)
    assert all(torch.equal(a, b) for a, b in zip(cuda.states, found))


def test_dropout_replayed_after_prepare_draws_eagers_masks_from_the_seed_set_before():
    """On the CPU: seed, prepare, replay; eager from the same seed draws the same masks."""
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.Dropout(0.5),
                                torch.nn.Linear(16, 4))
    x = torch.randn(8, 16)
    torch.manual_seed(11)
    fast = nimble.Nimble(model).prepare(x, training=True)
    got = [fast(x) for _ in range(2)]
    torch.manual_seed(11)
    expected = [model(x) for _ in range(2)]
    assert not torch.equal(expected[0], expected[1])
    for a, b in zip(got, expected):
        torch.testing.assert_close(a, b, rtol=0, atol=0)

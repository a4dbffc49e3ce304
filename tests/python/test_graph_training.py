"""Training on the graph backends (graph_backends.py): the CUDA graph on a GPU, its CPU
twin in CI. The paper's mode (forward and backward replayed, the optimizer eager) and the
whole step (forward, backward and update in one graph) against eager for 10 steps, with
SGD with momentum, Adam, AdamW and an LR scheduler; prepare changing nothing (the graph's
warm-up applies no optimizer step and moves no running statistic); dropout drawing fresh
masks, the same as eager's from the same seed; `zero_grad(set_to_none=True)` and gradient
accumulation."""

from __future__ import annotations

import copy
import os

import pytest
import torch
import torchvision

import nimble
from graph_backends import (BACKENDS, assert_optimizer_states_alike, assert_trained_alike,
                            device_of, prepare_options)

# The check is 10 steps; CI runs the twin for 3 (the eager first step, then
# replays; the scheduler changes the rate every step). NIMBLE_FULL_GRAPH_SUITE=1: all of it.
FULL = bool(os.environ.get("NIMBLE_FULL_GRAPH_SUITE"))


def _steps(backend):
    return 10 if FULL or backend == "cuda" else 3


BATCH = 4  # 32 on a GPU bench; small here so that CI stays quick


def _googlenet():
    return torchvision.models.googlenet(num_classes=10, aux_logits=False, init_weights=True)


MODELS = {
    "resnet18": lambda: torchvision.models.resnet18(num_classes=10),
    "mobilenet_v2": lambda: torchvision.models.mobilenet_v2(num_classes=10),  # dropout
    "googlenet": _googlenet,  # dropout, multi-branch backward
}
OPTIMIZERS = {
    "sgd-momentum": lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, weight_decay=1e-4),
    "adam": lambda p: torch.optim.Adam(p, lr=1e-3),
    "adamw": lambda p: torch.optim.AdamW(p, lr=1e-3, weight_decay=1e-2),
}


def _pair(backend, model_name, optimizer_name):
    torch.manual_seed(0)
    model = MODELS[model_name]().to(device_of(backend)).train()
    twin = copy.deepcopy(model)
    make = OPTIMIZERS[optimizer_name]
    return model, make(model.parameters()), twin, make(twin.parameters())


def _batches(backend, steps=None):
    steps = steps or _steps(backend)
    g = torch.Generator().manual_seed(1)
    device = device_of(backend)
    return [
        (torch.randn(BATCH, 3, 32, 32, generator=g).to(device),
         torch.randint(0, 10, (BATCH,), generator=g).to(device))
        for _ in range(steps)
    ]


def _assert_same_training(eager, eager_opt, replayed, replayed_opt, backend):
    a, b = eager.state_dict(), replayed.state_dict()
    assert list(a) == list(b), "the models' state entries differ"
    for name in a:
        assert_trained_alike(b[name], a[name], backend, name)
    assert_optimizer_states_alike(
        eager_opt, replayed_opt,
        lambda got, expected, what: assert_trained_alike(got, expected, backend, what))


def _schedulers(optimizers, scheduler):
    if not scheduler:
        return []
    return [torch.optim.lr_scheduler.StepLR(o, step_size=1, gamma=0.5) for o in optimizers]


def _seed(backend, step):
    torch.manual_seed(1000 + step)  # the same dropout masks for eager and the replay


@pytest.mark.parametrize(
    "model_name, optimizer_name, scheduler",
    [
        ("resnet18", "sgd-momentum", False),
        ("mobilenet_v2", "sgd-momentum", True),
        ("googlenet", "sgd-momentum", False),
        ("resnet18", "adam", True),
        ("mobilenet_v2", "adamw", False),
    ] + ([("googlenet", "adam", False)] if FULL else []),
)
@pytest.mark.parametrize("backend", BACKENDS)
def test_whole_step_matches_eager(backend, model_name, optimizer_name, scheduler):
    eager, eager_opt, twin, twin_opt = _pair(backend, model_name, optimizer_name)
    loss_fn = torch.nn.CrossEntropyLoss()
    data = _batches(backend)
    fast = nimble.Nimble(twin).prepare(
        data[0][0], training=True, loss_fn=loss_fn, optimizer=twin_opt,
        example_targets=data[0][1], **prepare_options(backend),
    )
    assert fast.replay.backend in ("cuda-graph", "cpu-graph")
    schedulers = _schedulers((eager_opt, twin_opt), scheduler)
    for step, (x, y) in enumerate(data):
        _seed(backend, step)
        eager_opt.zero_grad()
        expected = loss_fn(eager(x), y)
        expected.backward()
        eager_opt.step()
        _seed(backend, step)
        got = fast.step(x, y)
        assert_trained_alike(got, expected.detach(), backend, f"loss at step {step}")
        for s in schedulers:
            s.step()
    _assert_same_training(eager, eager_opt, twin, twin_opt, backend)


@pytest.mark.parametrize(
    "model_name, optimizer_name, scheduler",
    [("resnet18", "sgd-momentum", True), ("mobilenet_v2", "adam", False),
     ("googlenet", "adamw", False)],
)
@pytest.mark.parametrize("backend", BACKENDS)
def test_forward_backward_matches_eager(backend, model_name, optimizer_name, scheduler):
    """The paper's mode, with `zero_grad(set_to_none=True)` between steps."""
    eager, eager_opt, twin, twin_opt = _pair(backend, model_name, optimizer_name)
    loss_fn = torch.nn.CrossEntropyLoss()
    data = _batches(backend)
    fast = nimble.Nimble(twin).prepare(data[0][0], training=True, **prepare_options(backend))
    schedulers = _schedulers((eager_opt, twin_opt), scheduler)
    for step, (x, y) in enumerate(data):
        for model, opt in ((eager, eager_opt), (fast, twin_opt)):
            _seed(backend, step)
            opt.zero_grad(set_to_none=True)
            loss_fn(model(x), y).backward()
            opt.step()
        for s in schedulers:
            s.step()
    _assert_same_training(eager, eager_opt, twin, twin_opt, backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_gradients_accumulate_over_several_replayed_backwards(backend):
    eager, eager_opt, twin, twin_opt = _pair(backend, "resnet18", "sgd-momentum")
    loss_fn = torch.nn.CrossEntropyLoss()
    data = _batches(backend, steps=4)
    fast = nimble.Nimble(twin).prepare(data[0][0], training=True, **prepare_options(backend))
    for step, (x, y) in enumerate(data):
        for model, opt in ((eager, eager_opt), (fast, twin_opt)):
            if step % 2 == 0:
                opt.zero_grad(set_to_none=step == 0)
            loss_fn(model(x), y).backward()
            if step % 2 == 1:
                opt.step()
        for p, q in zip(eager.parameters(), twin.parameters(), strict=True):
            assert_trained_alike(q.grad, p.grad, backend, f"grad at step {step}")
    _assert_same_training(eager, eager_opt, twin, twin_opt, backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_prepare_applies_no_step_and_moves_no_running_statistic(backend):
    """The graph backend runs the step while it is built (warm-up, recording): the model,
    the optimizer's state and the generators must be as prepare found them."""
    model, opt, _, _ = _pair(backend, "mobilenet_v2", "adam")
    loss_fn = torch.nn.CrossEntropyLoss()
    (x, y), = _batches(backend, steps=1)
    for _ in range(2):  # optimizer state exists: the graph is built at prepare
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()
    before_model = copy.deepcopy(model.state_dict())
    before_opt = copy.deepcopy(opt.state_dict())
    rng = torch.get_rng_state()
    fast = nimble.Nimble(model).prepare(
        x, training=True, loss_fn=loss_fn, optimizer=opt, example_targets=y,
        **prepare_options(backend),
    )
    assert torch.equal(torch.get_rng_state(), rng)
    torch.testing.assert_close(model.state_dict(), before_model, rtol=0, atol=0)
    torch.testing.assert_close(opt.state_dict(), before_opt, rtol=0, atol=0)
    fast.replay.set_streams(1)  # rebuilding the graph changes nothing either
    torch.testing.assert_close(model.state_dict(), before_model, rtol=0, atol=0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_dropout_draws_fresh_masks_like_eager_from_the_same_seed(backend):
    device = device_of(backend)
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.Dropout(0.5)).to(device)
    fast = nimble.Nimble(model).prepare(
        torch.randn(4, 16, device=device), training=True, **prepare_options(backend)
    )
    x = torch.randn(4, 16, device=device)
    torch.manual_seed(7)
    a, b = fast(x), fast(x)
    assert not torch.equal(a, b)  # a new mask every replay
    torch.manual_seed(7)
    assert_trained_alike(a, model(x), backend, "first mask")
    assert_trained_alike(b, model(x), backend, "second mask")


@pytest.mark.parametrize("backend", BACKENDS)
def test_grad_scaler_with_the_papers_mode(backend):
    """A scaled loss's backward replays like any other; the scaler steps eagerly."""
    eager, eager_opt, twin, twin_opt = _pair(backend, "resnet18", "sgd-momentum")
    loss_fn = torch.nn.CrossEntropyLoss()
    data = _batches(backend)
    fast = nimble.Nimble(twin).prepare(data[0][0], training=True, **prepare_options(backend))
    kind = device_of(backend).type
    scalers = [torch.amp.GradScaler(kind, init_scale=2.0**10) for _ in range(2)]
    for x, y in data:
        for model, opt, scaler in ((eager, eager_opt, scalers[0]), (fast, twin_opt, scalers[1])):
            opt.zero_grad()
            scaler.scale(loss_fn(model(x), y)).backward()
            scaler.step(opt)
            scaler.update()
    _assert_same_training(eager, eager_opt, twin, twin_opt, backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_training_under_autocast_is_refused_before_anything_runs(backend):
    model, opt, _, _ = _pair(backend, "resnet18", "sgd-momentum")
    before = copy.deepcopy(model.state_dict())
    (x, y), = _batches(backend, steps=1)
    kind = device_of(backend).type
    with torch.autocast(kind, dtype=torch.bfloat16):
        with pytest.raises(nimble.UnsupportedOpError, match="under torch.autocast"):
            nimble.Nimble(model).prepare(x, training=True, **prepare_options(backend))
        with pytest.raises(nimble.UnsupportedOpError, match="under torch.autocast"):
            nimble.Nimble(model).prepare(
                x, training=True, loss_fn=torch.nn.CrossEntropyLoss(), optimizer=opt,
                example_targets=y, **prepare_options(backend),
            )
    torch.testing.assert_close(model.state_dict(), before, rtol=0, atol=0)

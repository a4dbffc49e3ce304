"""Bad states: an op failing inside a replay, Ctrl-C during replays, running out of
memory at prepare."""

import os
import signal
import threading

import pytest
import torch

import nimble


class Gathers(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, x, index):
        y = (x * 2).relu()
        self.calls.add_(1)
        return y.index_select(0, index).sum(0) + y.mean(0)


@pytest.mark.parametrize("streams", [1, 2])
@pytest.mark.parametrize("fails_first", [True, False], ids=["recorded-call", "later-call"])
def test_an_op_failing_inside_a_replay_leaves_the_replay_usable(streams, fails_first):
    # The first call is the one the memory pool records; a later one replays the plan.
    model, eager = Gathers(), Gathers()
    fast = nimble.Nimble(model).prepare((torch.randn(8, 16), torch.tensor([0, 1, 2])), streams=streams)
    x = torch.randn(8, 16)
    if not fails_first:
        torch.testing.assert_close(fast(x, torch.tensor([0, 1, 2])), eager(x, torch.tensor([0, 1, 2])))
    with pytest.raises(IndexError, match="out of range"):
        fast(x, torch.tensor([0, 1, 99]))
    with pytest.raises(IndexError, match="out of range"):
        eager(x, torch.tensor([0, 1, 99]))  # eager counts the failed call too
    for _ in range(2):
        index = torch.randint(0, 8, (3,))
        exact = {"rtol": 0, "atol": 0} if streams == 1 else {}
        torch.testing.assert_close(fast(x, index), eager(x, index), **exact)
    assert model.calls.item() == eager.calls.item()


class Deep(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.Sequential(*[torch.nn.Linear(256, 256) for _ in range(16)])

    def forward(self, x):
        return self.layers(x).relu()


@pytest.mark.parametrize("streams", [1, 2])
def test_ctrl_c_during_replays_leaves_the_replay_usable(streams):
    model = Deep().eval()
    # ATen's products (no CPU lowering), so one stream can be compared bit for bit.
    fast = nimble.Nimble(model).prepare(torch.randn(64, 256), streams=streams, lower_for_cpu=False)
    x = torch.randn(64, 256)
    # SIGINT while replays run back to back: Python raises KeyboardInterrupt as soon as
    # the replay (C++) hands control back, so no replay is cut in half. Python's own handler
    # is installed for the test: a runner started in the background (nohup, `&` without job
    # control) inherits SIGINT ignored, and then Python never installs it.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        timer = threading.Timer(0.05, os.kill, (os.getpid(), signal.SIGINT))
        timer.start()
        with pytest.raises(KeyboardInterrupt):
            for _ in range(100000):
                fast(x)
        timer.join()
    finally:
        signal.signal(signal.SIGINT, previous)
    with torch.no_grad():
        expected = model(x)
    exact = {"rtol": 0, "atol": 0} if streams == 1 else {}
    torch.testing.assert_close(fast(x), expected, **exact)


class RunsOutOfMemory(torch.nn.Module):
    """Writes its buffer and parameter in place, then, on its second call (prepare's
    recorded run, after the warm-up), asks for more memory than any machine has."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.register_buffer("calls", torch.zeros(()))
        self.runs = 0  # a Python number: not part of any trace

    def forward(self, x):
        self.runs += 1
        self.calls.add_(1)
        with torch.no_grad():
            self.lin.weight.mul_(0.5)
        y = self.lin(x)
        if self.runs >= 2:
            torch.empty(1 << 62, dtype=torch.uint8)  # out of memory
        return y


def _state(model):
    return [t.detach().clone() for t in list(model.parameters()) + list(model.buffers())]


def test_out_of_memory_at_prepare_leaves_the_model_as_it_was():
    model = RunsOutOfMemory()
    before = _state(model)
    with pytest.raises(RuntimeError, match="memory"):
        nimble.Nimble(model).prepare(torch.randn(2, 4))
    for now, then in zip(_state(model), before, strict=True):
        assert torch.equal(now, then)


def test_out_of_memory_at_a_whole_step_prepare_leaves_model_grads_and_optimizer():
    model = RunsOutOfMemory()
    model.lin.weight.grad = torch.ones(4, 4)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    before = _state(model)
    with pytest.raises(RuntimeError, match="memory"):
        nimble.Nimble(model).prepare(torch.randn(2, 4), training=True, loss_fn=torch.nn.MSELoss(),
                                     optimizer=optimizer, example_targets=torch.randn(2, 4))
    for now, then in zip(_state(model), before, strict=True):
        assert torch.equal(now, then)
    assert torch.equal(model.lin.weight.grad, torch.ones(4, 4)) and model.lin.bias.grad is None
    assert len(optimizer.state) == 0  # the warm-up step's state is gone with it

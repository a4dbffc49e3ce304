"""The CPU replay's unboxed calls of nimble's prepacked ops (csrc/runtime/cpu/direct_calls.h):
results stay eager's, call after call, with residuals from slots; a weight changed in place
between calls is seen (the kernel's own staleness check still runs); a profiler running
around a replay changes no result;
timed replays time every op."""

import torch

import nimble
from nimble.testing import assert_matches_eager

CONV = "nimble::convolution_prepacked"
LINEAR = "nimble::linear_prepacked"


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Conv2d(3, 16, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(16)
        self.b = torch.nn.Conv2d(16, 16, 3, padding=1)
        self.c = torch.nn.Conv2d(16, 16, 1)
        self.fc = torch.nn.Linear(16, 10)

    def forward(self, x):
        y = torch.relu(self.bn(self.a(x)))
        z = torch.relu(self.b(y) + y)  # residual from a slot
        z = self.c(z) + z
        return self.fc(z.mean((2, 3)))


def prepared(threads=1):
    torch.manual_seed(0)
    model = Net().eval()
    with torch.no_grad():
        model.bn.running_mean.uniform_(-0.5, 0.5)
        model.bn.running_var.uniform_(0.5, 1.5)
    x = torch.randn(2, 3, 12, 12)
    torch.set_num_threads(threads)
    with torch.no_grad():
        fast = nimble.Nimble(model).prepare(x)
    names = fast.schedule["ops"]
    assert names.count(CONV) >= 3 and LINEAR in names, names
    return model, fast, x


def test_direct_calls_match_eager_call_after_call():
    for threads in (1, 2):
        model, fast, x = prepared(threads)
        with torch.no_grad():
            first = fast(x)
            for i in range(5):
                xi = torch.randn_like(x)
                assert_matches_eager(fast(xi), model(xi))
            # An earlier result is the caller's: later calls do not write into it.
            assert_matches_eager(first, model(x))


def test_a_weight_changed_in_place_is_seen():
    model, fast, x = prepared()
    with torch.no_grad():
        fast(x)
        model.b.weight.mul_(1.5)
        model.bn.running_var.add_(0.25)
        model.fc.bias.add_(1.0)
        assert_matches_eager(fast(x), model(x))


def test_a_profiler_around_a_replay_changes_nothing():
    model, fast, x = prepared()
    with torch.no_grad():
        fast(x)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            out = fast(x)
        assert_matches_eager(out, model(x))
        assert_matches_eager(fast(x), model(x))


def test_timed_replays_time_every_op():
    model, fast, x = prepared()
    with torch.no_grad():
        fast(x)
        total, ops = fast.replay.run_timed([x])
    assert total > 0
    assert sorted(op[0] for op in ops) == list(range(len(fast.schedule["ops"])))
    assert all(op[3] >= op[2] for op in ops)


class Mixed(torch.nn.Module):
    """Pooling, concatenation, ShuffleNet's channel shuffle and the global mean between
    convolutions: the other nimble:: ops with direct calls."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.b = torch.nn.Conv2d(8, 8, 1)
        self.c = torch.nn.Conv2d(8, 8, 3, padding=1)
        self.d = torch.nn.Conv2d(16, 16, 1)
        self.e = torch.nn.Conv2d(16, 16, 1)

    def forward(self, x):
        y = torch.nn.functional.max_pool2d(torch.relu(self.a(x)), 3, 2, 1)
        b, c = self.b(y), self.c(y)
        u = self.e(torch.cat([b, c], 1))
        z = torch.cat([c, b], 1)
        n, ch, h, w = z.shape
        z = z.view(n, 2, ch // 2, h, w).transpose(1, 2).contiguous().view(n, ch, h, w)
        z = torch.relu(self.d(z)) + u
        return z.mean((2, 3))


def prepared_with_ops(model, x, threads, ops):
    """`model` prepared on `threads` threads; its program runs each of nimble's `ops`."""
    torch.set_num_threads(threads)
    with torch.no_grad():
        fast = nimble.Nimble(model).prepare(x)
    names = fast.schedule["ops"]
    for op in ops:
        assert "nimble::" + op in names, names
    return fast


def test_pool_cat_shuffle_and_mean_match_eager_call_after_call():
    torch.manual_seed(1)
    model = Mixed().eval()
    x = torch.randn(1, 3, 16, 16)
    for threads in (1, 2):
        ops = ("max_pool2d_nhwc", "cat_nhwc", "channel_shuffle_nhwc", "mean_hw_nhwc")
        fast = prepared_with_ops(model, x, threads, ops)
        with torch.no_grad():
            outs = []
            for i in range(4):
                xi = torch.randn_like(x)
                outs.append((fast(xi), model(xi)))
            for got, want in outs:  # earlier results stay the caller's
                assert_matches_eager(got, want)


class Handed(torch.nn.Module):
    """Outputs that are nimble's kernels' own results (a concatenation, a convolution, a
    mean), made past the dispatcher (kernels/cpu/torch_ops/empty_output.h)."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Conv2d(3, 8, 1)
        self.b = torch.nn.Conv2d(16, 8, 3, padding=1)

    def forward(self, x):
        y = torch.relu(self.a(x))
        z = torch.cat([y, torch.nn.functional.max_pool2d(y, 3, 1, 1)], 1)
        w = self.b(z)
        return z, w, w.mean((2, 3))


def test_results_handed_out_are_the_callers_and_share_no_memory():
    torch.manual_seed(2)
    model = Handed().eval()
    x = torch.randn(2, 3, 8, 8)
    for threads in (1, 2):
        fast = prepared_with_ops(model, x, threads, ("cat_nhwc", "max_pool2d_nhwc", "mean_hw_nhwc"))
        with torch.no_grad():
            inputs = [torch.randn_like(x) for _ in range(5)]
            outs = []
            for xi in inputs:
                out = fast(xi)
                outs.append(out)
                # The caller writes into what it got: no later call reads or hands out
                # that memory.
                for t in out:
                    t.add_(1.0)
            for xi, out in zip(inputs, outs):
                for got, want in zip(out, model(xi)):
                    assert_matches_eager(got - 1.0, want)
            storages = [t.untyped_storage().data_ptr() for out in outs for t in out]
            assert len(set(storages)) == len(storages)
            pool = fast.memory["pool"]
            assert pool["served_last"] == pool["planned_requests"] > 0
            assert pool["fallbacks_last"] == 0

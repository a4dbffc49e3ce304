"""The ops between lowered convolutions (csrc/passes/channels_last_ops.h, cpu_layout_plan.h):
poolings, concatenations and inference batch norms reading channels_last values run
nimble's kernels (kernels/cpu/torch_ops/nhwc_tensor_ops.h), elementwise ops pass the layout on, and
results stay eager's: random pooling geometries, a batch norm with each activation fused,
statistics changed after prepare, indices someone reads, values written in place."""

import os
import random
import subprocess
import sys
import warnings

import pytest
import torch
import torch.nn.functional as F

import nimble
from nimble.testing import assert_matches_eager
from fused_epilogues import ACTIVATIONS

CONV = "nimble::convolution_prepacked"


def _check(model, *inputs, names=()):
    fast = nimble.Nimble(model).prepare(*inputs)
    ops = fast.schedule["ops"]
    for name in names:
        assert name in ops, ops
    with torch.no_grad():
        expected = model(*inputs)
    got = fast(*inputs)
    for g, e in zip(got if isinstance(got, tuple) else (got,),
                    expected if isinstance(expected, tuple) else (expected,)):
        assert g.shape == e.shape and g.stride() == e.stride()
        assert_matches_eager(g, e)
    return fast


def ran(fast, *inputs) -> list[str]:
    """The ops a replay of `inputs` ran, in order, as its own timing saw them start and end."""
    _, timed = fast.replay.run_timed(list(inputs))
    names = fast.schedule["ops"]
    return [names[op] for op, _stream, begin, end, _free in sorted(timed, key=lambda t: t[2])
            if end > begin]


class PoolBetweenConvolutions(torch.nn.Module):
    def __init__(self, pool):
        super().__init__()
        self.a = torch.nn.Conv2d(3, 19, 3, padding=1)  # 19 channels: vector tails
        self.b = torch.nn.Conv2d(19, 8, 1)
        self.pool = pool

    def forward(self, x):
        return self.b(self.pool(torch.relu(self.a(x))))


def _random_pool(rng: random.Random):
    k = rng.randint(1, 4)
    stride = rng.choice([None, 1, 2, 3])
    padding = rng.randint(0, k // 2)
    ceil_mode = rng.random() < 0.5
    if rng.random() < 0.5:
        dilation = rng.randint(1, 2)
        return (lambda x: F.max_pool2d(x, k, stride, padding, dilation, ceil_mode),
                "nimble::max_pool2d_nhwc")
    count_include_pad = rng.random() < 0.5
    divisor = rng.choice([None, None, 3])
    return (lambda x: F.avg_pool2d(x, k, stride, padding, ceil_mode, count_include_pad, divisor),
            "nimble::avg_pool2d_nhwc")


class Lambda(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)


@pytest.mark.parametrize("seed", range(24))
def test_random_poolings_between_convolutions_match_eager(seed):
    rng = random.Random(seed)
    pool, name = _random_pool(rng)
    size = rng.randint(7, 17)
    _check(PoolBetweenConvolutions(Lambda(pool)).eval(), torch.randn(rng.randint(1, 2), 3, size, size),
           names=[name])


class DenseLayer(torch.nn.Module):
    """densenet's pattern: concatenate, batch norm, activation, convolution."""

    def __init__(self, activation: str):
        super().__init__()
        self.a = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.b = torch.nn.Conv2d(3, 5, 1)
        self.bn = torch.nn.BatchNorm2d(13)
        self.c = torch.nn.Conv2d(13, 4, 3, padding=1)
        self.activation = activation

    def forward(self, x):
        y = torch.cat([self.a(x), self.b(x)], 1)
        return self.c(ACTIVATIONS[self.activation](self.bn(y)))


def _randomize(bn: torch.nn.BatchNorm2d) -> None:
    with torch.no_grad():
        bn.weight.uniform_(0.5, 1.5)
        bn.bias.uniform_(-0.5, 0.5)
        bn.running_mean.uniform_(-0.5, 0.5)
        bn.running_var.uniform_(0.5, 2.0)


@pytest.mark.parametrize("activation", list(ACTIVATIONS))
def test_concatenation_and_batch_norm_with_its_activation_match_eager(activation):
    model = DenseLayer(activation).eval()
    _randomize(model.bn)
    x = torch.randn(2, 3, 9, 9)
    fast = _check(model, x)
    # The activation fused into nimble's batch norm: no ATen op is left between the products,
    # but GELU's (its approximation is an argument the batch norm's kernel does not take:
    # channels_last_ops.cpp fuses no activation with an `algorithm`).
    left = ["aten::gelu.out"] if activation.startswith("gelu") else []
    assert fast.schedule["ops"] == [CONV, CONV, "nimble::cat_nhwc", "nimble::batch_norm_nhwc",
                                    *left, CONV], fast.schedule["ops"]
    assert ran(fast, x) == fast.schedule["ops"]


class NoTrainingBatchNorm(torch.nn.Module):
    """The inference batch norm as torch.compile's graphs hold it
    (`_native_batch_norm_legit_no_training`), between a pooling and a convolution."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Conv2d(3, 10, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(10)
        self.b = torch.nn.Conv2d(10, 4, 1)

    def forward(self, x):
        y = F.max_pool2d(self.a(x), 2)
        bn = self.bn
        y = torch.ops.aten._native_batch_norm_legit_no_training(
            y, bn.weight, bn.bias, bn.running_mean, bn.running_var, 0.1, bn.eps)[0]
        return self.b(torch.relu(y))


def test_the_no_training_batch_norm_of_compiled_graphs_runs_nimbles_kernel():
    model = NoTrainingBatchNorm().eval()
    _randomize(model.bn)
    fast = _check(model, torch.randn(2, 3, 10, 10), names=["nimble::batch_norm_nhwc"])
    assert not any("batch_norm_legit" in n or n.startswith("aten::relu")
                   for n in fast.schedule["ops"]), fast.schedule["ops"]


def test_batch_norm_statistics_changed_after_prepare_are_seen():
    model = DenseLayer("relu").eval()
    x = torch.randn(1, 3, 8, 8)
    fast = nimble.Nimble(model).prepare(x)
    with torch.no_grad():
        model.bn.running_var.mul_(3.0)  # in place
        model.bn.running_mean.add_(0.25)
        model.bn.weight.data = model.bn.weight.data * -1  # a new tensor
        expected = model(x)
    assert_matches_eager(fast(x), expected)


def test_max_pooling_indices_someone_reads_keep_atens_op():
    class Unpool(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = torch.nn.Conv2d(3, 6, 3, padding=1)
            self.b = torch.nn.Conv2d(6, 6, 1)

        def forward(self, x):
            pooled, indices = F.max_pool2d(self.a(x), 2, return_indices=True)
            return self.b(pooled), indices

    fast = _check(Unpool().eval(), torch.randn(1, 3, 8, 8))
    assert "nimble::max_pool2d_nhwc" not in fast.schedule["ops"]


def test_a_batch_norm_result_read_before_its_activation_keeps_the_activation_apart():
    class ReadFirst(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = torch.nn.Conv2d(3, 6, 3, padding=1)
            self.b = torch.nn.Conv2d(3, 2, 3, padding=1)
            self.bn = torch.nn.BatchNorm2d(8)

        def forward(self, x):
            y = self.bn(torch.cat([self.a(x), self.b(x)], 1))
            doubled = y * 2
            torch.relu_(y)
            return doubled + y

    model = ReadFirst().eval()
    _randomize(model.bn)
    _check(model, torch.randn(1, 3, 6, 6), names=["nimble::batch_norm_nhwc"])


def test_a_value_written_in_place_and_viewed_keeps_the_models_layout():
    class WrittenAndViewed(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = torch.nn.Conv2d(3, 4, 3, padding=1)
            self.b = torch.nn.Conv2d(4, 4, 1)

        def forward(self, x):
            y = self.a(x)
            flat = y.flatten(1)  # a view: it sees the in-place write below
            z = F.max_pool2d(y, 2)
            y.mul_(3)
            return self.b(z), flat

    _check(WrittenAndViewed().eval(), torch.randn(1, 3, 6, 6))


def test_elementwise_ops_pass_the_layout_on_to_a_pooling():
    class Gate(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = torch.nn.Conv2d(3, 8, 3, padding=1)
            self.b = torch.nn.Conv2d(3, 8, 3, padding=1)
            self.c = torch.nn.Conv2d(8, 4, 1)

        def forward(self, x):
            gated = self.a(x) * torch.sigmoid(self.b(x))
            return self.c(F.max_pool2d(gated, 2))

    fast = _check(Gate().eval(), torch.randn(1, 3, 8, 8), names=["nimble::max_pool2d_nhwc"])
    assert not any(n.startswith("aten::clone") for n in fast.schedule["ops"]), fast.schedule["ops"]


@pytest.mark.parametrize("streams", [1, 2])
def test_a_batch_norm_after_a_convolution_left_to_aten_in_a_channels_last_model(streams):
    # The pruned weight is computed by the trace, so the convolution stays ATen's and nothing
    # else is lowered; the model's own channels_last layout still lets the batch norm and its
    # relu run nimble's kernel (the trace is renumbered after that rewrite too).
    import torch.nn.utils.prune as prune

    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8),
                                torch.nn.ReLU()).eval()
    prune.random_unstructured(model[0], "weight", 0.3)
    _randomize(model[1])
    model.to(memory_format=torch.channels_last)
    x = torch.randn(2, 3, 8, 8)
    with pytest.warns(UserWarning, match="hooks ran during the capture"):
        fast = nimble.Nimble(model).prepare(x, streams=streams)
    assert "nimble::batch_norm_nhwc" in fast.schedule["ops"] and CONV not in fast.schedule["ops"]
    with torch.no_grad():
        expected = model(x)
    assert_matches_eager(fast(x), expected)


@pytest.mark.parametrize("channels,scale_first", [(24, False), (37, True)])
def test_squeeze_excitation_and_global_pooling_take_the_mean_over_pixels_channels_last(
        channels, scale_first):
    """The means and the channel-wise product run nimble's kernels (37 channels: units of 16
    channels with a tail; both orders of the product)."""
    class SqueezeExcite(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = torch.nn.Conv2d(3, channels, 3, padding=1)
            self.reduce = torch.nn.Conv2d(channels, 6, 1)
            self.expand = torch.nn.Conv2d(6, channels, 1)
            self.b = torch.nn.Conv2d(channels, 16, 3, padding=1)
            self.fc = torch.nn.Linear(16, 5)

        def forward(self, x):
            y = torch.relu(self.a(x))
            scale = torch.sigmoid(self.expand(torch.relu(self.reduce(y.mean((2, 3), keepdim=True)))))
            z = self.b(scale * y if scale_first else y * scale)
            return self.fc(z.mean((-1, -2)))

    fast = _check(SqueezeExcite().eval(), torch.randn(2, 3, 9, 9))
    ops = fast.schedule["ops"]
    assert ops.count("nimble::mean_hw_nhwc") == 2, ops
    assert ops.count("nimble::scale_channels_nhwc") == 1, ops
    assert not any(n.startswith("aten::mul") for n in ops), ops
    assert not any(n.startswith("aten::clone") for n in ops), ops


def test_a_product_that_is_not_per_channel_stays_atens_and_the_kernel_takes_any_layout():
    class Weighted(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = torch.nn.Conv2d(3, 8, 3, padding=1)
            self.w = torch.nn.Parameter(torch.randn(1, 8, 9, 9))  # a weight per pixel too
            self.b = torch.nn.Conv2d(8, 4, 1)

        def forward(self, x):
            return self.b(self.a(x) * self.w)

    fast = _check(Weighted().eval(), torch.randn(2, 3, 9, 9))
    assert "nimble::scale_channels_nhwc" not in fast.schedule["ops"]
    # Called on what the plan did not foresee (NCHW input, a scale per pixel), ATen's product.
    x, s = torch.randn(2, 5, 4, 3), torch.randn(2, 5, 1, 1)
    for a, b in [(x, s), (x.contiguous(memory_format=torch.channels_last), torch.randn(2, 5, 4, 3))]:
        got = torch.ops.nimble.scale_channels_nhwc(a, b)
        assert torch.equal(got, a * b) and got.is_contiguous(memory_format=torch.channels_last)


@pytest.mark.parametrize("pixels,channels", [(1, 4), (3, 1)])
def test_a_value_laid_out_both_ways_that_kept_the_models_strides_keeps_them(pixels, channels):
    """A 1x1 map (or one channel) is dense both ways: the plan left the product to ATen (its
    input converted back, as the transposed convolution after it is not nimble's), so its
    result keeps the model's strides; a channels_last kernel's would make ATen's transposed
    convolution return channels_last, which the view cannot view (layout fuzz 100140)."""
    class Transposed(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = torch.nn.Conv2d(16, channels, 3, padding=1)
            self.up = torch.nn.ConvTranspose2d(channels, 4, 2, 2)

        def forward(self, x):
            y = self.a(x)
            y = y * torch.sigmoid(y.mean((2, 3), keepdim=True))
            z = self.up(y)
            return z.view(z.shape[0], -1)

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback of the lowering
        _check(Transposed().eval(), torch.randn(2, 16, pixels, pixels), names=[CONV])


@pytest.mark.parametrize("channels", [19, 64])
def test_max_pooling_keeps_nan_where_eager_does(channels):
    """NaN wins a max window in every lane (the kernel runs vector code of the CPU's ISA), and
    -inf stays where the window holds nothing larger."""
    pool = Lambda(lambda x: F.max_pool2d(x, 3, 2, 1))
    model = torch.nn.Sequential(torch.nn.Conv2d(3, channels, 1), pool,
                                torch.nn.Conv2d(channels, 8, 1)).eval()
    x = torch.randn(1, 3, 15, 15)
    fast = nimble.Nimble(model).prepare(x)
    assert "nimble::max_pool2d_nhwc" in fast.schedule["ops"]
    x[0, :, 4, 7] = float("nan")
    x[0, :, 10, 2] = float("-inf")
    with torch.no_grad():
        expected = model(x)
    got = fast(x)
    assert torch.isnan(expected).any()
    assert torch.equal(torch.isnan(got), torch.isnan(expected))
    keep = ~torch.isnan(expected)
    assert_matches_eager(got[keep], expected[keep])

MAX_POOL_VS_ATEN = r"""
import random, sys
import torch, torch.nn.functional as F
import nimble._C

rng = random.Random(5)
# googlenet's at 224 first (threads split them), then random geometries.
shapes = [(192, 28, 3, 1, 1, False), (480, 28, 3, 2, 0, True), (832, 14, 3, 1, 1, False),
          (528, 14, 3, 1, 1, False), (64, 112, 3, 2, 0, True)]
for trial in range(400):
    if trial < len(shapes):
        channels, size, k, stride, padding, ceil_mode = shapes[trial]
        batch, h, w = 1, size, size
    else:
        k, stride = rng.choice([2, 3]), rng.choice([1, 2])
        padding, ceil_mode = rng.randint(0, k // 2), rng.random() < 0.5
        channels = rng.choice([rng.randint(1, 40), rng.randint(41, 300)])  # tails, blocks
        batch, h, w = rng.randint(1, 2), rng.randint(k, 17), rng.randint(k, 17)
    nhwc = torch.randn(batch, h, w, channels)
    if trial % 4 == 1:
        nhwc.view(-1)[rng.randrange(nhwc.numel())] = float("-inf")
    if trial % 4 == 2:  # NaN wins its windows, as in ATen
        nhwc.view(-1)[rng.randrange(nhwc.numel())] = float("nan")
    x = nhwc.permute(0, 3, 1, 2)  # channels_last
    got = torch.ops.nimble.max_pool2d_nhwc(x, [k, k], [stride, stride], [padding, padding],
                                           [1, 1], ceil_mode)
    want = F.max_pool2d(x, k, stride, padding, 1, ceil_mode)
    what = (trial, tuple(x.shape), k, stride, padding, ceil_mode)
    assert got.shape == want.shape, what
    assert got.is_contiguous(memory_format=torch.channels_last), what
    nan = want.isnan()
    assert torch.equal(got.isnan(), nan), what
    # Bit for bit where no NaN is: a max is exact, ties keep ATen's first value.
    assert torch.equal(got[~nan].view(torch.int32), want[~nan].view(torch.int32)), what
print(nimble._C.kernels.device_key())
"""


@pytest.mark.parametrize("isa", ["avx512", "avx2", "portable"])
def test_max_pooling_matches_aten_bit_for_bit_with_each_isa(isa):
    """nimble's channels-last max pooling (channels_last/pooling.h) against ATen's on
    googlenet's shapes and random ones (tails of the channel vectors, odd sizes, kernel 2 and
    3, stride 1 and 2, padding, ceil_mode), running each ISA's code (NIMBLE_CPU_ISA)."""
    flag = {"avx512": "avx512f", "avx2": "avx2", "portable": "sse"}[isa]
    if flag not in open("/proc/cpuinfo").read():
        pytest.skip(f"this CPU has no {isa}")
    env = {**os.environ, "NIMBLE_CPU_ISA": isa}
    done = subprocess.run([sys.executable, "-c", MAX_POOL_VS_ATEN], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().endswith(f"kernels {isa}") or isa == "avx512", done.stdout

"""The CPU lowering pass (csrc/passes/cpu_lowering.h): convolutions become prepacked oneDNN
or MKL calls with their batch norm folded and their residual add and activation fused;
results stay eager's (1e-4 of the output's largest magnitude), weights
changed after prepare are seen, and what the pass cannot lower keeps ATen's op. Every
comparison is relative to eager's scale (nimble/testing.py).

CI runs a fixed sample of the random layers and of the zoo; NIMBLE_FULL_LOWERING=1 runs
all of both."""

import os
import random

import pytest
import torch
import torch.nn.functional as F

import nimble
from nimble.testing import assert_matches_eager
from fused_epilogues import ACTIVATIONS, RESIDUALS, add_residual
from nimble.zoo import TORCHVISION_MODELS, build

FULL = os.environ.get("NIMBLE_FULL_LOWERING") == "1"
LOWERED = "nimble::convolution_prepacked"

class ConvLayer(torch.nn.Module):
    """One convolution, optionally a batch norm, a residual add and an activation."""

    def __init__(self, conv: torch.nn.Conv2d, batchnorm: bool, residual: str, activation: str):
        super().__init__()
        self.conv = conv
        self.bn = torch.nn.BatchNorm2d(conv.out_channels) if batchnorm else None
        self.residual, self.activation = residual, activation

    def forward(self, x, skip):
        y = self.conv(x)
        if self.bn is not None:
            y = self.bn(y)
        return ACTIVATIONS[self.activation](add_residual(y, skip, self.residual))


def random_case(rng: random.Random):
    groups_kind = rng.choice(["one", "depthwise", "some"])
    c_in = rng.choice([3, 4, 8, 16, 24])
    if groups_kind == "depthwise":
        groups, c_out = c_in, c_in * rng.choice([1, 2])
    elif groups_kind == "some" and c_in % 2 == 0:
        groups, c_out = 2, 2 * rng.choice([2, 4, 8])
    else:
        groups, c_out = 1, rng.choice([4, 8, 16, 32])
    kernel = rng.choice([1, 1, 3, 5, (1, 3)])
    conv = torch.nn.Conv2d(c_in, c_out, kernel, stride=rng.choice([1, 1, 2, (1, 2)]),
                           padding=rng.choice([0, 1, 2]), dilation=rng.choice([1, 1, 2]),
                           groups=groups, bias=rng.random() < 0.5)
    size = rng.choice([1, 2, 5, 8, 13])
    batch = rng.choice([1, 1, 2, 3])
    return conv, batch, size


CASES = 200 if FULL else 40


@pytest.mark.parametrize("case", range(CASES))
def test_random_convolutions_with_every_epilogue_match_eager(case):
    rng = random.Random(1000 + case)
    torch.manual_seed(case)
    conv, batch, size = random_case(rng)
    activation = list(ACTIVATIONS)[case % len(ACTIVATIONS)]
    residual = rng.choice(RESIDUALS)
    model = ConvLayer(conv, rng.random() < 0.5, residual, activation).eval()
    if model.bn is not None:
        with torch.no_grad():
            model.bn.running_mean.uniform_(-1, 1)
            model.bn.running_var.uniform_(0.5, 2)
            model.bn.weight.uniform_(0.5, 1.5)
    x = torch.randn(batch, conv.in_channels, size + 10, size + 10)
    if rng.random() < 0.3:
        x = x.contiguous(memory_format=torch.channels_last)
    with torch.no_grad():
        out_shape = model.conv(x).shape
    skip = torch.randn(out_shape)
    fast = nimble.Nimble(model).prepare((x, skip))
    names = fast.schedule["ops"]
    # The batch norm, the add and the activation are fused: one op is left.
    assert names == [LOWERED], names
    for _ in range(2):
        x2, skip2 = torch.randn_like(x), torch.randn_like(skip)
        with torch.no_grad():
            expected = model(x2, skip2)
        got = fast(x2, skip2)
        assert got.stride() == expected.stride()
        assert_matches_eager(got, expected)


def test_an_intermediate_read_elsewhere_is_not_fused():
    class Both(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 8, 3)

        def forward(self, x):
            y = self.conv(x)
            return torch.relu(y), y

    model, x = Both().eval(), torch.randn(1, 3, 10, 10)
    fast = nimble.Nimble(model).prepare(x)
    assert fast.schedule["ops"] == [LOWERED, "aten::relu"]
    with torch.no_grad():
        for got, want in zip(fast(x), model(x)):
            assert_matches_eager(got, want)


def test_what_the_pass_cannot_lower_keeps_the_aten_op():
    class Unlowerable(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.up = torch.nn.ConvTranspose2d(4, 4, 2, stride=2)
            self.line = torch.nn.Conv1d(4, 4, 3)
            self.cube = torch.nn.Conv3d(1, 2, (1, 3, 3))
            self.standardized = torch.nn.Conv2d(4, 4, 3)

        def forward(self, x):
            y = self.up(x)
            w = self.standardized.weight
            w = (w - w.mean()) / (w.std() + 1e-5)  # a weight the trace computes
            y = F.conv2d(y, w, self.standardized.bias)
            z = self.line(y.flatten(2))
            return y, z, self.cube(y[:, :1].unsqueeze(1)), F.conv2d(x.double(), self.standardized.weight.double())

    model, x = Unlowerable().eval(), torch.randn(1, 4, 6, 6)
    fast = nimble.Nimble(model).prepare(x)
    names = fast.schedule["ops"]
    assert LOWERED not in names
    assert sum(n.startswith("aten::convolution") for n in names) == 5
    assert fast.memory["prepacked_weight_bytes"] == 0
    with torch.no_grad():
        for got, want in zip(fast(x), model(x)):
            assert_matches_eager(got, want, tolerance=1e-5)


def _blocks():
    torch.manual_seed(0)
    conv = torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.BatchNorm2d(16), torch.nn.ReLU(inplace=True),
        torch.nn.Conv2d(16, 16, 1), torch.nn.BatchNorm2d(16), torch.nn.Hardswish(),
        torch.nn.Conv2d(16, 16, 3, groups=16), torch.nn.BatchNorm2d(16),
    ).eval()
    return conv, torch.randn(1, 3, 12, 12)


def _check(fast, model, x):
    with torch.no_grad():
        assert_matches_eager(fast(x), model(x))


def test_weights_written_in_place_after_prepare_are_seen():
    model, x = _blocks()
    fast = nimble.Nimble(model).prepare(x)
    assert fast.schedule["ops"].count(LOWERED) == 3
    _check(fast, model, x)
    with torch.no_grad():
        model[0].weight.mul_(-2)          # like an optimizer step
        model[3].bias.add_(1)
        model[4].running_var.mul_(3)     # a folded batch norm's buffer
        model[7].weight.uniform_()
    _check(fast, model, x)


def test_nan_from_a_folded_batch_norm_reaches_the_output_as_in_eager():
    # A negative running variance (found by the model-change fuzz after perturbed
    # load_state_dicts) makes eager's batch norm NaN; oneDNN's fused relu would turn NaN into
    # 0, so with non-finite weights the activation runs in ATen. Seen at prepare and after.
    model, x = _blocks()
    with torch.no_grad():
        model[1].running_var[2] = -1.0
    fast = nimble.Nimble(model).prepare(x)
    with torch.no_grad():
        want = model(x)
    assert want.isnan().any()
    assert_matches_eager(fast(x), want, equal_nan=True)
    with torch.no_grad():
        model[1].running_var.fill_(1.0)
        model[4].running_var[5] = -1.0
    assert_matches_eager(fast(x), model(x), equal_nan=True)


class _Residual(torch.nn.Module):
    """relu(bn(conv(x)) + bn(downsample(x))): the add and relu fuse into the first
    convolution, whose own weights stay finite."""

    def __init__(self):
        super().__init__()
        self.conv, self.bn = torch.nn.Conv2d(4, 8, 3, padding=1), torch.nn.BatchNorm2d(8)
        self.down, self.down_bn = torch.nn.Conv2d(4, 8, 1), torch.nn.BatchNorm2d(8)

    def forward(self, x):
        return torch.relu(self.bn(self.conv(x)) + self.down_bn(self.down(x)))


def test_nan_from_another_convolution_reaches_a_fused_residual_as_in_eager():
    torch.manual_seed(0)
    model, x = _Residual().eval(), torch.randn(1, 4, 8, 8)
    fast = nimble.Nimble(model).prepare(x)
    assert fast.schedule["ops"].count(LOWERED) == 2
    _check(fast, model, x)
    with torch.no_grad():
        model.down_bn.running_var[3] = -1.0   # NaN in the residual only
        want = model(x)
    assert want[0, 3].isnan().all() and not want[0, 2].isnan().any()
    assert_matches_eager(fast(x), want, equal_nan=True)
    with torch.no_grad():
        model.down_bn.running_var[3] = 1.0    # finite again: fused again, equal again
    _check(fast, model, x)


def test_load_state_dict_after_prepare_is_seen():
    model, x = _blocks()
    fast = nimble.Nimble(model).prepare(x)
    other, _ = _blocks()
    with torch.no_grad():
        for p in other.parameters():
            p.uniform_(-1, 1)
        for m in other.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.uniform_(-1, 1)
    model.load_state_dict(other.state_dict())
    _check(fast, model, x)


def test_a_weight_whose_storage_is_swapped_is_repacked():
    model, x = _blocks()
    fast = nimble.Nimble(model).prepare(x)
    _check(fast, model, x)
    # `.data =` keeps the parameter object and swaps its storage; the version counter of
    # the new data can equal the old one's.
    model[3].weight.data = torch.randn_like(model[3].weight)
    _check(fast, model, x)


def test_prepacked_weight_bytes_are_reported_and_lowering_can_be_turned_off():
    model, x = build("torchvision:resnet18", image_size=32)
    fast = nimble.Nimble(model).prepare(x)
    # The convolutions and the classifier (one row of 512 by 1000: the product on the
    # weight transposed once, its own size); nimble's kernels pad a weight's columns to the
    # vector width and keep the folded bias and each tap's input offsets beside it.
    weight_bytes = sum(m.weight.nbytes for m in model.modules()
                       if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear)))
    assert weight_bytes <= fast.memory["prepacked_weight_bytes"] <= 1.1 * weight_bytes
    assert fast.schedule["ops"].count(LOWERED) == 20
    plain = nimble.Nimble(model).prepare(x, lower_for_cpu=False)
    assert plain.memory["prepacked_weight_bytes"] == 0
    assert LOWERED not in plain.schedule["ops"]
    assert "aten::convolution" in plain.schedule["ops"]


def test_training_replays_are_not_lowered():
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU())
    fast = nimble.Nimble(model).prepare(torch.randn(2, 3, 8, 8), training=True)
    assert all(LOWERED not in op["name"] for op in fast.replay.ops())


ZOO_SAMPLE = ["resnet18", "mobilenet_v2", "googlenet", "shufflenet_v2_x1_0", "efficientnet_b0"]


@pytest.mark.parametrize("batch,image_size", [(1, 64), (2, 32)])
@pytest.mark.parametrize("name", TORCHVISION_MODELS if FULL else ZOO_SAMPLE)
def test_lowered_zoo_matches_eager(name, batch, image_size):
    model, example = build(f"torchvision:{name}", batch=batch, image_size=image_size)
    fast = nimble.Nimble(model).prepare(example)
    if name != "vit_b_16":  # one patchifying convolution, the rest linear layers
        assert fast.schedule["ops"].count(LOWERED) > 1
    for seed in (1, 2):
        torch.manual_seed(seed)
        x = torch.randn_like(example)
        with torch.no_grad():
            expected = model(x)
        assert_matches_eager(fast(x), expected, what=f"{name} seed {seed}")


def test_poolings_between_convolutions_stay_channels_last_and_outputs_keep_eagers_layout():
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = torch.nn.Conv2d(3, 16, 3, padding=1)
            self.b = torch.nn.Conv2d(16, 16, 3, padding=1)

        def forward(self, x):
            pooled = F.max_pool2d(torch.relu(self.a(x)), 3, 2, ceil_mode=True)
            y = self.b(F.avg_pool2d(pooled, 2))
            return y, pooled  # the pooled value is also returned: it is converted back

    model, x = Net().eval(), torch.randn(1, 3, 20, 20)
    fast = nimble.Nimble(model).prepare(x)
    names = fast.schedule["ops"]
    assert names.count(LOWERED) == 2
    assert sum(n.startswith("aten::clone") for n in names) == 1, names
    with torch.no_grad():
        for got, want in zip(fast(x), model(x)):
            assert got.stride() == want.stride()
            assert_matches_eager(got, want)

"""ShuffleNet's channel shuffle in the CPU lowering (csrc/passes/channel_shuffle_fusion.h,
cpu_layout_plan.h): the concatenation and the four ops of the shuffle become one
`nimble::channel_shuffle` op, kept channels_last between the convolutions, and the split
after it hands its pieces to the next convolution and concatenation as slices of the planned
value, with no copies between; results stay eager's."""

import random

import pytest
import torch
import torchvision

import nimble
from nimble.testing import assert_matches_eager

ATEN_COPIES = {"aten::clone", "aten::transpose.int", "aten::view", "aten::cat", "aten::cat.out"}


def reference_shuffle(x: torch.Tensor, groups: int) -> torch.Tensor:
    """torchvision's channel_shuffle."""
    n, c, h, w = x.shape
    return x.view(n, groups, c // groups, h, w).transpose(1, 2).contiguous().view(n, c, h, w)


def _check(model, x, fused: int | None = None):
    fast = nimble.Nimble(model).prepare(x)
    ops = fast.schedule["ops"]
    if fused is not None:
        assert ops.count("nimble::channel_shuffle_nhwc") == fused, ops
    with torch.no_grad():
        expected = model(x)
    got = fast(x)
    assert got.shape == expected.shape and got.stride() == expected.stride()
    assert_matches_eager(got, expected)
    return ops


class ShuffleBlock(torch.nn.Module):
    """ShuffleNet v2's unit, generalised: the input's channels split in `pieces`, the last
    piece through a 1x1, depthwise 3x3 and 1x1 convolution, concatenated back and shuffled
    in `groups`."""

    def __init__(self, pieces: list[int], groups: int, mid: int):
        super().__init__()
        self.pieces = pieces
        last = pieces[-1]
        self.branch = torch.nn.Sequential(
            torch.nn.Conv2d(last, mid, 1), torch.nn.BatchNorm2d(mid), torch.nn.ReLU(inplace=True),
            torch.nn.Conv2d(mid, mid, 3, padding=1, groups=mid), torch.nn.BatchNorm2d(mid),
            torch.nn.Conv2d(mid, last, 1), torch.nn.ReLU(inplace=True))
        self.groups = groups

    def forward(self, x):
        parts = list(x.split(self.pieces, dim=1))
        parts[-1] = self.branch(parts[-1])
        return reference_shuffle(torch.cat(parts, dim=1), self.groups)


class ShuffleNetLike(torch.nn.Module):
    def __init__(self, channels: int, pieces: list[int], groups: int, blocks: int):
        super().__init__()
        self.stem = torch.nn.Conv2d(3, channels, 3, stride=2, padding=1)
        self.blocks = torch.nn.Sequential(
            *[ShuffleBlock(pieces, groups, mid=pieces[-1] + 3) for _ in range(blocks)])
        self.head = torch.nn.Conv2d(channels, 10, 1)

    def forward(self, x):
        return self.head(self.blocks(torch.relu(self.stem(x))))


@pytest.mark.parametrize("seed", range(12))
def test_random_shuffle_units_match_eager_with_one_op_each(seed):
    rng = random.Random(seed)
    groups = rng.choice([2, 2, 3, 4])
    channels = groups * rng.randint(3, 12)
    # ShuffleNet's halves, or a split in up to three pieces of any widths.
    count = 2 if rng.random() < 0.5 else rng.randint(2, 3)
    cuts = sorted(rng.sample(range(1, channels), count - 1))
    pieces = [b - a for a, b in zip([0] + cuts, cuts + [channels])]
    blocks = rng.randint(1, 3)
    model = ShuffleNetLike(channels, pieces, groups, blocks).eval()
    x = torch.randn(rng.randint(1, 2), 3, rng.randint(6, 20), rng.randint(6, 20))
    ops = _check(model, x, fused=blocks)
    assert not ATEN_COPIES & set(ops), ops


@pytest.mark.parametrize("batch,size", [(1, 64), (2, 96)])
def test_shufflenet_runs_each_shuffle_as_one_op_without_copies(batch, size):
    torch.manual_seed(0)
    model = torchvision.models.shufflenet_v2_x0_5(weights=None).eval()
    ops = _check(model, torch.randn(batch, 3, size, size), fused=16)
    assert not ATEN_COPIES & set(ops), ops
    # The 13 stride-1 units split the shuffled value; their pieces are read where they lie.
    assert ops.count("aten::split.Tensor") == 13


class ShuffleReadTwice(torch.nn.Module):
    """A shuffle whose transposed view is also returned: the four ops must stay."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 1)

    def forward(self, x):
        y = self.conv(x)
        grouped = y.view(y.shape[0], 2, 4, y.shape[2], y.shape[3]).transpose(1, 2)
        return grouped.contiguous().view_as(y) * 2, grouped.sum()


def test_a_shuffle_whose_views_are_read_elsewhere_keeps_atens_ops():
    model = ShuffleReadTwice().eval()
    x = torch.randn(1, 3, 5, 5)
    fast = nimble.Nimble(model).prepare(x)
    names = fast.schedule["ops"]
    assert "aten::transpose.int" in names and not any("channel_shuffle" in n for n in names)
    with torch.no_grad():
        expected = model(x)
    for g, e in zip(fast(x), expected):
        assert_matches_eager(g, e)


class PieceReadByAnActivation(torch.nn.Module):
    """A split piece an elementwise op reads: that piece needs the model's layout back."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Conv2d(3, 12, 1)
        self.b = torch.nn.Conv2d(6, 6, 1)

    def forward(self, x):
        y = reference_shuffle(torch.relu(self.a(x)), 3)
        left, right = y.chunk(2, dim=1)
        return torch.cat([torch.sigmoid(left), self.b(right)], dim=1)


def test_a_piece_read_by_an_op_without_a_slice_kernel_stays_equal_to_eager():
    _check(PieceReadByAnActivation().eval(), torch.randn(2, 3, 7, 9))


def test_a_shuffle_outside_the_planned_layout_runs_the_generic_op():
    # No convolution: nothing is channels_last, the fused op keeps torch's contiguous result.
    class Shuffle(torch.nn.Module):
        def forward(self, a, b):
            return reference_shuffle(torch.cat([a, b], dim=1), 2) + 1

    a, b = torch.randn(1, 6, 4, 5), torch.randn(1, 4, 4, 5)
    fast = nimble.Nimble(Shuffle()).prepare((a, b))
    assert "nimble::channel_shuffle" in fast.schedule["ops"]
    got = fast(a, b)
    assert got.is_contiguous()
    assert_matches_eager(got, reference_shuffle(torch.cat([a, b], dim=1), 2) + 1, tolerance=1e-5)


def test_lowering_off_keeps_atens_ops():
    model = ShuffleNetLike(8, [4, 4], 2, 1).eval()
    x = torch.randn(1, 3, 8, 8)
    fast = nimble.Nimble(model).prepare(x, lower_for_cpu=False)
    assert not any("channel_shuffle" in n for n in fast.schedule["ops"])
    assert_matches_eager(fast(x), model(x), tolerance=1e-5)


@pytest.mark.parametrize("layout", ["contiguous", "channels_last", "pieces"])
@pytest.mark.parametrize("groups", [1, 2, 3])
def test_the_ops_equal_torchs_shuffle_of_the_concatenation(layout, groups):
    torch.manual_seed(groups)
    wide = torch.randn(2, 12, 5, 3)
    if layout == "pieces":  # slices of a channels_last tensor's channels, as a split gives
        tensors = list(wide.contiguous(memory_format=torch.channels_last).split([3, 9], dim=1))
    else:
        fmt = torch.channels_last if layout == "channels_last" else torch.contiguous_format
        tensors = [t.contiguous(memory_format=fmt) for t in (wide[:, :5], wide[:, 5:])]
    expected = reference_shuffle(torch.cat(tensors, dim=1), groups)
    generic = torch.ops.nimble.channel_shuffle(tensors, groups)
    assert generic.is_contiguous()
    torch.testing.assert_close(generic, expected, rtol=0, atol=0)
    nhwc = torch.ops.nimble.channel_shuffle_nhwc(tensors, groups)
    assert nhwc.is_contiguous(memory_format=torch.channels_last)
    torch.testing.assert_close(nhwc, expected, rtol=0, atol=0)
    cat = torch.ops.nimble.cat_nhwc(tensors)
    assert cat.is_contiguous(memory_format=torch.channels_last)
    torch.testing.assert_close(cat, torch.cat(tensors, dim=1), rtol=0, atol=0)


def test_groups_that_do_not_divide_the_channels_are_refused_clearly():
    with pytest.raises(RuntimeError, match="expected groups dividing the 10 channels, got 3"):
        torch.ops.nimble.channel_shuffle_nhwc([torch.randn(1, 10, 2, 2)], 3)
    with pytest.raises(RuntimeError, match="expected 4-d tensors"):
        torch.ops.nimble.channel_shuffle([torch.randn(10, 2, 2)], 2)


def test_weights_changed_after_prepare_are_seen_through_the_shuffles():
    torch.manual_seed(3)
    model = ShuffleNetLike(12, [6, 6], 2, 2).eval()
    x = torch.randn(1, 3, 12, 12)
    fast = nimble.Nimble(model).prepare(x)
    with torch.no_grad():
        model.blocks[0].branch[0].weight.mul_(-0.5)  # in place
        model.blocks[1].branch[5].weight.data = torch.randn_like(model.blocks[1].branch[5].weight)
        model.blocks[1].branch[1].running_var.add_(1.0)  # a folded batch norm's statistic
        expected = model(x)
    assert_matches_eager(fast(x), expected)

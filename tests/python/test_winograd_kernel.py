"""nimble_winograd (csrc/kernels/cpu/channels_last/winograd_convolution.h: Winograd F(2x2, 3x3)
for dense 3x3 convolutions of stride 1) as the lowered convolution runs it
(PrepackedConvolution with the kernel forced): random shapes (channels 1..67, maps 1..40 of odd
and even sizes, padding 0 or 1, batch 1..3, residual, every fused activation) against eager's
conv2d on one thread and on two, with each vector extension this CPU has; the geometries it
refuses; and the rule that picks it in whole lowered models, with NIMBLE_WINOGRAD's override.

The C++ suite (tests/cpp/kernels/nhwc_winograd_test.cpp) bounds its float error against a
double-precision reference; here assert_matches_eager's tolerance (relative to the output's
scale) applies, as for every other kernel of the lowering."""

import os
import random
import subprocess
import sys

import pytest
import torch

import nimble
import nimble._C  # noqa: F401  (the extension registers the kernels)
from nimble.testing import assert_matches_eager
from test_nhwc_kernels import ACTIVATIONS, expected, make, on_one_and_two_threads

CPU_FLAGS = open("/proc/cpuinfo").read()


def random_case(case: int):
    rng = random.Random(4600 + case)
    torch.manual_seed(case)
    conv = torch.nn.Conv2d(rng.randint(1, 67), rng.randint(1, 67), 3,
                           padding=rng.choice([0, 1, (1, 0), (0, 1)]),
                           bias=rng.random() < 0.7).eval()
    pad_h, pad_w = conv.padding
    x = torch.randn(rng.randint(1, 3), conv.in_channels,
                    max(rng.randint(1, 40), 3 - 2 * pad_h), max(rng.randint(1, 40), 3 - 2 * pad_w))
    if rng.random() < 0.5:
        x = x.contiguous(memory_format=torch.channels_last)
    activation = list(ACTIVATIONS)[case % len(ACTIVATIONS)]
    with torch.no_grad():
        skip = torch.randn_like(conv(x)) if rng.random() < 0.5 else None
    return conv, x, activation, skip


@pytest.mark.parametrize("case", range(40))
def test_random_shapes_with_every_epilogue_match_eager_on_one_and_two_threads(case):
    conv, x, activation, skip = random_case(case)
    packed = make(conv, activation, skip is not None, x, "nimble_winograd")
    assert packed.describe().startswith("nimble_winograd("), packed.describe()
    one, two = on_one_and_two_threads(x, skip, packed)
    assert one.is_contiguous(memory_format=torch.channels_last)
    assert torch.equal(one, two)  # each output is computed in one piece either way
    assert_matches_eager(two, expected(conv, activation, x, skip))


def test_large_maps_split_over_threads_match_eager():
    torch.manual_seed(0)
    for c, k, size in [(64, 64, 56), (128, 96, 28), (512, 512, 7)]:
        conv = torch.nn.Conv2d(c, k, 3, padding=1).eval()
        x = torch.randn(1, c, size, size).contiguous(memory_format=torch.channels_last)
        with torch.no_grad():
            skip = torch.randn_like(conv(x))
        packed = make(conv, "relu", True, x, "nimble_winograd")
        one, two = on_one_and_two_threads(x, skip, packed)
        assert torch.equal(one, two)
        assert_matches_eager(two, expected(conv, "relu", x, skip))


@pytest.mark.parametrize("conv", [
    torch.nn.Conv2d(8, 8, 3, stride=2, padding=1),
    torch.nn.Conv2d(8, 8, 3, padding=2, dilation=2),
    torch.nn.Conv2d(8, 8, 3, padding=1, groups=2),
    torch.nn.Conv2d(8, 8, 5, padding=2),
    torch.nn.Conv2d(8, 8, (3, 1), padding=(1, 0)),
], ids=["stride", "dilation", "groups", "5x5", "3x1"])
def test_what_it_cannot_compute_is_refused_by_name(conv):
    x = torch.randn(1, 8, 9, 9)
    with pytest.raises(RuntimeError, match="nimble_winograd computes 3x3 convolutions of stride 1"):
        make(conv.eval(), "none", False, x, "nimble_winograd")


WINOGRAD_CASES = """
import sys
sys.path.insert(0, sys.argv[1])
import torch
from test_winograd_kernel import random_case
from test_nhwc_kernels import expected, make
from nimble.testing import assert_matches_eager
for case in range(12):
    conv, x, activation, skip = random_case(case)
    packed = make(conv, activation, skip is not None, x, "nimble_winograd")
    got = torch.ops.nimble.convolution_prepacked(x, skip, packed)
    assert_matches_eager(got, expected(conv, activation, x, skip), what=f"case {case}")
print(packed.describe().split(" ")[0])
"""


@pytest.mark.parametrize("isa", ["avx2", "portable"])
def test_each_narrower_vector_extension_matches_eager(isa):
    """NIMBLE_CPU_ISA runs the kernel's AVX2 or portable code (transforms and products)."""
    if isa == "avx2" and "avx2" not in CPU_FLAGS:
        pytest.skip("this CPU has no AVX2")
    env = {**os.environ, "NIMBLE_CPU_ISA": isa}
    done = subprocess.run([sys.executable, "-c", WINOGRAD_CASES, os.path.dirname(__file__)],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == f"nimble_winograd({isa})", done.stdout


LOWERED_MODEL = """
import torch, nimble, torchvision
from nimble.testing import assert_matches_eager
torch.manual_seed(0)
model = torchvision.models.resnet18(num_classes=10).eval()
x = torch.randn(2, 3, 45, 45)
fast = nimble.Nimble(model).prepare(x)
with torch.no_grad():
    assert_matches_eager(fast(x), model(x))
    # Written in place after prepare: the packed (transformed) weights follow.
    model.layer1[0].conv1.weight.mul_(1.5)
    model.layer1[0].bn1.running_var.mul_(2.0)
    model.layer4[1].conv2.weight.add_(0.01)
    assert_matches_eager(fast(x), model(x), what="after in-place writes")
print(sorted(op["kernel"].split(" ")[0] for op in fast.replay.ops() if "kernel" in op))
"""


@pytest.mark.skipif("avx2" not in CPU_FLAGS, reason="without AVX2 oneDNN takes every layer")
def test_the_rule_picks_it_by_input_channels_and_output_pixels_and_the_switch_overrides():
    """The rule (unset or NIMBLE_WINOGRAD=auto): resnet18's 3x3 layers of stride 1 with at
    least 32 input channels and 32 output pixels (batch x map) run on it, the others (layer3's
    3x3 maps at batch 2: 18 pixels, layer4's 2x2: 8) on nimble_gemm; NIMBLE_WINOGRAD=1 picks it for all 13, 0
    for none. Each replay gives eager's result, also after weights and a folded batch norm's
    statistics are written in place (the transformed weights are packed again)."""
    runs = {}
    for asked in ("1", "0", "auto", None):
        env = {k: v for k, v in os.environ.items() if k != "NIMBLE_WINOGRAD"}
        if asked is not None:
            env["NIMBLE_WINOGRAD"] = asked
        done = subprocess.run([sys.executable, "-c", LOWERED_MODEL], env=env,
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        kernels = eval(done.stdout.strip().splitlines()[-1])
        runs[asked] = sum(k.startswith("nimble_winograd") for k in kernels)
    # 16 3x3 layers, 3 of them of stride 2; of the 13, 3 on layer3's 3x3 maps, 3 on layer4's
    # 2x2 maps.
    assert runs == {"1": 13, "0": 0, "auto": 7, None: 7}, runs


ODD_MAPS = """
import torch, nimble
from nimble.testing import assert_matches_eager
torch.manual_seed(0)
for batch, side in ((1, 7), (1, 8), (2, 7), (1, 9), (1, 14)):
    model = torch.nn.Sequential(torch.nn.Conv2d(64, 64, 3, padding=1), torch.nn.ReLU()).eval()
    x = torch.randn(batch, 64, side, side)
    fast = nimble.Nimble(model).prepare(x)
    with torch.no_grad():
        assert_matches_eager(fast(x), model(x))
    print(batch, side, [op["kernel"].split("(")[0] for op in fast.replay.ops() if "kernel" in op])
"""


@pytest.mark.skipif("avx2" not in CPU_FLAGS, reason="without AVX2 oneDNN takes every layer")
def test_the_rule_leaves_odd_maps_of_few_tiles_to_the_gemm_form():
    """An odd output map of fewer than 32 tiles (batch x 2x2 tiles: 7x7 and 9x9 at batch 1)
    runs on nimble_gemm; 8x8 (16 whole tiles), 7x7 at batch 2 (32 tiles) and 14x14 on
    nimble_winograd; each equal to eager."""
    env = {k: v for k, v in os.environ.items() if k != "NIMBLE_WINOGRAD"}
    done = subprocess.run([sys.executable, "-c", ODD_MAPS], env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    kernels = {tuple(map(int, line.split()[:2])): eval(line.split(" ", 2)[2])
               for line in done.stdout.strip().splitlines()}
    assert kernels == {(1, 7): ["nimble_gemm"], (1, 8): ["nimble_winograd"],
                       (2, 7): ["nimble_winograd"], (1, 9): ["nimble_gemm"],
                       (1, 14): ["nimble_winograd"]}, kernels


def test_an_unknown_switch_value_is_refused_by_name():
    """The lowering fails on it, and like any lowering failure that keeps the model working
    (ATen's convolutions) with a warning that names the value."""
    env = {**os.environ, "NIMBLE_WINOGRAD": "yes"}
    done = subprocess.run([sys.executable, "-c", LOWERED_MODEL], env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "NIMBLE_WINOGRAD: expected 0, 1 or auto, got 'yes'" in done.stderr
    assert not any(k.startswith("nimble_") for k in eval(done.stdout.strip().splitlines()[-1]))

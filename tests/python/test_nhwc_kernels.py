"""nimble's own channels-last convolution kernels (csrc/kernels/cpu/channels_last/), called through
the lowered convolution with the kernel forced (PrepackedConvolution.make): random
geometries and every fused epilogue against eager's conv2d, on one thread and on two (the
work split over threads must not change a result), inputs in either layout, NaN kept.

The C++ suites (tests/cpp/kernels/nhwc_*_test.cpp) test the kernels themselves for every
vector extension the CPU has; this file tests them as a replay calls them."""

import os
import random
import subprocess
import sys
import threading
import time

import pytest
import torch
import torch.nn.functional as F

import nimble
import nimble._C  # noqa: F401  (the extension registers the kernels)
from nimble.testing import assert_matches_eager
from nimble.zoo import build

# The activation as make() names it -> eager's function (relu6's bounds for hardtanh, 0.01
# for leaky_relu, as make() sets them).
ACTIVATIONS = {
    "none": lambda y: y,
    "relu": F.relu,
    "hardtanh": F.relu6,
    "leaky_relu": lambda y: F.leaky_relu(y, 0.01),
    "hardswish": F.hardswish,
    "hardsigmoid": F.hardsigmoid,
    "swish": F.silu,
    "sigmoid": torch.sigmoid,
    "tanh": torch.tanh,
    "gelu": F.gelu,
}


def make(conv, activation, residual, x, kernel):
    return torch.classes.nimble.PrepackedConvolution.make(
        conv.weight.detach(), None if conv.bias is None else conv.bias.detach(),
        list(conv.stride), list(conv.padding), list(conv.dilation), conv.groups, activation,
        residual, x, kernel)


def expected(conv, activation, x, skip):
    with torch.no_grad():
        y = conv(x)
        return ACTIVATIONS[activation](y if skip is None else y + skip)


def random_conv(rng: random.Random, depthwise: bool):
    c = rng.randint(1, 70)
    if depthwise:
        groups, c_in, c_out = c, c, c
    else:
        groups = rng.choice([1, 1, 1, 2, 3])
        c_in, c_out = groups * rng.randint(1, 40), groups * rng.randint(1, 40)
    kernel = (rng.randint(1, 5), rng.randint(1, 5)) if rng.random() < 0.3 else rng.choice([1, 3, 5])
    return torch.nn.Conv2d(c_in, c_out, kernel, stride=rng.choice([1, 1, 2, (1, 2), 3]),
                           padding=rng.choice([0, 1, 2, (1, 0)]), dilation=rng.choice([1, 1, 2]),
                           groups=groups, bias=rng.random() < 0.7).eval()


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("kernel", ["nimble_depthwise", "nimble_gemm"])
@pytest.mark.parametrize("case", range(24))
def test_random_convolutions_with_every_epilogue_match_eager(kernel, case, threads):
    rng = random.Random(case * 7 + (kernel == "nimble_gemm"))
    torch.manual_seed(case)
    conv = random_conv(rng, depthwise=kernel == "nimble_depthwise")
    kh, kw = conv.kernel_size
    size_h = rng.randint(1, 20) + (kh - 1) * conv.dilation[0]
    size_w = rng.randint(1, 20) + (kw - 1) * conv.dilation[1]
    x = torch.randn(rng.choice([1, 1, 2]), conv.in_channels, size_h, size_w)
    if rng.random() < 0.5:
        x = x.contiguous(memory_format=torch.channels_last)
    activation = list(ACTIVATIONS)[case % len(ACTIVATIONS)]
    with torch.no_grad():
        skip = torch.randn_like(conv(x)) if rng.random() < 0.5 else None
    packed = make(conv, activation, skip is not None, x, kernel)
    assert packed.describe().startswith(kernel), packed.describe()
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        got = torch.ops.nimble.convolution_prepacked(x, skip, packed)
    finally:
        torch.set_num_threads(before)
    assert got.is_contiguous(memory_format=torch.channels_last)
    assert_matches_eager(got, expected(conv, activation, x, skip))


def on_one_and_two_threads(x, skip, packed):
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = torch.ops.nimble.convolution_prepacked(x, skip, packed)
        torch.set_num_threads(2)
        return one, torch.ops.nimble.convolution_prepacked(x, skip, packed)
    finally:
        torch.set_num_threads(before)


# Below this many multiply-adds a convolution runs on the calling thread alone
# (kernels/cpu/torch_ops/nhwc_convolution.cpp): the random cases above are mostly smaller.
PARALLEL_FROM = 200_000


@pytest.mark.parametrize("case", range(len(ACTIVATIONS)))
def test_depthwise_convolutions_large_enough_to_split_match_one_thread_and_eager(case):
    rng = random.Random(500 + case)
    torch.manual_seed(case)
    multiply_adds = 0
    while multiply_adds < PARALLEL_FROM:  # drawn again until the work is split
        c = rng.choice([24, 40, 64, 96])
        conv = torch.nn.Conv2d(c, c, rng.choice([3, 5, (3, 5)]), stride=rng.choice([1, 2]),
                               padding=rng.choice([0, 1, 2]), dilation=rng.choice([1, 2]),
                               groups=c, bias=rng.random() < 0.7).eval()
        x = torch.randn(rng.choice([1, 2]), c, rng.randint(30, 44), rng.randint(30, 44))
        with torch.no_grad():
            y = conv(x)
        multiply_adds = y.numel() * conv.weight[0].numel()
    activation = list(ACTIVATIONS)[case]
    skip = torch.randn_like(y) if case % 2 else None
    packed = make(conv, activation, skip is not None, x, "nimble_depthwise")
    one, two = on_one_and_two_threads(x, skip, packed)
    assert torch.equal(one, two)  # each output row is computed in one piece either way
    assert_matches_eager(two, expected(conv, activation, x, skip))


@pytest.mark.parametrize("kernel", ["nimble_depthwise", "nimble_gemm"])
def test_large_layers_split_over_threads_match_one_thread(kernel):
    torch.manual_seed(0)
    c = 96
    conv = torch.nn.Conv2d(c, c, 3, padding=1, groups=c if kernel == "nimble_depthwise" else 1)
    x = torch.randn(1, c, 56, 56).contiguous(memory_format=torch.channels_last)
    packed = make(conv.eval(), "relu", False, x, kernel)
    one, two = on_one_and_two_threads(x, None, packed)
    assert torch.equal(one, two)
    assert_matches_eager(one, expected(conv, "relu", x, None))


@pytest.mark.parametrize("stem", [(64, 7, 2, 3, 2, 67, 61), (32, 3, 2, 1, 2, 65, 47),
                                  (96, 4, 4, 0, 1, 64, 64), (64, 7, 2, 3, 1, 224, 224)])
def test_stems_read_an_nchw_input_as_they_read_its_channels_last_copy(stem):
    # A program's NCHW input reaches its stem through nimble's 3-channel copy (channel_ops.cpp):
    # odd sizes, padding, strides and batch 2; large enough at 224 to split over two threads.
    out, kernel, stride, pad, batch, h, w = stem
    torch.manual_seed(stride * kernel)
    conv = torch.nn.Conv2d(3, out, kernel, stride, pad).eval()
    x = torch.randn(batch, 3, h, w)
    packed = make(conv, "relu", False, x, "nimble_gemm")
    one, two = on_one_and_two_threads(x, None, packed)
    copied, _ = on_one_and_two_threads(x.contiguous(memory_format=torch.channels_last), None,
                                       packed)
    assert torch.equal(one, two) and torch.equal(one, copied)
    assert_matches_eager(one, expected(conv, "relu", x, None))


@pytest.mark.parametrize("kernel", ["nimble_depthwise", "nimble_gemm"])
def test_nan_in_the_input_stays_nan_through_relu(kernel):
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(16, 16, 3, padding=1, groups=16 if kernel == "nimble_depthwise" else 1)
    x = torch.randn(1, 16, 6, 6)
    x[0, 3, 2, 2] = float("nan")
    packed = make(conv.eval(), "relu", False, x, kernel)
    got = torch.ops.nimble.convolution_prepacked(x, None, packed)
    want = expected(conv, "relu", x, None)
    assert torch.equal(got.isnan(), want.isnan()) and got.isnan().any()


def test_an_input_of_other_sizes_is_refused_with_both_shapes():
    conv = torch.nn.Conv2d(8, 8, 3, padding=1, groups=8).eval()
    packed = make(conv, "none", False, torch.randn(1, 8, 10, 10), "nimble_depthwise")
    with pytest.raises(RuntimeError, match=r"expected a float input of sizes \[1, 8, 10, 10\].*"
                                           r"got \[1, 8, 12, 12\]"):
        torch.ops.nimble.convolution_prepacked(torch.randn(1, 8, 12, 12), None, packed)


def test_an_unknown_kernel_name_is_refused():
    conv = torch.nn.Conv2d(8, 8, 1).eval()
    with pytest.raises(RuntimeError, match="expected the kernel 'onednn_prepacked'.*got 'blas'"):
        make(conv, "none", False, torch.randn(1, 8, 4, 4), "blas")


CAPPED = """
import torch, nimble, nimble._C
from nimble.testing import assert_matches_eager
from nimble.zoo import build
torch.manual_seed(0)
model, x = build("torchvision:mobilenet_v2", image_size=32)
fast = nimble.Nimble(model).prepare(x)
x = torch.randn_like(x)  # not the example prepare ran
with torch.no_grad():
    assert_matches_eager(fast(x), model(x))
print(sorted({op["kernel"].split(" ")[0] for op in fast.replay.ops() if "kernel" in op}))
print(nimble._C.kernels.device_key())
"""


@pytest.mark.parametrize("isa", ["avx2", "portable"])
def test_a_capped_vector_extension_runs_that_code_and_the_rule_for_it(isa):
    """NIMBLE_CPU_ISA runs the kernels' narrower code on this CPU, end to end: what an AVX2
    machine (or one without AVX2, where oneDNN takes every convolution) runs."""
    if isa == "avx2" and "avx2" not in open("/proc/cpuinfo").read():
        pytest.skip("this CPU has no AVX2")
    env = {**os.environ, "NIMBLE_CPU_ISA": isa}
    done = subprocess.run([sys.executable, "-c", CAPPED], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    kernels, key = done.stdout.strip().splitlines()[-2:]
    if isa == "avx2":
        assert "nimble_depthwise(avx2)" in kernels and "nimble_gemm(avx2)" in kernels, kernels
    else:
        assert "nimble_" not in kernels and "onednn_prepacked" in kernels, kernels
    if "avx512" in key.split(" kernels ")[0]:  # capped below what this CPU has: said so
        assert key.endswith(f" kernels {isa}"), key


def test_an_unknown_capped_vector_extension_is_refused():
    env = {**os.environ, "NIMBLE_CPU_ISA": "avx9000"}
    done = subprocess.run([sys.executable, "-c", CAPPED], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode != 0
    assert "NIMBLE_CPU_ISA: expected avx512, avx2 or portable, got 'avx9000'" in done.stderr


@pytest.mark.parametrize("size,kernel", [(8, "nimble_gemm"), (56, "onednn_prepacked")])
def test_groups_of_few_channels_go_to_onednn_only_with_much_work(size, kernel):
    """4 channels a group: 0.3 M multiply-adds at 8x8 pixels (nimble's product: oneDNN's fixed
    cost is most of its call), 14 M at 56x56 (oneDNN)."""
    if "avx2" not in open("/proc/cpuinfo").read():
        pytest.skip("without AVX2 oneDNN takes every convolution")
    model = torch.nn.Sequential(torch.nn.Conv2d(128, 128, 3, padding=1, groups=32)).eval()
    x = torch.randn(1, 128, size, size)
    fast = nimble.Nimble(model).prepare(x)
    kernels = [op["kernel"] for op in fast.replay.ops() if "kernel" in op]
    assert len(kernels) == 1 and kernels[0].startswith(kernel), kernels
    with torch.no_grad():
        assert_matches_eager(fast(x), model(x))


def _replays(fast, inputs, pause_s=0.0):
    """Each input's result, the inputs called in turn (a stale result shows), after a pause."""
    got = []
    for x in inputs:
        time.sleep(pause_s)
        got.append(fast(x))
    return got


def _with_helpers_stalled(call):
    """call()'s result, run while the kernels' helper threads take no work. On a thread of its
    own, so that a replay that waits for the helpers fails here rather than hanging (it would
    wait until the stall ends)."""
    result = []
    previous = nimble._C._stall_kernel_helpers(True)
    try:
        pieces = nimble._C._kernel_helper_pieces()
        caller = threading.Thread(target=lambda: result.append(call()))
        caller.start()
        caller.join(timeout=60)
        finished = not caller.is_alive()
        assert nimble._C._kernel_helper_pieces() == pieces, "a stalled helper ran a piece"
    finally:
        nimble._C._stall_kernel_helpers(previous)
    caller.join()
    assert finished, "a replay waited for stalled helper threads"
    assert result, "the replay raised (see the thread's traceback above)"
    return result[0]


def _helpers_took_pieces(fast, x, pause_s=0.0, calls=50) -> bool:
    """Whether the helper threads ran some piece of the replays of x (at most `calls` of them,
    each after a pause: a helper wakes when the caller publishes work, and on a loaded machine
    it may find every piece taken on one call, rarely on fifty)."""
    pieces = nimble._C._kernel_helper_pieces()
    for _ in range(calls):
        time.sleep(pause_s)
        fast(x)
        if nimble._C._kernel_helper_pieces() > pieces:
            return True
    return False


@pytest.mark.parametrize("spec", ["torchvision:mobilenet_v2", "torchvision:googlenet",
                                  "torchvision:efficientnet_b0"])
def test_replays_split_with_helpers_and_give_the_same_numbers_however_called(spec):
    # Every replay of a lowered program splits nimble's kernels through the helper threads,
    # ATen's ops between them (efficientnet's squeeze-excitation `mul`) on the caller: back to
    # back, after idle spells (the helpers asleep) and with the helpers stalled (the caller
    # runs every piece), the pieces are the same, so are the numbers, bit for bit.
    model, example = build(spec, image_size=32)
    fast = nimble.Nimble(model).prepare(example)
    assert fast.schedule["shares_work"]
    inputs = [torch.randn_like(example), torch.randn_like(example)]
    want = _replays(fast, inputs)
    runs = {"back to back": _replays(fast, inputs + inputs)[2:],
            "after idle": _replays(fast, inputs, pause_s=0.06)}
    runs["helpers stalled"] = _with_helpers_stalled(lambda: _replays(fast, inputs))
    assert _helpers_took_pieces(fast, inputs[0]), "no helper ran a piece back to back"
    assert _helpers_took_pieces(fast, inputs[0], pause_s=0.06, calls=40), \
        "no helper ran a piece after idle spells"
    with torch.no_grad():
        eager = [model(x) for x in inputs]
    for i in range(2):
        for how, got in runs.items():
            assert torch.equal(got[i], want[i]), f"input {i}, {how}"
        assert_matches_eager(want[i], eager[i], what=f"input {i}")
        assert not torch.equal(want[0], want[1])


def test_traced_jobs_give_each_shared_jobs_timeline():
    # The diagnostic trace (docs/history/cpu-measurements.md, "Interleaved: caches against
    # cores"): one record a shared job, its times in order, the helper's units within the job's.
    model, example = build("torchvision:googlenet", image_size=32)
    fast = nimble.Nimble(model).prepare(example)
    nimble._C._trace_kernel_helpers(False)
    nimble._C._trace_kernel_helpers(True)
    for _ in range(3):
        fast(example)
    jobs = nimble._C._trace_kernel_helpers(False)
    assert jobs and len(jobs) % 3 == 0
    for units, published, caller_done, end, caller_cpu, seen, claim, helper_end, cpu, taken in jobs:
        assert 0 < published <= caller_done <= end and caller_cpu >= 0 and 0 <= taken <= units
        assert (claim >= 0) == (taken > 0) and (seen < 0 or seen >= published)
        assert claim < 0 or (seen <= claim <= helper_end <= end and cpu >= 0)
    fast(example)
    assert nimble._C._trace_kernel_helpers(False) == []


def test_unlowered_programs_keep_openmp_and_several_streams_share_work():
    # Unlowered: no kernel of nimble's to share, ATen's ops keep their OpenMP threads.
    model, example = build("torchvision:googlenet", image_size=32)
    assert not nimble.Nimble(model).prepare(example, lower_for_cpu=False).schedule["shares_work"]
    fast = nimble.Nimble(model).prepare(example, streams=2)
    assert fast.schedule["shares_work"] and fast.schedule["physical_streams"] == 2
    got = _with_helpers_stalled(lambda: fast(example))
    with torch.no_grad():
        assert_matches_eager(got, model(example))


def test_kernel_helpers_off_by_environment():
    code = ("import torch, nimble; from nimble.zoo import build\n"
            "model, x = build('torchvision:googlenet', image_size=32)\n"
            "print(nimble.Nimble(model).prepare(x).schedule['shares_work'])")
    env = {**os.environ, "NIMBLE_KERNEL_HELPERS": "0"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "False"


FORKED = """
import os, sys, time, torch, nimble
from nimble.testing import assert_matches_eager
from nimble.zoo import build
model, x = build("torchvision:mobilenet_v2", image_size=32)
fast = nimble.Nimble(model).prepare(x)
other = torch.randn_like(x)
want_other = fast(other)
with torch.no_grad():
    eager_other = model(other)  # here: eager's OpenMP would not run in the child
want = fast(x)  # the helper threads exist now
pid = os.fork()
if pid == 0:
    time.sleep(0.06)
    got = fast(other)  # not the parent's last input: a stale result shows
    ok = torch.equal(got, want_other) and not torch.equal(got, want)
    assert_matches_eager(got, eager_other)
    sys.exit(0 if ok else 3)  # a normal exit: static destructors run
_, status = os.waitpid(pid, 0)
print(os.waitstatus_to_exitcode(status))
"""


def test_a_process_forked_after_the_helpers_started_runs_and_exits():
    # fork copies only the forking thread: the child's helpers do not exist, and it must
    # neither wait for them in a replay nor at exit.
    done = subprocess.run([sys.executable, "-c", FORKED], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "0"

"""Buffers whose lifetimes cannot overlap share storage, in every stream mode."""

import pytest
import torch

import nimble
from nimble.testing import assert_matches_eager
from nimble.zoo import build


@pytest.mark.parametrize("streams", [1, 2, 4])
@pytest.mark.parametrize("spec", ["torchvision:densenet121", "torchvision:googlenet", "transformer:encoder"])
def test_planned_buffers_shrink_and_replay_stays_exact(spec, streams):
    model, example = build(spec, batch=2)
    # Unlowered: the CPU lowering turns densenet's and googlenet's concatenations and
    # poolings into nimble's kernels, which return new tensors, leaving few `.out` buffers.
    fast = nimble.Nimble(model).prepare(example, streams=streams, lower_for_cpu=False)
    memory = fast.memory
    assert 0 < memory["buffer_bytes"] < memory["buffer_bytes_unplanned"]
    for _ in range(2):
        x = torch.randn_like(example)
        with torch.no_grad():
            expected = model(x)
        assert_matches_eager(fast(x), expected, tolerance=1e-5 if streams == 1 else 1e-4)


def test_planning_can_be_switched_off():
    model, example = build("torchvision:resnet18")
    # Unlowered: the lowered resnet18 has no `.out` buffer left to plan.
    fast = nimble.Nimble(model).prepare(example, plan_memory=False, lower_for_cpu=False)
    assert fast.memory["buffer_bytes"] == fast.memory["buffer_bytes_unplanned"] > 0


def test_outputs_never_share_storage_with_later_buffers():
    class TwoHeads(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = torch.nn.Linear(8, 8)
            self.b = torch.nn.Linear(8, 8)

        def forward(self, x):
            first = self.a(x).relu()
            second = self.b(first).sigmoid() * 3
            return first, second

    model = TwoHeads().eval()
    fast = nimble.Nimble(model).prepare(torch.randn(4, 8), copy_outputs=False)
    x = torch.randn(4, 8)
    with torch.no_grad():
        expected = model(x)
    assert_matches_eager(fast(x), expected, tolerance=1e-5)


def test_large_results_can_be_left_to_the_allocator():
    model, example = build("torchvision:googlenet", batch=2)
    # ATen's convolutions write into buffers; lowered ones (the default) allocate their own.
    everything = nimble.Nimble(model).prepare(example, lower_for_cpu=False)
    small_only = nimble.Nimble(model).prepare(example, out_variant_max_bytes=16 * 1024,
                                              lower_for_cpu=False)
    assert small_only.memory["buffer_bytes_unplanned"] < everything.memory["buffer_bytes_unplanned"]
    x = torch.randn_like(example)
    with torch.no_grad():
        expected = model(x)
    torch.testing.assert_close(small_only(x), expected, rtol=0, atol=0)


# The private pool of single-stream CPU replays (csrc/runtime/cpu/replay_arena.h).

def _peaks(model, fast, x):
    """Eager's peak on the ops the replay runs, and the replay's. Eager runs under the
    capture's function mode, as the recorded run did: a module with a fused fast path that
    such a mode turns off (nn.TransformerEncoderLayer's) runs the same ops as the trace.
    The fused path's peak is another model's: the unfused attention's scratch space grows
    with the thread count (docs/numbers.md, "Peak memory")."""
    from nimble.bench.cpu import peak_allocated_bytes
    from nimble.replay.host_reads import UnfusedPaths

    with torch.no_grad(), UnfusedPaths():
        eager = peak_allocated_bytes(lambda: model(x))
    replay = fast.memory["resident_bytes"] + peak_allocated_bytes(lambda: fast(x))
    return eager, replay


@pytest.mark.parametrize("spec", ["torchvision:googlenet", "torchvision:resnet18",
                                  "torchvision:squeezenet1_1", "torchvision:mobilenet_v2",
                                  "transformer:encoder"])
def test_pool_keeps_peak_memory_at_eager_or_below(spec):
    model, example = build(spec, batch=2)
    fast = nimble.Nimble(model).prepare(example)
    # Eager's encoder layers take a fused fast path, and convolutions are lowered to oneDNN
    # (passes/cpu_lowering.h): equal up to rounding only.
    tolerance = 1e-5 if spec.startswith("transformer") else 1e-4
    x = torch.randn_like(example)
    with torch.no_grad():
        expected = model(x)
    assert_matches_eager(fast(x), expected, tolerance=tolerance)  # the recorded replay
    pool = fast.memory["pool"]
    # Requests: tensors ops allocate; moved buffers: `.out` buffers (squeezenet's lowered
    # program has none left, its concatenations being nimble's kernels).
    assert pool["planned"] and pool["planned_requests"] > 0
    for _ in range(2):
        x = torch.randn_like(example)
        with torch.no_grad():
            expected = model(x)
        assert_matches_eager(fast(x), expected, tolerance=tolerance)
    pool = fast.memory["pool"]
    assert pool["served_last"] == pool["planned_requests"] and pool["fallbacks_last"] == 0
    # The block holds what eager's peak on the same ops holds; the outputs handed to the
    # caller come on top (eager puts them in memory its intermediates freed; the block
    # stays the replay's), and nothing else.
    eager, replay = _peaks(model, fast, x)
    out = fast(x)
    outputs = sum(t.nbytes for t in (out if isinstance(out, (tuple, list)) else [out]))
    assert pool["block_bytes"] <= eager, f"pool block {pool['block_bytes']} B, eager's peak {eager} B"
    assert replay <= eager + outputs, f"replay peak {replay} B, eager's {eager} B + outputs {outputs} B"


def test_the_encoders_fused_fast_path_is_not_what_the_replay_runs():
    # Why the promise above is about the same ops: eager under no_grad takes
    # nn.TransformerEncoderLayer's fused path, the capture (under a function mode) the
    # unfused one. Should the capture ever see the fused path, this fails and the
    # promise can be stated against eager as the user runs it.
    model, example = build("transformer:encoder", batch=2)
    fast = nimble.Nimble(model).prepare(example)
    from torch.profiler import profile

    with torch.no_grad(), profile() as prof:
        model(example)
    eager_ops = {e.key for e in prof.key_averages()}
    assert "aten::_transformer_encoder_layer_fwd" in eager_ops
    assert "aten::_transformer_encoder_layer_fwd" not in fast.schedule["ops"]


def test_outputs_kept_by_the_caller_never_change():
    model, example = build("torchvision:squeezenet1_1")
    for copy_outputs in (True, False):
        # Bitwise equal to eager: ATen's kernels, not the lowered ones.
        fast = nimble.Nimble(model).prepare(example, copy_outputs=copy_outputs,
                                            lower_for_cpu=False)
        inputs = [torch.randn_like(example) for _ in range(4)]
        kept = [fast(x) for x in inputs]  # the first is the recorded replay
        with torch.no_grad():
            for x, out in zip(inputs, kept, strict=True):
                torch.testing.assert_close(out, model(x), rtol=0, atol=0)


def test_pool_only_for_one_stream_and_buffers_return_when_streams_change():
    model, example = build("torchvision:googlenet", batch=2)
    fast = nimble.Nimble(model).prepare(example, streams=1, lower_for_cpu=False)  # bitwise
    x = torch.randn_like(example)
    with torch.no_grad():
        expected = model(x)
    fast(x)
    assert fast.memory["pool"]["buffers_moved"] > 0
    fast.replay.set_streams(2)
    assert fast.memory["pool"] is None
    assert fast.memory["resident_bytes"] == fast.memory["buffer_bytes"]
    assert_matches_eager(fast(x), expected)
    fast.replay.set_streams(1)
    for _ in range(2):
        torch.testing.assert_close(fast(x), expected, rtol=0, atol=0)
    assert fast.memory["pool"]["planned"]


def test_no_pool_without_memory_planning():
    model, example = build("torchvision:resnet18")
    # Unlowered: the lowered resnet18 has no `.out` buffer left to plan.
    fast = nimble.Nimble(model).prepare(example, plan_memory=False, lower_for_cpu=False)
    fast(example)
    assert fast.memory["pool"] is None


def test_failed_replay_records_again():
    class Picky(torch.nn.Module):
        def forward(self, x, index):
            return (x * 2).relu().index_select(0, index) + 1

    model = Picky().eval()
    x, index = torch.randn(6, 5), torch.tensor([0, 2])
    fast = nimble.Nimble(model).prepare((x, index))
    with pytest.raises(IndexError, match="index out of range"):
        fast(x, torch.tensor([0, 9]))  # out of range: fails inside the first replay
    assert not fast.memory["pool"]["planned"]
    for _ in range(3):
        y = torch.randn(6, 5)
        torch.testing.assert_close(fast(y, index), model(y, index), rtol=0, atol=0)
    assert fast.memory["pool"]["planned"]


# Training replays: the whole step (forward, backward, update) and forward/backward alone.

def _training_replay(mode: str):
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.BatchNorm2d(16), torch.nn.ReLU(),
        torch.nn.Conv2d(16, 16, 3, padding=1), torch.nn.BatchNorm2d(16), torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(16, 10)).train()
    x, y = torch.randn(4, 3, 16, 16), torch.randint(0, 10, (4,))
    loss_fn = torch.nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    if mode == "whole step":
        fast = nimble.Nimble(model).prepare(x, training=True, loss_fn=loss_fn,
                                            optimizer=optimizer, example_targets=y)
        return fast, lambda: fast.step(x, y)
    fast = nimble.Nimble(model).prepare(x, training=True)

    def step():
        optimizer.zero_grad()
        loss_fn(fast(x), y).backward()
        optimizer.step()

    return fast, step


@pytest.mark.parametrize("mode", ["whole step", "forward and backward"])
def test_training_replays_serve_every_planned_buffer_and_allocate_the_same_each_step(mode):
    from nimble.bench.cpu import peak_allocated_bytes

    fast, step = _training_replay(mode)
    for _ in range(3):
        step()
    # The first profiled call also counts blocks made before it (the profiler says so):
    # steps from the second on are compared.
    peaks = [peak_allocated_bytes(step) for _ in range(3)][1:]
    pool = fast.memory["pool"]
    assert pool["planned"] and pool["planned_requests"] > 0
    assert pool["served_last"] == pool["planned_requests"] and pool["fallbacks_last"] == 0
    assert pool["block_bytes"] > 0
    assert peaks[0] == peaks[1] > 0, peaks  # nothing accumulates from step to step
    if mode == "whole step":
        memory = fast.memory
        assert 0 < memory["buffer_bytes"] < memory["buffer_bytes_unplanned"]

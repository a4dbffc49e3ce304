"""Multi-stream CPU replay: equal to eager in every mode, schedule exposed, files written."""

import json
import threading

import pytest
import torch

import nimble
from nimble.testing import assert_matches_eager
from nimble.zoo import ALL_MODELS, build


@pytest.mark.parametrize("streams", [2, 3, 4, "auto"])
@pytest.mark.parametrize("spec", ALL_MODELS)
def test_multi_stream_replay_matches_eager(spec, streams):
    model, example = build(spec, batch=1, image_size=64)
    fast = nimble.Nimble(model).prepare(example, streams=streams)
    if streams != "auto":
        assert fast.schedule["physical_streams"] <= streams
    for seed in (1, 2):
        torch.manual_seed(seed)
        x = torch.randn_like(example)
        with torch.no_grad():
            expected = model(x)
        # Each stream's kernels run with fewer intra-op threads than eager's, which splits
        # reductions (convolutions, matmuls) differently: equal up to float rounding.
        assert_matches_eager(fast(x), expected)


def test_schedule_is_exposed_and_consistent():
    model, example = build("torchvision:googlenet")
    fast = nimble.Nimble(model).prepare(example, streams=2)
    s = fast.schedule
    n = fast.num_ops
    assert len(s["logical_stream"]) == len(s["physical_stream"]) == len(s["ops"]) == n
    assert s["logical_streams"] > 1  # inception blocks have parallel branches
    assert s["physical_streams"] == 2
    assert set(s["physical_stream"]) == {0, 1}
    assert s["logical_syncs"] >= s["logical_streams"] - 1


def test_dot_and_trace_files(tmp_path):
    model, example = build("torchvision:googlenet")
    fast = nimble.Nimble(model).prepare(example, streams=2)
    dot = tmp_path / "g.dot"
    fast.to_dot(str(dot))
    text = dot.read_text()
    assert text.startswith("digraph") and text.count("->") == len(fast.replay.dependencies)
    trace = tmp_path / "t.json"
    fast.trace(str(trace))
    events = json.loads(trace.read_text())["traceEvents"]
    slices = [e for e in events if e["ph"] == "X"]
    assert len(slices) == fast.num_ops
    assert {e["tid"] for e in slices} == {0, 1}


def test_separate_objects_replay_concurrently_from_python_threads():
    results, errors = {}, []

    def work(name):
        try:
            model, example = build(name)
            fast = nimble.Nimble(model).prepare(example, streams=2)
            x = torch.randn_like(example)
            with torch.no_grad():
                expected = model(x)
            for _ in range(5):
                assert_matches_eager(fast(x), expected)
            results[name] = True
        except Exception as error:  # reported below
            errors.append(error)

    threads = [threading.Thread(target=work, args=(n,)) for n in ("torchvision:resnet18", "torchvision:squeezenet1_1")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(results) == 2


def test_concurrent_calls_on_one_object_are_serialized():
    model, example = build("torchvision:squeezenet1_1")
    fast = nimble.Nimble(model).prepare(example, streams=2)
    inputs = [torch.randn_like(example) for _ in range(4)]
    with torch.no_grad():
        expected = [model(x) for x in inputs]
    got = [None] * 4

    def call(i):
        for _ in range(3):
            got[i] = fast(inputs[i])

    threads = [threading.Thread(target=call, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for g, e in zip(got, expected, strict=True):
        assert_matches_eager(g, e)


def test_bad_stream_count():
    with pytest.raises(ValueError, match="streams must be 'auto' or a positive int, got 0"):
        nimble.Nimble(torch.nn.Linear(2, 2)).prepare(torch.randn(1, 2), streams=0)


class _FakeReplay:
    def __init__(self, events: list) -> None:
        self.events = events
        self.num_streams = 1

    def set_streams(self, count: int) -> None:
        self.num_streams = 2 if count == 0 else count
        self.events.append(f"set_streams({count})")


class _FakeCudaInput:
    """Only the device of an input matters to the stream choice."""

    device = torch.device("cuda", 0)


class _FakeProgram:
    def __init__(self, events: list, inputs: list) -> None:
        self.events = events
        self.replays = [_FakeReplay(events)]
        self.example_inputs = inputs

    def run_example(self) -> None:
        self.events.append("run")

    def snapshot(self):
        events = self.events

        class Snapshot:
            def __enter__(self):
                events.append("snapshot")

            def __exit__(self, *exc):
                events.append("restore")

        return Snapshot()


@pytest.mark.parametrize("on_cuda", [False, True])
def test_stream_choice_synchronizes_cuda_around_each_timed_run(monkeypatch, on_cuda):
    from nimble.replay import streams

    events: list = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: events.append("sync"))
    inputs = [_FakeCudaInput()] if on_cuda else [torch.zeros(1)]
    streams.choose_streams(_FakeProgram(events, inputs))

    assert events[0] == "snapshot" and events[-1] == "restore"
    runs = events.count("run")
    assert runs == 2 * (streams._WARM_UPS + streams._REPEATS)
    if not on_cuda:
        assert "sync" not in events
        return
    # Every timed run is enclosed by syncs: the clock starts after queued work ends and
    # stops after the run's kernels end. Warm-ups are not timed.
    timed = [i for i, e in enumerate(events) if e == "run" and events[i - 1] == "sync"]
    assert len(timed) == 2 * streams._REPEATS
    assert all(events[i + 1] == "sync" for i in timed)

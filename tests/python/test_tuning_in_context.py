"""Tuning a lowered replay where it runs (csrc/slot/context_measurer.h): `nimble.tune` on a
lowered model has one task per lowered convolution shape, times each candidate in the replay
itself, and records it under the key `prepare(tuned=db)` looks up; the tuned replay stays
eager's. (The executor's per-op time being what a candidate is credited with, and a wrong
candidate recorded as an error, are checked in tests/cpp/kernels/context_measurer_test.cpp.)"""

import json

import pytest
import torch

import nimble
from nimble import zoo
from nimble.testing import assert_matches_eager


@pytest.fixture(scope="module")
def lowered():
    model, x = zoo.build("torchvision:resnet18", image_size=32)
    model = zoo.realistic_weights(model.eval(), lambda: model(x))
    return model, x, nimble.Nimble(model).prepare(x)


def lowered_convolutions(fast):
    return [(i, op) for i, op in enumerate(fast.replay.ops()) if "shape_key" in op]


def test_the_tasks_are_the_lowered_convolutions(lowered):
    _, _, fast = lowered
    convolutions = lowered_convolutions(fast)
    tasks = nimble._C.kernels.context_tasks(fast.replay)
    assert convolutions and tasks
    assert sorted(i for t in tasks for i in t["ops"]) == [i for i, _ in convolutions]
    keys = dict(convolutions)
    for t in tasks:
        shapes = {keys[i]["shape_key"] for i in t["ops"]}
        assert len(shapes) == 1
        assert t["signature"].startswith("lowered " + shapes.pop() + " epilogue=")
    assert len({t["signature"] for t in tasks}) == len(tasks)


def test_tuning_in_context_records_what_prepare_tuned_applies(lowered, tmp_path):
    model, x, fast = lowered
    db = str(tmp_path / "tune.db")
    tasks = nimble._C.kernels.context_tasks(fast.replay)
    before = [op.get("kernel") for op in fast.replay.ops()]
    report = nimble.tune(fast, scheduler="round-robin", budget_seconds=1e9,
                         budget_trials=2 * len(tasks), database=db, slot_seconds=1e-3, batch_size=1,
                         progress=False)
    assert report["device"] == nimble._C.kernels.device_key()
    # Preempted timed replays are timed again (ContextMeasurer's stall rule), at most 4 a
    # candidate; the cold share is of this run's own measurement time.
    assert 0 <= report["stalled_samples"] <= 4 * report["trials"]
    assert report["cold_time_share"] == pytest.approx(
        report["cold_seconds"] / report["measure_seconds"])
    # The picks that differ from the rule were confirmed in the whole replay (or none differ).
    for pick in report["replay_confirmed"]:
        assert pick["reason"] and (not pick["tried"] or pick["comparison"]["pairs"] > 0), pick
        assert not pick["kept"] or report["replay_combination_kept"], pick
    # The replay's kernels are its own again after tuning.
    assert [op.get("kernel") for op in fast.replay.ops()] == before

    records = tmp_path / "records.jsonl"
    nimble._C.tuning.TuningDatabase(db).export_jsonl(str(records))
    rows = [json.loads(line) for line in records.read_text().splitlines()]
    assert {r["signature"] for r in rows} == {t["signature"] for t in tasks}
    assert {r["device"] for r in rows} == {report["device"]}
    assert all(r["error"] == "none" for r in rows), [r["message"] for r in rows if r["error"] != "ok"]

    # Every task measured the rule's configuration first, so every lowered shape has a choice,
    # found under its shape key, from the in-context records.
    choices = nimble._C.kernels.lowering_choices(db)
    assert set(choices) == {op["shape_key"] for _, op in lowered_convolutions(fast)}
    assert all(c["signature"].startswith("lowered ") for c in choices.values())

    tuned = nimble.Nimble(model).prepare(x, tuned=db)
    for seed in range(2):
        x2 = torch.randn(x.shape, generator=torch.Generator().manual_seed(seed))
        with torch.no_grad():
            assert_matches_eager(tuned(x2), model(x2))
            assert_matches_eager(fast(x2), model(x2))


def test_in_context_records_win_over_records_timed_alone(lowered, tmp_path):
    model, x, fast = lowered
    task = nimble._C.kernels.context_tasks(fast.replay)[0]
    key = task["signature"][len("lowered "):].split(" epilogue=")[0]
    sizes, weight, rest = key.split(" ", 2)
    alone = next(t for t in nimble._C.kernels.tasks(
        nimble.Nimble(model).prepare(x, lower_for_cpu=False).replay)
        if sizes + "/" in t["signature"] and weight + "/" in t["signature"]
        and rest in t["signature"] and "prepacked" in t["families"])
    alone_config = [0] * len(alone["knobs"])
    alone_config[0] = alone["families"].index("prepacked")
    device = nimble._C.kernels.device_key()

    def line(signature, config, seconds):
        return json.dumps({"run": "test", "signature": signature, "device": device,
                           "config": config, "seconds": [seconds], "error": "none", "message": "",
                           "cost_seconds": 0.0, "cut_short": False, "recorded_at": 0.0})

    # Timed alone a thousand times faster, yet the record timed in the replay is the one taken:
    # the two times are not comparable.
    path = tmp_path / "records.jsonl"
    path.write_text(line(alone["signature"], alone_config, 1e-9) + "\n"
                    + line(task["signature"], [0] * len(task["knobs"]), 1e-6) + "\n")
    db = str(tmp_path / "mixed.db")
    assert nimble._C.tuning.TuningDatabase(db).import_jsonl(str(path)) == 2
    assert nimble._C.kernels.lowering_choices(db)[key]["signature"] == task["signature"]

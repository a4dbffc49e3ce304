"""Tuning the CPU lowering's kernels (kernels/cpu/prepacked_family.cpp, slot/lowering_choices.h):
`nimble.tune` on a lowered replay measures the convolutions as ATen runs them, with the
lowering's own kernels among the candidates; `use_tuned` / `prepare(tuned=...)` then build the
lowered program again with each convolution on the fastest of those kernels for its shape.
Results stay eager's; `use_tuned(None)` returns to the rule's kernels."""

import pytest
import torch

import nimble
from nimble import zoo

TOLERANCE = dict(rtol=1e-4, atol=1e-3)


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    torch.manual_seed(0)
    model, x = zoo.build("torchvision:mobilenet_v2", image_size=32)
    fast = nimble.Nimble(model.eval()).prepare(x)
    db = str(tmp_path_factory.mktemp("tuned") / "tune.db")
    tasks = nimble._C.kernels.tasks(nimble.Nimble(model).prepare(x, lower_for_cpu=False).replay)
    assert all("prepacked" in t["families"] for t in tasks if t["signature"].startswith("conv2d"))
    nimble.tune(fast, scheduler="round-robin", budget_seconds=1e9, budget_trials=6 * len(tasks),
                database=db, slot_seconds=1e-3, min_repeat_seconds=2e-4, progress=False)
    return model, x, fast, db


def lowered_kernels(fast):
    return [op["kernel"] for op in fast.replay.ops() if "kernel" in op]


def test_tuning_a_lowered_replay_records_the_lowerings_kernels(tuned):
    model, x, fast, db = tuned
    choices = nimble._C.kernels.lowering_choices(db)
    assert choices, "no prepacked record"
    for key, choice in choices.items():
        assert key.startswith("in=") and "groups=" in key
        assert choice["kernel"] in {"onednn_prepacked", "nimble_depthwise", "nimble_gemm"}
        assert choice["threads"] >= 1 and choice["ms"] > 0
        assert choice["signature"].startswith("conv2d Float cpu")


def test_use_tuned_runs_the_databases_kernels_and_stays_equal_to_eager(tuned):
    model, x, fast, db = tuned
    report = fast.use_tuned(db)
    rows = [r for r in report if r["family"] == "prepacked"]
    # Every lowered convolution whose shape has a prepacked record runs that record's kernel
    # (6 trials a task over four families: most shapes have one, not all).
    choices = nimble._C.kernels.lowering_choices(db)
    tuned_ops = [op for op in fast.replay.ops() if op.get("shape_key") in choices]
    assert 0 < len(rows) == len(tuned_ops) and all(r["bound"] for r in rows)
    for op in tuned_ops:
        choice = choices[op["shape_key"]]
        assert op["kernel"].startswith(choice["kernel"]), (op["kernel"], choice)
    for _ in range(2):
        x2 = torch.randn_like(x)
        with torch.no_grad():
            torch.testing.assert_close(fast(x2), model(x2), **TOLERANCE)
    # prepare(tuned=...) builds the same program.
    again = nimble.Nimble(model).prepare(x, tuned=db)
    assert lowered_kernels(again) == lowered_kernels(fast)
    fast.use_tuned(None)
    assert [r for r in fast.tuned_report() if r["family"] == "prepacked"] == []
    with torch.no_grad():
        torch.testing.assert_close(fast(x), model(x), **TOLERANCE)


def test_tuned_kernels_follow_weights_changed_after_prepare(tuned):
    model, x, _, db = tuned
    fast = nimble.Nimble(model).prepare(x, tuned=db)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(0.5)
        torch.testing.assert_close(fast(x), model(x), **TOLERANCE)


def test_a_database_without_prepacked_records_leaves_the_rules_kernels(tmp_path):
    torch.manual_seed(0)
    model, x = zoo.build("torchvision:squeezenet1_1", image_size=32)
    db = str(tmp_path / "empty.db")
    assert nimble._C.tuning.TuningDatabase(db).count() == 0
    plain = nimble.Nimble(model).prepare(x)
    fast = nimble.Nimble(model).prepare(x, tuned=db)
    assert lowered_kernels(fast) == lowered_kernels(plain)
    assert [r for r in fast.tuned_report() if r["family"] == "prepacked"] == []

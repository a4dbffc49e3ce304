"""The lowered linear layers as a tunable family ("prepacked_linear",
csrc/kernels/cpu/tuning_families/prepacked_linear_family.cpp): a lowered replay has one
in-context task per linear layer shape, `nimble.tune` records them under the key
`prepare(tuned=db)` looks up, and a record's kernel, threads and tiling reach the lowered op
where the replay runs it faster than the rule's, and are refused where it runs slower. The
tuned replay stays eager's. (Every knob value against ATen: tests/cpp/kernels/
prepacked_linear_knobs_test.cpp.)"""

import pytest
import torch

import nimble
from tuning_records import database, record_line
from nimble.replay import lowered_tuning
from nimble.tuning import models
from nimble.testing import assert_matches_eager


class Tokens(torch.nn.Module):
    """A transformer block's linear layers on odd sizes: with and without a bias, a fused relu,
    a fused residual add."""

    def __init__(self):
        super().__init__()
        self.up = torch.nn.Linear(37, 96)
        self.down = torch.nn.Linear(96, 37, bias=False)
        self.norm = torch.nn.LayerNorm(37)
        self.head = torch.nn.Linear(37, 11)

    def forward(self, x):
        x = x + self.down(torch.relu(self.up(x)))
        return self.head(self.norm(x))


@pytest.fixture(scope="module")
def lowered():
    torch.manual_seed(0)
    model, x = Tokens().eval(), torch.randn(17, 37)
    return model, x, nimble.Nimble(model).prepare(x)


def _linear_ops(fast):
    return [(i, op) for i, op in enumerate(fast.replay.ops())
            if op.get("shape_key", "").startswith("linear ")]


def _record(task, labels):
    """A database line: `task`'s config setting the knobs named in `labels` (without the
    family's prefix) to those labels, every other knob at its first value, timed faster than
    anything the tuner measures."""
    config = []
    for name, values in task["knobs"]:
        short = name.removeprefix("prepacked_linear.")
        config.append(values.index(labels[short]) if short in labels else 0)
    return record_line(task["signature"], config, [1e-9], run="test")


def test_the_lowered_linear_layers_are_in_context_tasks(lowered):
    _, _, fast = lowered
    linear = _linear_ops(fast)
    assert len(linear) == 3, [op["name"] for op in fast.replay.ops()]
    tasks = [t for t in nimble._C.kernels.context_tasks(fast.replay)
             if t["signature"].startswith("lowered linear ")]
    assert sorted(i for t in tasks for i in t["ops"]) == [i for i, _ in linear]
    keys = dict(linear)
    for t in tasks:
        (key,) = {keys[i]["shape_key"] for i in t["ops"]}
        assert t["signature"].startswith("lowered " + key + " epilogue=")
        names = [name for name, _ in t["knobs"]]
        assert {"prepacked_linear.kernel", "prepacked_linear.threads",
                "prepacked_linear.gemm_tile_rows"} <= set(names)
    # The fused epilogues are part of the task: the relu of `up`, the residual add of `down`.
    epilogues = sorted(t["signature"].split(" epilogue=")[1] for t in tasks)
    assert epilogues == ["add", "none", "relu"]


@pytest.mark.parametrize("faster", [True, False])
def test_a_linear_record_is_applied_where_the_replay_runs_it_faster(lowered, tmp_path,
                                                                     monkeypatch, faster):
    model, x, fast = lowered
    task = next(t for t in nimble._C.kernels.context_tasks(fast.replay)
                if t["signature"].startswith("lowered linear in=17x37 out=96"))
    db = database(tmp_path, [_record(task, {"kernel": "nimble_gemm", "threads": "1",
                                             "gemm_tile_rows": "2",
                                             "gemm_loop_order": "columns"})])
    key = "linear in=17x37 out=96"
    one_thread = " threads=1" if torch.get_num_threads() > 1 else ""
    spec = f"nimble_gemm{one_thread} gemm.loop_order=columns gemm.tile_rows=2"
    choice = nimble._C.kernels.lowering_choices(db)[key]
    assert choice["spec"] == spec and choice["signature"] == task["signature"]
    # What the replay measures, by decree: the database's kernel faster, or slower, there.
    tuned_ns, rule_ns = (1.0, 2.0) if faster else (2.0, 1.0)
    monkeypatch.setattr(lowered_tuning, "_per_op_ns",
                        lambda default, tuned: [[rule_ns] * len(default.replays[0].ops()),
                                                [tuned_ns] * len(tuned.replays[0].ops())])
    monkeypatch.setattr(lowered_tuning, "_whole_replay_ms",
                        lambda default, tuned: [rule_ns, tuned_ns])
    tuned = nimble.Nimble(model).prepare(x, tuned=db)
    runs = {op["tuning"] for _, op in _linear_ops(tuned) if op["shape_key"] == key}
    rule = {op["tuning"] for _, op in _linear_ops(fast) if op["shape_key"] == key}
    assert runs == ({spec} if faster else rule), runs
    rows = [r for r in tuned.tuned_report() if r["family"] == "prepacked_linear"]
    assert [r["bound"] for r in rows] == [faster]
    assert ("the rule's kept" in rows[0]["reason"]) == (not faster)
    for seed in range(2):
        x2 = torch.randn(x.shape, generator=torch.Generator().manual_seed(seed))
        with torch.no_grad():
            assert_matches_eager(tuned(x2), model(x2))
    # `tune --model`'s share of the replay's time in its tunable ops counts these three.
    shares = models.replay_time_shares(tuned, runs=3)
    assert 0 < shares["tunable_share"] <= 1 and shares["wall_ms"] > 0
    assert not any("linear" in name for name in shares["others_ms"]), shares
    assert "aten::native_layer_norm" in shares["others_ms"] or any(
        "layer_norm" in name for name in shares["others_ms"]), shares


def test_a_record_that_runs_the_rules_kernel_is_the_rules_choice(lowered, tmp_path):
    # 17x37 > 96: 14 KB of weight, within L2, so the rule's loop order is rows outside, and a
    # record of gemm.loop_order=rows runs the rule's very kernel (runs_as_rule): it is chosen as
    # the rule's configuration, with nothing to bind or to confirm in the whole replay.
    model, x, fast = lowered
    task = next(t for t in nimble._C.kernels.context_tasks(fast.replay)
                if t["signature"].startswith("lowered linear in=17x37 out=96"))
    threads = dict(task["knobs"])["prepacked_linear.threads"][-1]
    same = database(tmp_path, [_record(task, {"kernel": "nimble_gemm", "threads": threads,
                                               "gemm_loop_order": "rows"})])
    choice = nimble._C.kernels.lowering_choices(same)["linear in=17x37 out=96"]
    assert choice["spec"] == "nimble_gemm", choice
    # The other order is another kernel: a pick.
    (tmp_path / "other").mkdir()
    other = database(tmp_path / "other", [_record(task, {"kernel": "nimble_gemm",
                                                         "threads": threads,
                                                         "gemm_loop_order": "columns"})])
    choice = nimble._C.kernels.lowering_choices(other)["linear in=17x37 out=96"]
    assert choice["spec"] == "nimble_gemm gemm.loop_order=columns", choice


def test_tuning_in_context_records_the_linear_layers(lowered, tmp_path):
    model, x, fast = lowered
    db = str(tmp_path / "tune.db")
    tasks = nimble._C.kernels.context_tasks(fast.replay)
    nimble.tune(fast, scheduler="round-robin", budget_seconds=1e9, budget_trials=8 * len(tasks),
                database=db, slot_seconds=1e-3, batch_size=1, progress=False)
    choices = nimble._C.kernels.lowering_choices(db)
    assert {op["shape_key"] for _, op in _linear_ops(fast)} <= set(choices)
    for key, choice in choices.items():
        assert choice["kernel"] in {"onednn_prepacked", "nimble_gemm"}
        assert choice["signature"].startswith("lowered " + key)
    tuned = nimble.Nimble(model).prepare(x, tuned=db)
    with torch.no_grad():
        assert_matches_eager(tuned(x), model(x))


def test_a_linear_layers_search_record_is_re_timed_against_the_rule(lowered, tmp_path):
    _, _, fast = lowered
    program = fast._program
    with program.snapshot():
        recorded = nimble._C.kernels.ContextRecorder(fast.replay, program.example_inputs).tasks()
    task = next(t for t in recorded if t["signature"].startswith("lowered linear in=17x96"))
    lucky = next(c for c in task["configs"] if c != task["start"])
    # The search's records: the rule's at a realistic time, another a thousand times faster.
    db = database(tmp_path, [record_line(task["signature"], task["start"], [1e-3], run="test"),
                              record_line(task["signature"], lucky, [1e-6], run="test")])
    with program.snapshot():
        done = nimble._C.kernels.confirm_in_context(fast.replay, program.example_inputs, db, 1e9,
                                                    rounds=3, repeats=1)
    assert [t["signature"] for t in done] == [task["signature"]]
    assert done[0]["compared"] == 2 and done[0]["rule_ms"] > 0
    runs = {tuple(r["config"]): r["run"] for r in nimble._C.tuning.TuningDatabase(db).records(
        task["signature"], nimble._C.kernels.device_key()) if r["run"] != "test"}
    assert runs[tuple(task["start"])] == "confirmed in context"
    assert runs[tuple(lucky)] in ("confirmed in context", "not confirmed in context")
    # Re-timed, the choice is no longer the search's microsecond.
    key = "linear in=17x96 out=37"
    assert nimble._C.kernels.lowering_choices(db)[key]["ms"] > 1e-3

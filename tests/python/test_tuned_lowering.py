"""Tuning the CPU lowering's kernels (kernels/cpu/tuning_families/prepacked_family.cpp, slot/lowering_choices.h):
`nimble.tune` on a lowered replay measures the lowering's own kernels in the replay
(test_tuning_in_context.py); `use_tuned` / `prepare(tuned=...)` then build the
lowered program again with each convolution on the fastest of those kernels for its shape where
the replay runs it faster than the rule's (replay/lowered_tuning.py).
Results stay eager's; `use_tuned(None)` returns to the rule's kernels."""

import json

import pytest
import torch

import nimble
from nimble import _C
from nimble import zoo
from nimble.testing import assert_matches_eager


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    torch.manual_seed(0)
    model, x = zoo.build("torchvision:mobilenet_v2", image_size=32)
    fast = nimble.Nimble(model.eval()).prepare(x)
    db = str(tmp_path_factory.mktemp("tuned") / "tune.db")
    tasks = nimble._C.kernels.context_tasks(fast.replay)
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
        assert choice["kernel"] in {"onednn_prepacked", "nimble_depthwise", "nimble_gemm",
                                    "nimble_winograd"}
        assert choice["threads"] >= 1 and choice["ms"] > 0
        assert choice["signature"].startswith("lowered " + key + " epilogue=")


def test_use_tuned_runs_the_databases_kernels_and_stays_equal_to_eager(tuned):
    model, x, fast, db = tuned
    plain = lowered_kernels(fast)
    report = fast.use_tuned(db)
    rows = {r["op"]: r for r in report if r["family"] == "prepacked"}
    # Every lowered convolution whose shape has a prepacked record runs that record's kernel
    # where the replay ran it faster than the rule's, else the rule's (6 trials a task, in
    # batches: most shapes have a record, maybe not all).
    choices = nimble._C.kernels.lowering_choices(db)
    tuned_ops = [(i, op) for i, op in enumerate(fast.replay.ops()) if op.get("shape_key") in choices]
    assert 0 < len(rows) == len(tuned_ops)
    kernels = [op["kernel"] for op in fast.replay.ops() if "kernel" in op]
    assert len(kernels) == len(plain)
    for i, op in tuned_ops:
        choice, row = choices[op["shape_key"]], rows[i]
        # `tuning`: the kernel, threads and kernel parameters the op runs (a spec, as the choice).
        if row["bound"]:
            assert op["tuning"] == choice["spec"], (op["tuning"], choice)
            assert op["kernel"].startswith(choice["kernel"]), (op["kernel"], choice)
        else:
            assert op["tuning"] != choice["spec"], (op["tuning"], choice)
            # Dropped when tuned by the paired runs of the whole replay (replay_confirmation.h),
            # or (a choice not judged there) slower op by op, or faster op by op and the whole
            # replay slower with it.
            if choice["in_replay"] is not None:
                assert "whole replay" in row["reason"], row
            else:
                assert row["aten_ms"] > 0 and (row["tuned_ms"] >= row["aten_ms"]
                                               or "whole replay" in row["reason"]), row
    for _ in range(2):
        x2 = torch.randn_like(x)
        with torch.no_grad():
            assert_matches_eager(fast(x2), model(x2))
    # prepare(tuned=...) builds the program the same way: each convolution on the database's
    # kernel or the rule's (which one may differ: it is timed again).
    again = nimble.Nimble(model).prepare(x, tuned=db)
    for mine, rule, op in zip(lowered_kernels(again), plain, again.replay.ops()):
        choice = choices.get(op.get("shape_key"))
        assert mine == rule or (choice and mine.startswith(choice["kernel"])), (mine, rule)
    fast.use_tuned(None)
    assert [r for r in fast.tuned_report() if r["family"] == "prepacked"] == []
    assert lowered_kernels(fast) == plain
    x2 = torch.randn_like(x)
    with torch.no_grad():
        assert_matches_eager(fast(x2), model(x2))


class FakeProgram:
    """A lowered program as lowered_tuning sees it: convolutions by shape, each op's time set
    by its kernel."""

    RULE = {"A": "nimble_gemm", "B": "nimble_depthwise", "C": "nimble_gemm"}
    GAP_NS = {}

    def __init__(self, tuned_convolutions, ns):
        self.kernels = {**self.RULE, **tuned_convolutions}
        self.ns = ns
        # Time between ops: the tuned kernels' cost to their neighbours (per kernel, by decree).
        self.gap_ns = sum(self.GAP_NS.get(k, 0) for k in self.kernels.values())
        self.example_inputs = []
        self.replays = [self]

    def ops(self):
        return [{"name": "nimble::convolution_prepacked", "shape_key": key,
                 "kernel": f"{self.kernels[key]}(avx512) weight=8,8,1,1",
                 "tuning": self.kernels[key]} for key in "ABC"]

    def run_timed(self, inputs):
        ops = [(i, 0, 0, self.ns[(key, self.kernels[key])], 0) for i, key in enumerate("ABC")]
        return sum(op[3] for op in ops) + self.gap_ns, ops

    def snapshot(self):
        import contextlib
        return contextlib.nullcontext()


def test_a_databases_kernel_is_kept_only_where_the_replay_runs_it_faster():
    from nimble.replay.lowered_tuning import build_with_choices

    # Timed alone, oneDNN won for A and B; in the replay it is faster for A only. C's record
    # is the rule's own kernel.
    ns = {("A", "nimble_gemm"): 300, ("A", "onednn_prepacked"): 200,
          ("B", "nimble_depthwise"): 100, ("B", "onednn_prepacked"): 400,
          ("C", "nimble_gemm"): 50}
    choices = {key: {"kernel": kernel, "spec": kernel, "ms": 0.001, "signature": key}
               for key, kernel in [("A", "onednn_prepacked"), ("B", "onednn_prepacked"),
                                   ("C", "nimble_gemm")]}
    built = []

    def build(options):
        built.append(dict(options.tuned_convolutions))
        return FakeProgram(options.tuned_convolutions, ns)

    program, checked = build_with_choices(build, _C.BuildOptions(), choices)
    assert program.kernels == {"A": "onednn_prepacked", "B": "nimble_depthwise", "C": "nimble_gemm"}
    # The rule's program, the database's, then one with A's choice (and C's, the rule's) alone.
    assert built == [{}, {k: c["spec"] for k, c in choices.items()},
                     {"A": "onednn_prepacked", "C": "nimble_gemm"}]
    assert checked["A"]["kept"] and checked["A"]["context_ms"] == 200 / 1e6
    assert not checked["B"]["kept"] and checked["B"]["default_ms"] == 100 / 1e6
    assert checked["C"]["kept"] and "context_ms" not in checked["C"]
    # A database that agrees with the rule costs one build.
    built.clear()
    program, _ = build_with_choices(build, _C.BuildOptions(), {"C": choices["C"]})
    assert built == [{}] and program.kernels == FakeProgram.RULE


def test_choices_faster_op_by_op_are_dropped_where_the_whole_replay_runs_slower(monkeypatch):
    """The ops' times miss what a choice costs the rest of the replay (lowered_tuning.py): the
    kept choices are kept only where the whole replay runs faster with them; where it does not,
    the program without the one-thread choices is tried, then the rule's."""
    from nimble.replay.lowered_tuning import build_with_choices

    ns = {("A", "nimble_gemm"): 300, ("A", "nimble_gemm threads=1"): 200,
          ("B", "nimble_depthwise"): 100, ("B", "onednn_prepacked"): 80,
          ("C", "nimble_gemm"): 50}
    choices = {key: {"kernel": spec.split()[0], "spec": spec, "ms": 0.001, "signature": key}
               for key, spec in [("A", "nimble_gemm threads=1"), ("B", "onednn_prepacked")]}

    def build(options):
        return FakeProgram(options.tuned_convolutions, ns)

    # A's one-thread kernel costs the rest of the replay 500 ns: without it, B's choice alone.
    monkeypatch.setattr(FakeProgram, "GAP_NS", {"nimble_gemm threads=1": 500})
    program, checked = build_with_choices(build, _C.BuildOptions(), choices)
    assert program.kernels == {**FakeProgram.RULE, "B": "onednn_prepacked"}
    assert checked["B"]["kept"] and not checked["A"]["kept"]
    assert checked["A"]["context_ms"] < checked["A"]["default_ms"]  # faster op by op
    default_ms, without_a_ms = checked["A"]["whole_ms"]
    assert without_a_ms < default_ms  # the program it was dropped from ran faster
    # B's costs 500 ns too: the rule's program.
    monkeypatch.setattr(FakeProgram, "GAP_NS", {"nimble_gemm threads=1": 500,
                                                "onednn_prepacked": 500})
    program, checked = build_with_choices(build, _C.BuildOptions(), choices)
    assert program.kernels == FakeProgram.RULE
    assert not checked["A"]["kept"] and not checked["B"]["kept"]
    default_ms, tuned_ms = checked["B"]["whole_ms"]
    assert tuned_ms >= default_ms


def test_tuned_kernels_follow_weights_changed_after_prepare(tuned):
    model, x, _, db = tuned
    fast = nimble.Nimble(model).prepare(x, tuned=db)
    with torch.no_grad():
        before = model(x)
        for p in model.parameters():
            p.mul_(0.5)
        after = model(x)
        # Halving every weight moves eager's output far beyond the tolerance: a replay still on
        # the old weights could not pass.
        assert (after - before).abs().max() > 0.1 * before.abs().max()
        assert_matches_eager(fast(x), after)


def test_a_database_without_prepacked_records_leaves_the_rules_kernels(tmp_path):
    torch.manual_seed(0)
    model, x = zoo.build("torchvision:squeezenet1_1", image_size=32)
    db = str(tmp_path / "empty.db")
    assert nimble._C.tuning.TuningDatabase(db).count() == 0
    plain = nimble.Nimble(model).prepare(x)
    fast = nimble.Nimble(model).prepare(x, tuned=db)
    assert lowered_kernels(fast) == lowered_kernels(plain)
    assert [r for r in fast.tuned_report() if r["family"] == "prepacked"] == []


def _record(task, device, **knobs):
    """A JSON line of the tuning database: a prepacked config of `task` setting `knobs`
    (by their names without the family's prefix, to a label), the rest at their first value,
    timed faster than anything the tuner measures."""
    names = [name for name, _ in task["knobs"]]
    config = [0] * len(names)
    config[0] = task["families"].index("prepacked")
    for name, label in knobs.items():
        i = names.index("prepacked." + name)
        config[i] = task["knobs"][i][1].index(label)
    return json.dumps({"run": "test", "signature": task["signature"], "device": device,
                       "config": config, "seconds": [1e-9], "error": "none", "message": "",
                       "cost_seconds": 0.0, "cut_short": False, "recorded_at": 0.0})


def test_a_records_kernel_parameters_and_threads_reach_the_lowered_op(tmp_path, monkeypatch):
    from nimble.replay import lowered_tuning

    model, x = zoo.build("torchvision:mobilenet_v2", image_size=32)
    model = zoo.realistic_weights(model.eval(), lambda: model(x))
    unlowered = nimble.Nimble(model).prepare(x, lower_for_cpu=False)
    tasks = nimble._C.kernels.tasks(unlowered.replay)
    convs = [t for t in tasks if t["signature"].startswith("conv2d") and "prepacked" in t["families"]]
    dense = next(t for t in convs if "groups=1 " in t["signature"] and "x3x3/" in t["signature"])
    depthwise = next(t for t in convs if "groups=1 " not in t["signature"])
    device = nimble._C.kernels.device_key()
    lines = tmp_path / "records.jsonl"
    threads = [label for name, label in depthwise["knobs"] if name == "prepacked.threads"][0]
    lines.write_text("\n".join([
        _record(dense, device, kernel="nimble_gemm", threads=threads[-1], gemm_tile_rows="4",
                gemm_loop_order="columns", gemm_rows_per_block="64"),
        _record(depthwise, device, kernel="nimble_depthwise", threads="1", dw_pixels="4",
                dw_windows="off", dw_channel_vectors="1")]) + "\n")
    db = str(tmp_path / "tuned.db")
    assert nimble._C.tuning.TuningDatabase(db).import_jsonl(str(lines)) == 2

    choices = nimble._C.kernels.lowering_choices(db)
    by_signature = {c["signature"]: c for c in choices.values()}
    one_thread = " threads=1" if torch.get_num_threads() > 1 else ""
    every = f" threads={threads[-1]}" if int(threads[-1]) < torch.get_num_threads() else ""
    assert by_signature[dense["signature"]]["spec"] == (
        f"nimble_gemm{every} gemm.rows_per_block=64 gemm.loop_order=columns gemm.tile_rows=4")
    assert by_signature[depthwise["signature"]]["spec"] == (
        f"nimble_depthwise{one_thread} depthwise.channel_vectors=1 depthwise.pixels=4 "
        "depthwise.windows=off")
    # The replay keeps a record only where it runs faster there: these are, by decree.
    monkeypatch.setattr(lowered_tuning, "_per_op_ns",
                        lambda default, tuned: [[2.0] * len(default.replays[0].ops()),
                                                [1.0] * len(tuned.replays[0].ops())])
    monkeypatch.setattr(lowered_tuning, "_whole_replay_ms", lambda default, tuned: [2.0, 1.0])
    fast = nimble.Nimble(model).prepare(x, tuned=db)
    runs = {}
    for op in fast.replay.ops():
        if op.get("shape_key") in choices:
            runs.setdefault(op["shape_key"], set()).add(op["tuning"])
    for key, choice in choices.items():
        assert runs[key] == {choice["spec"]}, (key, runs[key])
        for word in choice["parameters"].split():
            assert all(word in op["kernel"] for op in fast.replay.ops()
                       if op.get("shape_key") == key)
    for seed in range(2):
        x2 = torch.randn(x.shape, generator=torch.Generator().manual_seed(seed))
        with torch.no_grad():
            assert_matches_eager(fast(x2), model(x2))

"""The tuned-kernel slot: tasks from a program, nimble.tune on real kernels, binding into a
replay (checked against eager), the report, and what happens with wrong input."""

import json
import os
import sqlite3
import subprocess
import sys
import warnings

import pytest
import torch

import nimble
from nimble.testing import assert_matches_eager
from nimble import zoo
from nimble._C import kernels, tuning
from nimble.tuning.curves import time_to_reach

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FAST = dict(min_repeat_seconds=2e-4, progress=False)  # short timings: correctness, not speed


class SmallNet(torch.nn.Module):
    """Every kind of convolution the families handle: plain 3x3 with and without bias,
    strided, pointwise, depthwise, grouped, dilated, with a channels_last input."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.b = torch.nn.Conv2d(8, 8, 3, stride=2, padding=1, groups=8, bias=False)
        self.c = torch.nn.Conv2d(8, 12, 1)
        self.d = torch.nn.Conv2d(12, 12, 3, padding=2, dilation=2, groups=3)
        self.e = torch.nn.Conv2d(12, 12, 3, padding=1, groups=12)

    def forward(self, x):
        y = torch.relu(self.a(x))
        y = self.c(self.b(y))
        return self.e(self.d(y)) + y


def prepared(model, x, **kw):
    torch.manual_seed(0)
    return nimble.Nimble(model.eval()).prepare(x, lower_for_cpu=False, **kw)


def test_tasks_group_equal_convolutions_and_list_the_families_that_fit():
    model, x = zoo.build("torchvision:mobilenet_v2", image_size=32)
    fast = nimble.Nimble(model).prepare(x, lower_for_cpu=False)
    tasks = kernels.tasks(fast.replay)
    ops = [op for t in tasks for op in t["ops"]]
    names = [o["name"] for o in fast.replay.ops()]
    tunable = ("aten::convolution", "aten::addmm", "aten::addmm.out")
    assert sorted(ops) == [i for i, n in enumerate(names) if n in tunable]
    assert len(tasks) < len(ops)  # repeated blocks share a task
    assert [t["name"] for t in tasks if t["name"].startswith("linear")] == ["linear 1280>1000"]
    for t in tasks:
        assert t["families"][0] == "aten"
        assert ("depthwise" in t["families"]) == t["name"].startswith("dw")
        assert ("im2col_gemm" in t["families"]) == t["name"].startswith(("conv", "linear"))
        assert t["space_size"] > 1
    # One task per signature: ops of equal signature share a task, and no two tasks share one.
    assert len({t["signature"] for t in tasks}) == len(tasks)


def test_linear_layers_are_tuned_and_bound_with_eager_results(tmp_path):
    """Linear layers reach the tuner as 1x1 convolutions: an inner one (addmm.out into a
    buffer) and the last one (addmm returning the model's output)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(40, 96), torch.nn.ReLU(),
                                torch.nn.Linear(96, 24)).eval()
    x = torch.randn(5, 40)
    with torch.no_grad():
        fast = nimble.Nimble(model).prepare((x,), lower_for_cpu=False)
    assert [o["name"] for o in fast.replay.ops()] == ["aten::addmm.out", "aten::relu",
                                                      "aten::addmm"]
    tasks = kernels.tasks(fast.replay)
    assert sorted(t["name"] for t in tasks) == ["linear 40>96 n5", "linear 96>24 n5"]
    assert all(t["families"] == ["aten", "im2col_gemm", "direct", "prepacked_linear"]
               for t in tasks)
    db = str(tmp_path / "tune.db")
    nimble.tune(fast, scheduler="round-robin", budget_seconds=1e9, budget_trials=24,
                database=db, slot_seconds=1e-3, **FAST)
    bound = fast.use_tuned(db, min_speedup=0)
    assert [r["bound"] for r in bound] == [True, True], bound
    for seed in (1, 2):
        x = torch.randn(5, 40, generator=torch.Generator().manual_seed(seed))
        with torch.no_grad():
            assert_matches_eager(fast(x), model(x), tolerance=1e-5)


@pytest.mark.parametrize("activation, fused", [(torch.nn.ReLU(inplace=True), " +relu"),
                                               (torch.nn.ReLU6(inplace=True), " +clamp"),
                                               (torch.nn.ReLU(), "")])
def test_an_activation_after_a_linear_layer_into_a_buffer_is_fused_when_in_place(
        tmp_path, activation, fused):
    """An in-place activation on an addmm.out's buffer is done by the tuned kernel; a
    functional one stays its own op (its result would outlive the buffer's planned life)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(40, 96), activation, torch.nn.Linear(96, 64),
                                activation, torch.nn.Linear(64, 24)).eval()
    x = torch.randn(5, 40)
    with torch.no_grad():
        fast = nimble.Nimble(model).prepare((x,), lower_for_cpu=False)
    names = sorted(t["name"] for t in kernels.tasks(fast.replay))
    assert names == [f"linear 40>96 n5{fused}", "linear 64>24 n5", f"linear 96>64 n5{fused}"]
    db = str(tmp_path / "tune.db")
    nimble.tune(fast, scheduler="round-robin", budget_seconds=1e9, budget_trials=30,
                database=db, slot_seconds=1e-3, **FAST)
    bound = fast.use_tuned(db, min_speedup=0)
    assert all(r["bound"] for r in bound), bound
    assert sum(len(r["absorbed"]) for r in bound) == (2 if fused else 0)
    for seed in (1, 2):
        x = torch.randn(5, 40, generator=torch.Generator().manual_seed(seed))
        with torch.no_grad():
            assert_matches_eager(fast(x), model(x), tolerance=1e-5)


def test_tune_records_every_measurement_and_binding_gives_eager_results(tmp_path):
    model, x = SmallNet(), torch.randn(2, 3, 20, 24).contiguous(memory_format=torch.channels_last)
    fast = prepared(model, x)
    db = str(tmp_path / "tune.db")
    report = nimble.tune(fast, scheduler="round-robin", budget_seconds=1e9, budget_trials=40,
                         database=db, slot_seconds=1e-3, **FAST)
    assert report["trials"] >= 40 and report["stop_reason"] == "budget"
    assert report["device"] == kernels.device_key()
    assert len(report["tasks"]) == 5
    rows = sqlite3.connect(db).execute("SELECT COUNT(*), COUNT(DISTINCT device) FROM measurements").fetchone()
    assert rows[0] == report["trials"] and rows[1] == 1

    bound = fast.use_tuned(db, min_speedup=0)  # bind every correct kernel, fast or not
    assert all(r["bound"] for r in bound), bound
    assert len(bound) == 5
    # torch.relu after self.a is the convolution's only reader: its epilogue does it.
    assert [r["absorbed"] for r in bound if r["absorbed"]] == [[1]]
    assert len(kernels.bound_kernels(fast.replay)) == 5 + 1
    for r in fast.tuned_report():
        if r["bound"]:
            assert r["family"] in ("aten", "im2col_gemm", "depthwise", "direct", "winograd",
                                   "prepacked")
            assert r["speedup"] == pytest.approx(r["aten_ms"] / r["tuned_ms"])
    with torch.no_grad():
        for _ in range(3):
            x2 = torch.randn_like(x)
            assert_matches_eager(fast(x2), model(x2))

    fast.use_tuned(None)
    assert kernels.bound_kernels(fast.replay) == [] and fast.tuned_report() == []
    with torch.no_grad():
        assert torch.equal(fast(x), model(x))


def test_a_kernel_is_bound_only_when_measured_faster_than_aten_by_min_speedup(tmp_path):
    """The rule every other test turns off with min_speedup=0. No kernel runs a billion times
    faster than ATen's, so with that factor every correct candidate counts as slower."""
    model, x = SmallNet(), torch.randn(1, 3, 12, 12)
    fast = prepared(model, x)
    db = str(tmp_path / "tune.db")
    nimble.tune(fast, scheduler="round-robin", budget_seconds=1e9, budget_trials=40,
                database=db, slot_seconds=1e-3, **FAST)
    slower = fast.use_tuned(db, min_speedup=1e9)
    assert len(slower) == 5 and not any(r["bound"] for r in slower), slower
    for r in slower:
        assert r["reason"] == "not faster than ATen when timed side by side", r
        assert r["aten_ms"] > 0 and r["tuned_ms"] > 0 and r["kernel"]
    assert kernels.bound_kernels(fast.replay) == []
    # At the default (1.0) the side-by-side times decide, op by op.
    for r in fast.use_tuned(db):
        assert r["bound"] == (r["aten_ms"] >= r["tuned_ms"]), r
    with torch.no_grad():
        assert_matches_eager(fast(x), model(x))


@pytest.mark.parametrize("name", ["mobilenet_v2", "resnet18", "shufflenet_v2_x1_0"])
@pytest.mark.parametrize("streams,fold", [(1, False), (2, True)])
def test_tuned_replays_of_real_models_match_eager(tmp_path, name, streams, fold):
    """With folded batch norms, activations and residual adds after convolutions are absorbed
    into the kernels' epilogues; on two streams the residual must be ready in any order."""
    model, x = zoo.build(f"torchvision:{name}", image_size=32)
    fast = nimble.Nimble(model).prepare(x, streams=streams, fold_batchnorm=fold,
                                        lower_for_cpu=False)
    db = str(tmp_path / "tune.db")
    tasks = kernels.tasks(fast.replay)
    # Round robin with one batch of 8 per task: every task gets measured.
    nimble.tune(fast, scheduler="round-robin", budget_seconds=1e9, budget_trials=8 * len(tasks),
                database=db, slot_seconds=1e-3, **FAST)
    bound = fast.use_tuned(db, min_speedup=0)
    assert all(r["bound"] for r in bound), [r["reason"] for r in bound if not r["bound"]]
    assert len(bound) == sum(len(t["ops"]) for t in tasks)
    absorbed = [j for r in bound for j in r["absorbed"]]
    names = [o["name"] for o in fast.replay.ops()]
    if fold:
        assert absorbed and {names[j] for j in absorbed} <= {"aten::relu_", "aten::hardtanh_", "aten::add_.Tensor"}
        if name == "resnet18":
            assert "aten::add_.Tensor" in {names[j] for j in absorbed}
        bound_ops = dict(kernels.bound_kernels(fast.replay))
        assert all("epilogue of op" in bound_ops[j] for j in absorbed)
    else:
        assert absorbed == []  # a batch norm sits between a convolution and its activation
    with torch.no_grad():
        x2 = torch.randn_like(x)
        assert_matches_eager(fast(x2), model(x2))


def test_prepare_binds_from_a_database_and_records_of_other_machines_need_asking(tmp_path):
    model, x = SmallNet(), torch.randn(1, 3, 16, 16)
    db = str(tmp_path / "tune.db")
    nimble.tune(prepared(model, x), scheduler="round-robin", budget_seconds=1e9,
                budget_trials=40, database=db, slot_seconds=1e-3, **FAST)
    fast = prepared(model, x, tuned=db)
    assert len(fast.tuned_report()) == 5

    other = str(tmp_path / "other.db")
    con = sqlite3.connect(db)
    con.execute("UPDATE measurements SET device = 'cpu Some Other CPU x64 threads'")
    con.commit()
    con.close()
    os.replace(db, other)
    for suffix in ("-wal", "-shm"):
        if os.path.exists(db + suffix):
            os.remove(db + suffix)
    report = fast.use_tuned(other, min_speedup=0)
    assert not any(r["bound"] for r in report)
    assert all("no successful record" in r["reason"] for r in report)
    report = fast.use_tuned(other, any_device=True, min_speedup=0)
    assert all(r["bound"] for r in report)
    assert all("another device: cpu Some Other CPU" in r["reason"] for r in report if r["bound"])
    with torch.no_grad():
        assert_matches_eager(fast(x), model(x))


def test_a_second_run_resumes_and_never_measures_a_config_twice(tmp_path):
    model, x = SmallNet(), torch.randn(1, 3, 12, 12)
    fast = prepared(model, x)
    db = str(tmp_path / "tune.db")
    for _ in range(2):
        nimble.tune(fast, budget_seconds=1e9, budget_trials=25, database=db, slot_seconds=0.2,
                    **FAST)
    con = sqlite3.connect(db)
    total, distinct = con.execute(
        "SELECT COUNT(*), COUNT(DISTINCT signature || config) FROM measurements").fetchone()
    assert total >= 50 and total == distinct


def test_tuning_on_a_busy_machine_warns_that_timings_will_be_disturbed(tmp_path, monkeypatch):
    from nimble.tuning.tune import busy_warning

    assert busy_warning(load=1.9, cores=2) is None
    assert busy_warning(load=4.5, cores=2) == (
        "the load average is 4.5 on 2 cores: other work will disturb the timings; tune on an "
        "idle machine for trustworthy results")
    fast = prepared(SmallNet(), torch.randn(1, 3, 12, 12))
    for load, warned in ((1e6, True), (0.0, False)):
        monkeypatch.setattr(os, "getloadavg", lambda load=load: (load, load, load))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            nimble.tune(fast, budget_seconds=1e9, budget_trials=4, database=str(tmp_path / "t.db"),
                        slot_seconds=0.2, **FAST)
        busy = [w for w in caught if "load average" in str(w.message)]
        assert len(busy) == warned and all(w.category is RuntimeWarning for w in busy)


def test_wrong_use_gets_clear_errors(tmp_path):
    model, x = SmallNet(), torch.randn(1, 3, 12, 12)
    with pytest.raises(nimble.NotPreparedError, match="prepare"):
        nimble.tune(nimble.Nimble(model), budget_trials=5)
    fast = prepared(model, x)
    with pytest.raises(ValueError, match="scheduler must be one of"):
        nimble.tune(fast, scheduler="fastest", budget_trials=5)
    with pytest.raises(FileNotFoundError, match="no tuning database"):
        fast.use_tuned(str(tmp_path / "missing.db"))
    softmax = nimble.Nimble(torch.nn.Softmax(dim=1).eval()).prepare(torch.randn(2, 4))
    with pytest.raises(ValueError, match="no op a kernel family can replace"):
        nimble.tune(softmax, budget_trials=5)
    train = nimble.Nimble(SmallNet().train()).prepare(x, training=True)
    with pytest.raises(NotImplementedError, match="inference replays only"):
        train.use_tuned(str(tmp_path / "x.db"))


def test_cli_tunes_a_model_binds_and_reports_the_whole_replay(tmp_path):
    db = str(tmp_path / "cli.db")
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run(
        [sys.executable, "-m", "nimble", "tune", "--model", "torchvision:squeezenet1_1",
         "--image-size", "32", "--budget-trials", "30", "--slot-seconds", "0.5", "--db", db,
         "--no-peers", "--json"], capture_output=True, text=True, env=env, cwd=ROOT,
        timeout=600)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["trials"] >= 30 and result["device"] == kernels.device_key()
    # What a user runs was tuned: the lowered replay, in context, one task per convolution
    # shape, and the rows are its lowered convolutions the database chose for.
    assert result["lowered"] and result["tasks"]
    assert all(t["signature"].startswith("lowered ") for t in result["tasks"])
    signatures = {t["signature"] for t in result["tasks"]}
    assert result["bound"] and all(r["signature"] in signatures for r in result["bound"])
    assert result["max_relative_error"] < 1e-4
    assert result["untuned_ms"] > 0 and result["tuned_ms"] > 0
    # The search's trials, what the re-timing at the end wrote (the rule's and each
    # candidate's rounds, per task re-timed), and the verdicts of the picks confirmed in the
    # whole replay (one a signature of the pick's shape).
    assert tuning.TuningDatabase(db).count() == result["trials"] + sum(
        t["compared"] for t in result["confirmed"]) + sum(
        len(p["signatures"]) for p in result["replay_confirmed"])
    assert 0 < result["replay_share"] <= 0.25
    assert result["peers"] is None  # --no-peers
    # Where the tuned replay's time went, and the budget's share the re-timing had.
    shares = result["time_shares"]
    assert 0 < shares["tunable_share"] <= 1 and shares["wall_ms"] > 0
    assert "nimble::max_pool2d_nhwc" in shares["others_ms"]
    assert 0.15 <= result["confirm_share"] <= 0.5


def test_cli_compares_schedulers_on_a_model_with_bests_remeasured_side_by_side():
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run(
        [sys.executable, "-m", "nimble", "tune", "--model", "torchvision:squeezenet1_1",
         "--image-size", "32", "--compare", "--unlowered", "--schedulers",
         "sequential,round-robin",
         "--seeds", "2", "--budget-trials", "16", "--slot-seconds", "0.2", "--json"],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert [r["scheduler"] for r in result["rows"]] == ["sequential", "round-robin"]
    assert sorted((r["scheduler"], r["seed"]) for r in result["runs"]) == [
        ("round-robin", 0), ("round-robin", 1), ("sequential", 0), ("sequential", 1)]
    for run in result["runs"]:
        mine, theirs = run["curve_remeasured"], run["curve"]
        # The same points in time, latencies from the re-measured configs.
        assert [p[:2] for p in mine] == [p[:2] for p in theirs]
        # Times are to the worst re-measured final of the run's seed, on the re-measured curve.
        level = max(r["curve_remeasured"][-1][2] for r in result["runs"]
                    if r["seed"] == run["seed"])
        assert run["time_to_99_s"] == time_to_reach(mine, level / 0.99)
        assert run["time_to_95_s"] == time_to_reach(mine, level / 0.95)


def test_bests_along_a_curve_are_the_tuners_by_mean_of_successful_records():
    """What --compare re-measures: after each curve point's trials, each task's best config
    as the tuner judged it (lowest mean of its timings; failed records never count)."""
    from nimble.tuning.models import _bests_along

    def record(signature, config, seconds, error="none"):
        return {"signature": signature, "config": config, "seconds": seconds, "error": error}

    records = [record("a", [1], [3.0, 3.0]), record("b", [1], [5.0]),
               record("a", [2], [2.0, 5.0]),  # a lower minimum, a higher mean: not better
               record("a", [3], [0.5], error="timeout"),
               record("a", [4], [2.6, 2.6]), record("b", [2], [])]
    curve = [(0.0, 0, 9.0), (1.0, 2, 8.0), (2.0, 4, 7.0), (3.0, 6, 6.0)]
    assert _bests_along(records, curve) == [
        {}, {"a": (1,), "b": (1,)}, {"a": (1,), "b": (1,)}, {"a": (4,), "b": (1,)}]


def test_time_to_reach_is_the_first_point_at_or_below_a_latency():
    curve = [(0.0, 0, 10.0), (1.0, 8, None), (2.0, 16, 9.0), (3.0, 24, 8.0), (4.0, 32, 9.5)]
    assert time_to_reach(curve, 9.0) == 2.0
    assert time_to_reach(curve, 8.5) == 3.0
    assert time_to_reach(curve, 10.0) == 0.0
    assert time_to_reach(curve, 7.9) is None


def test_device_key_names_the_vector_extension_and_the_cores():
    """A database tuned on an AVX2 machine is not applied on an AVX-512 one of the same
    model name: the key says which vector unit the CPU has, read at run time."""
    import os

    flags = set()
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    widest = ("avx512" if "avx512f" in flags else "avx2" if "avx2" in flags
              else "avx" if "avx" in flags else "sse")
    key = kernels.device_key()
    assert f" {widest} {os.cpu_count()} cores x{torch.get_num_threads()} threads" in key, key

"""`python -m nimble tune --simulate ...` and a tuning process killed mid-run."""

import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time

import pytest

from nimble.tuning import cli as tuning_cli
from nimble.tuning import curves
from nimble._C import tuning

SMALL = ["--tasks", "3", "--trials-per-task", "24", "--mcmc-steps", "100"]
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def cli(*args):
    """Runs the tune command in a fresh interpreter, as `python -m nimble tune` does."""
    code = "import sys; from nimble.tuning.cli import main; sys.exit(main(sys.argv[1:]))"
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-c", code, "tune", *args], capture_output=True,
                          text=True, env=env, cwd=ROOT)


def plotted_colors(path, n):
    """Which of the first n colors of matplotlib's cycle the PNG shows, by pixel count."""
    import matplotlib
    from matplotlib import colors, image

    pixels = image.imread(path)
    assert pixels.shape == (540, 900, 4)
    cycle = matplotlib.rcParams["axes.prop_cycle"].by_key()["color"][:n]
    return [int((abs(pixels[..., :3] - colors.to_rgb(c)) < 1e-3).all(axis=-1).sum()) for c in cycle]


def test_json_output_has_the_curve_and_convergence_times():
    done = cli("--simulate", "--scheduler", "dynatune", "--seed", "1", "--json", *SMALL)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["scheduler"] == "dynatune" and out["seed"] == 1 and out["trials"] == 72
    assert out["final_model_ms"] < out["initial_model_ms"]
    curve = out["curve"]
    final = out["final_model_ms"]
    assert min(s for s, _, ms in curve if ms <= final / 0.95) == out["time_to_95_s"]
    assert min(s for s, _, ms in curve if ms <= final / 0.99) == out["time_to_99_s"]
    assert 0 <= out["scheduler_overhead_share"] < 1


def test_text_output_progress_and_curve_csv(tmp_path):
    csv = tmp_path / "curve.csv"
    done = cli("--simulate", "--scheduler", "round-robin", "--seed", "0", "--curve", str(csv),
               *SMALL)
    assert done.returncode == 0, done.stderr
    assert "time to 95% of the final latency" in done.stdout
    # tqdm's bar toward the trial budget (3 tasks x 24), then the slot and the latency.
    assert "72/72" in done.stderr and "trial/s" in done.stderr and "slot" in done.stderr
    lines = csv.read_text().splitlines()
    assert lines[0] == "seconds,trials,model_ms" and len(lines) > 5


def test_plot_draws_every_curve(tmp_path):
    pytest.importorskip("matplotlib")
    png = tmp_path / "curve.png"
    done = cli("--simulate", "--scheduler", "round-robin", "--seed", "0", "--plot", str(png),
               *SMALL)
    assert done.returncode == 0, done.stderr
    assert plotted_colors(png, 1)[0] > 500  # the step line and its legend entry
    # --compare: one step line per scheduler, each in its own color (later lines may hide
    # earlier ones, whole when two schedulers make the same choices; the legend entry alone is
    # some 30 pixels).
    done = cli("--simulate", "--compare", "--seeds", "1", "--json", "--plot", str(png), *SMALL)
    assert done.returncode == 0, done.stderr
    assert all(count > 20 for count in plotted_colors(png, len(tuning.scheduler_names())))


def test_plot_without_matplotlib_names_the_extra_before_tuning(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib fails
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    png = tmp_path / "curve.png"
    assert tuning_cli.main(["--simulate", "--plot", str(png), *SMALL]) == 2
    err = capsys.readouterr().err
    assert "pip install nimble[plot]" in err and not png.exists()
    with pytest.raises(ImportError, match=r"pip install nimble\[plot\]"):
        curves.write_plot(str(png), {"a": [(0.0, 1, 1.0)]})


def test_tuning_progress_shows_the_budget_rate_and_latency(capsys):
    from nimble.tuning.tune import TuningProgress

    shown = TuningProgress(budget_seconds=10.0)
    shown.baseline(0, 2)
    shown.baseline(1, 2)
    # The last slot ends past the budget, by more than half a second: tqdm then formats the
    # bar with no total (a run raised TypeError at its very end).
    for seconds, trials, ms in ((4.0, 8, 2.0), (10.0, 16, 1.5), (11.2, 17, 1.5)):
        shown.slot({"slot": trials // 8, "task": "conv0", "tuning_seconds": seconds,
                    "trials": trials, "model_ms": ms, "task_ms": ms / 2, "task_start_ms": 1.0,
                    "expected_gain_ms": {"conv0": 0.0123, "conv1": 0.0456}})
    shown.done()
    err = capsys.readouterr().err
    assert "timing ATen's kernels" in err and "2/2" in err
    assert "11/10 s" in err and (
        "trials 17, slot 2 conv0 0.7500 ms (start 1.0000), expects 0.0123 ms from it, most from "
        "conv1 (0.0456 ms), model 1.500 ms (untuned 2.000 ms)") in err


def test_progress_shows_a_gpus_microsecond_tasks_and_nanosecond_gains():
    from nimble.tuning.tune import describe_slot

    text = describe_slot({"slot": 3, "task": "dw3x3", "task_ms": 0.00512, "task_start_ms": 0.0063,
                          "expected_gain_ms": {"dw3x3": 2.4e-5, "conv1x1": 0.0}})
    assert text == "slot 3 dw3x3 0.00512 ms (start 0.0063), expects 2.4e-05 ms from it"


def test_live_progress_carries_each_tasks_best_and_dynatunes_expected_gains():
    """The events a run sends: the slot task's best against its start, and per live task the
    reduction DynaTune's belief expects from one more slot (none from schedulers without one)."""
    from nimble._C import tuning

    def events(scheduler):
        seen = []
        tuning.simulate(scheduler=scheduler, seed=3, tasks=4, trials_per_task=64,
                        slot_seconds=0.5, progress=seen.append)
        return seen

    dyna = events("dynatune")
    assert dyna and all(0 < e["task_ms"] <= e["task_start_ms"] for e in dyna)
    assert any(e["task_ms"] < e["task_start_ms"] for e in dyna)  # tuning found something
    # After the warm-up round every task has a belief, and the gains are what it predicts.
    later = [e for e in dyna if len(e["expected_gain_ms"]) > 1]
    assert later and all(g >= 0 for e in later for g in e["expected_gain_ms"].values())
    assert any(g > 0 for e in later for g in e["expected_gain_ms"].values())
    assert all(not e["expected_gain_ms"] for e in events("round-robin"))


def test_compare_prints_the_table_for_every_scheduler():
    done = cli("--simulate", "--compare", "--seeds", "2", "--json", *SMALL)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert [r["scheduler"] for r in out["rows"]] == tuning.scheduler_names()
    seq = next(r for r in out["rows"] if r["scheduler"] == "sequential")
    # Undefined (None) when sequential never got within 1% of the best final latency.
    assert seq["speedup_vs_sequential"] in (None, pytest.approx(1.0))
    for row in out["rows"]:
        if row["time_to_99_s"] is not None:
            assert row["time_to_95_s"] <= row["time_to_99_s"]
    for name in tuning.scheduler_names():
        assert f"| {name} |" in out["table"]
    assert len(out["runs"]) == 2 * len(tuning.scheduler_names())
    for seed in (0, 1):
        finals = [r["final_model_ms"] for r in out["runs"] if r["seed"] == seed]
        best_runs = [r for r in out["runs"] if r["seed"] == seed and r["final_model_ms"] == min(finals)]
        assert all(r["time_to_99_s"] is not None for r in best_runs)  # the best reaches its own final


def test_database_commands_resume_export_import_best(tmp_path):
    db, other, jsonl = tmp_path / "a.db", tmp_path / "b.db", tmp_path / "a.jsonl"
    first = cli("--simulate", "--scheduler", "round-robin", "--db", str(db), "--json", *SMALL)
    assert first.returncode == 0, first.stderr
    resumed = cli("--simulate", "--scheduler", "round-robin", "--db", str(db), "--json", *SMALL)
    assert json.loads(resumed.stdout)["initial_model_ms"] == pytest.approx(
        json.loads(first.stdout)["final_model_ms"])
    assert cli("--db", str(db), "--export", str(jsonl)).returncode == 0
    assert len(jsonl.read_text().splitlines()) == 144
    assert cli("--db", str(other), "--import", str(jsonl)).returncode == 0
    a = json.loads(cli("--db", str(db), "--best", "--json").stdout)
    b = json.loads(cli("--db", str(other), "--best", "--json").stdout)
    assert len(a) == 3 and a == b
    assert cli("--export", str(jsonl)).returncode == 2  # no --db


def test_bad_arguments_fail_cleanly():
    assert cli("--scheduler", "dynatune").returncode == 2  # no --simulate
    done = cli("--simulate", "--scheduler", "bogus")
    assert done.returncode == 2 and "unknown scheduler 'bogus'" in done.stderr
    assert tuning_cli.main(["--simulate", "--scheduler", "bogus"]) == 2


def test_a_killed_tuning_process_leaves_a_readable_database(tmp_path):
    db = tmp_path / "killed.db"
    script = textwrap.dedent(f"""
        import time
        from nimble._C import tuning
        # Slow slots down so that the process is surely mid-run when it is killed.
        tuning.simulate(scheduler="dynatune", seed=0, tasks=4, trials_per_task=100000,
                        slot_seconds=5, database={str(db)!r}, mcmc_steps=50, mcmc_samples=20,
                        progress=lambda e: time.sleep(0.05))
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT,
                            env=dict(os.environ, PYTHONPATH=ROOT))
    try:
        count = 0
        deadline = time.monotonic() + 120
        while count < 40 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.1)
            if db.exists():
                try:
                    with sqlite3.connect(db) as conn:
                        count = conn.execute("SELECT COUNT(*) FROM measurements").fetchone()[0]
                except sqlite3.OperationalError:
                    pass  # schema not created yet
        assert proc.poll() is None, "the tuning process ended on its own"
        assert count >= 40
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        rows = conn.execute("SELECT COUNT(*) FROM measurements").fetchone()[0]
    assert rows >= count and rows % 8 == 0  # whole batches only
    store = tuning.TuningDatabase(str(db))
    assert store.count() == rows
    for sig in store.signatures("simulated"):
        assert store.records(sig, "simulated")


def test_tune_model_times_the_peers_beside_the_tuned_replay_only_where_installed(monkeypatch):
    """`tune --model`'s peers table is `bench --peers --tuned DB`'s row for the model, taken
    only when ONNX Runtime or OpenVINO is installed."""
    import argparse

    from nimble.bench import peers
    from nimble.tuning import models

    args = argparse.Namespace(model="torchvision:resnet18", batch=1, image_size=32, peer_runs=7)
    calls = []
    monkeypatch.setattr(peers, "measure_peers", lambda *a, **k: calls.append((a, k)) or {"x": 1})
    monkeypatch.setattr(peers, "missing_reason", lambda module: "not installed")
    assert models._peers_row(args, "t.db") is None and not calls
    monkeypatch.setattr(peers, "missing_reason",
                        lambda module: None if module == "openvino" else "not installed")
    assert models._peers_row(args, "t.db") == {"x": 1}
    (spec, batch, size), kwargs = calls[0]
    assert (spec, batch, size) == ("torchvision:resnet18", 1, 32)
    assert kwargs["tuned"] == "t.db" and kwargs["runs"] == 7
    assert set(kwargs["only"]) == {"nimble", "onnxruntime", "openvino"}


def test_op_time_shares_split_the_wall_time_between_tunable_and_other_ops():
    """`tune --model`'s line on where the replay's time goes: the tunable ops' share of each
    run's wall time, the other ops' time by name, medians over the runs."""
    from nimble.tuning import models

    names = ["nimble::convolution_prepacked", "aten::add", "nimble::convolution_prepacked",
             "aten::add", "nimble::max_pool2d_nhwc"]
    ms = 1_000_000
    runs = [(10 * ms, [(0, 0, 0, 3 * ms, 0), (1, 0, 3 * ms, 4 * ms, 0),
                       (2, 0, 4 * ms, 6 * ms, 0), (3, 0, 6 * ms, 7 * ms, 0),
                       (4, 0, 7 * ms, 9 * ms, 0)]),
            (20 * ms, [(0, 0, 0, 10 * ms, 0), (1, 0, 0, 2 * ms, 0), (2, 0, 0, 6 * ms, 0),
                       (3, 0, 0, 4 * ms, 0), (4, 0, 0, 2 * ms, 0)]),
            (10 * ms, [(0, 0, 0, 2 * ms, 0), (1, 0, 0, 1 * ms, 0), (2, 0, 0, 2 * ms, 0),
                       (3, 0, 0, 1 * ms, 0), (4, 0, 0, 1 * ms, 0)])]
    shares = models.op_time_shares(names, {0, 2}, runs)
    assert shares["tunable_share"] == pytest.approx(0.5)  # of 0.5, 0.8, 0.4
    assert shares["wall_ms"] == pytest.approx(10)
    assert shares["others_ms"] == pytest.approx({"aten::add": 2.0, "nimble::max_pool2d_nhwc": 2.0})
    every = models.op_time_shares(names, set(range(5)), runs)
    assert every["tunable_share"] == pytest.approx(0.9) and every["others_ms"] == {}
    assert models.op_time_shares(names, set(), runs)["tunable_share"] == 0

"""Recorded tuning traces: the shipped ones load and replay, schedulers compared on them spend
a budget that runs out, identical seeds give identical runs, and a recording of a small model
holds every configuration of its tasks (docs/tuning.md, "Traces")."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from nimble._C import tuning
from nimble.tuning import trace

TRACES = Path(__file__).resolve().parents[1] / "data" / "traces"
SHIPPED = sorted(TRACES.glob("*.jsonl*"))
# Replayed by the slower tests: the others (mobilenet_v2: 31 tasks) are only checked for shape.
REPLAYED = [p for p in SHIPPED if p.name.startswith("resnet18")]
# Quick searches: what the tuner's defaults would do, with a smaller sampler and annealer.
FAST = dict(mcmc_steps=100, mcmc_samples=50, threads=2)


def test_shipped_traces_are_small_and_complete():
    assert len(SHIPPED) >= 3 and len(REPLAYED) >= 2
    for path in SHIPPED:
        assert path.stat().st_size < 100_000, path
        t = trace.load(str(path))
        assert t["task_count"] == len(t["tasks"]) > 1
        for task in t["tasks"]:
            assert task["weight"] >= 1 and task["flops"] > 0
            assert len({tuple(c) for c in task["configs"]}) == len(task["configs"])
            ok = [s for s, e in zip(task["seconds"], task["error"]) if e == "none"]
            assert ok and all(s > 0 for s in ok)
            assert all(n >= 0 for n in task["noise"])
            assert all(c >= 0 for c in task["setup_seconds"] + task["repeat_seconds"])


def _compare(t: dict, schedulers, seeds, **kwargs) -> dict:
    return tuning.compare(schedulers=schedulers, seeds=seeds, trace=t, slot_seconds=3.0,
                          **FAST, **kwargs)


@pytest.mark.parametrize("path", REPLAYED, ids=[p.stem for p in REPLAYED])
def test_budget_runs_out_and_identical_seeds_repeat(path):
    t = trace.load(str(path))
    budget = tuning.trace_budget_seconds(t)
    # A quarter of finishing every task, at most a third of measuring everything once at the
    # adaptive evaluator's minimum of two repeats.
    assert 0 < budget <= trace.exhaustive_seconds(t, 2) / 3 * (1 + 1e-9)
    a = _compare(t, ["round-robin", "dynatune"], [0, 1])
    b = _compare(t, ["round-robin", "dynatune"], [0, 1])
    assert a["budget_seconds"] == pytest.approx(budget)
    for row in a["rows"]:
        assert row["unfinished_runs"] == 2, row  # no run finished every task
    for ra, rb in zip(a["runs"], b["runs"]):
        assert ra["stop_reason"] == "budget"
        # The curve the times are taken on: the tuner's, each task at its best config's record.
        remeasured = ra["remeasured_curve"]
        assert [p[:2] for p in remeasured] == [p[:2] for p in ra["curve"]]
        assert remeasured[-1][2] == pytest.approx(ra["remeasured_final_ms"])
        assert remeasured[0][2] == pytest.approx(
            1e3 * sum(x["weight"] * x["baseline_seconds"] for x in t["tasks"]))
        assert ra["curve"] == rb["curve"]
        assert ra["final_model_ms"] < ra["initial_model_ms"]
    # The reference is a re-measured final that some run reached, never below the optimum.
    assert a["reference_ms"] == pytest.approx(min(r["remeasured_final_ms"] for r in a["runs"]))
    assert a["reference_ms"] >= trace.optimum_ms(t) * (1 - 1e-9)
    assert a["runs"][0]["curve"] != a["runs"][2]["curve"]  # another seed, other noise


def test_a_restricted_space_replays_too():
    """The prepacked family alone (4 configurations a task) out of a recording of every family:
    the simulator does not care how big a space is."""
    full = trace.load(str(TRACES / "resnet18_64.jsonl.gz"))

    def prepacked(task, i):
        labels = task["knobs"][0]["labels"]
        return labels[task["configs"][i][0]] == "prepacked"

    small = trace.restricted(full, prepacked)
    assert 0 < small["config_count"] < full["config_count"]
    result = _compare(small, ["sequential", "dynatune"], [0], budget_seconds=1e9)
    for run in result["runs"]:
        assert run["stop_reason"] == "all-tasks-finished"
        for task in run["tasks"]:
            assert task["trials"] <= 4


def test_command_line_compares_on_a_trace():
    done = subprocess.run(
        [sys.executable, "-m", "nimble", "tune", "--simulate", "--compare", "--trace",
         str(TRACES / "resnet18_64.jsonl.gz"), "--seeds", "2", "--schedulers", "sequential,dynatune",
         "--mcmc-steps", "100"],
        capture_output=True, text=True, timeout=600, env=dict(os.environ))
    assert done.returncode == 0, done.stderr
    assert "| dynatune |" in done.stdout and "| sequential |" in done.stdout
    assert "2/2 |" in done.stdout  # both runs cut by the budget
    bad = subprocess.run([sys.executable, "-m", "nimble", "tune", "--simulate", "--compare",
                          "--trace", __file__], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "not a nimble trace" in bad.stderr


def test_load_refuses_a_file_that_is_not_a_trace(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_text(json.dumps({"run": "r"}) + "\n")
    with pytest.raises(ValueError, match="not a nimble trace"):
        trace.load(str(path))
    path.write_text(json.dumps({"nimble_trace": 1}) + "\n" + json.dumps({"name": "t"}) + "\n")
    with pytest.raises(ValueError, match="lacks"):
        trace.load(str(path))


def test_recording_a_small_model_holds_every_configuration(tmp_path):
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(),
                                torch.nn.Conv2d(8, 8, 3, padding=1)).eval()
    x = torch.randn(1, 3, 8, 8)
    path = tmp_path / "small.jsonl"
    header = trace.record_model(model, x, str(path), repeats=3, min_repeat_seconds=1e-4,
                                progress=False)
    t = trace.load(str(path))
    assert header["task_count"] == len(t["tasks"]) == 2
    spaces = tuning.trace_spaces(_replay(model, x))
    for task, space in zip(t["tasks"], spaces):
        assert task["configs"] == space["configs"]
        families = task["knobs"][0]["labels"]
        assert {"prepacked", "im2col_gemm"} <= set(families)
        assert {families[c[0]] for c in task["configs"]} == set(families)
        # Every family's own knobs are conditioned on it.
        for knob in task["knobs"][1:]:
            assert knob["parent"] == "family"
            assert knob["parent_labels"] == [knob["name"].split(".")[0]]
        for s, e in zip(task["seconds"], task["error"]):
            assert (s is None) == (e != "none")
    # Replays: the recorded model tunes in the simulator.
    result = _compare(t, ["dynatune"], [0])
    assert result["runs"][0]["final_model_ms"] < result["runs"][0]["initial_model_ms"] * 1.0001


def _replay(model, x):
    from nimble.replay.wrapper import Nimble

    return Nimble(model).prepare(x, streams=1, lower_for_cpu=False).replay

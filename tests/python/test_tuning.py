"""nimble._C.tuning from Python: simulated runs, Python-defined tasks, the database."""

import math
import sqlite3

import pytest

from nimble._C import tuning

SMALL = dict(tasks=3, trials_per_task=24, mcmc_steps=100, mcmc_samples=50)


def test_scheduler_names():
    assert tuning.scheduler_names() == [
        "sequential", "round-robin", "random", "flop-linear", "gradient", "dynatune"]


@pytest.mark.parametrize("scheduler", ["round-robin", "dynatune", "gradient"])
def test_simulate_spends_the_budget_and_improves(scheduler):
    r = tuning.simulate(scheduler=scheduler, seed=1, **SMALL)
    assert r["scheduler"] == scheduler
    assert r["stop_reason"] == "budget"
    assert r["trials"] == 72
    assert sum(t["trials"] for t in r["tasks"]) == 72
    assert r["final_model_ms"] < r["initial_model_ms"]
    curve = r["curve"]
    assert curve[0] == (0.0, 0, pytest.approx(r["initial_model_ms"]))
    assert all(b[2] <= a[2] and b[0] > a[0] for a, b in zip(curve, curve[1:]))


def test_simulate_is_reproducible_and_rejects_unknown_schedulers():
    a = tuning.simulate(scheduler="random", seed=2, **SMALL)
    b = tuning.simulate(scheduler="random", seed=2, **SMALL)
    assert a["curve"] == b["curve"]
    with pytest.raises(ValueError, match="unknown scheduler 'nope'"):
        tuning.simulate(scheduler="nope", **SMALL)


def test_a_config_that_does_not_fit_its_task_is_an_error_not_a_crash():
    measurer = tuning.SimulatedModelMeasurer(3, 2)
    signature = measurer.signatures()[0]
    repeats = tuning.fixed_repeats(2)
    for config in ([0, 0], [0] * 40, [10**6] * 5):
        with pytest.raises(ValueError, match="does not fit this space"):
            measurer.measure(signature, [config], repeats)


def test_progress_callback_sees_every_slot():
    events = []
    r = tuning.simulate(scheduler="round-robin", seed=0, progress=events.append, **SMALL)
    assert [e["slot"] for e in events] == list(range(1, r["slots"] + 1))
    assert events[-1]["trials"] == r["trials"]
    assert {e["task"] for e in events} == {t["name"] for t in r["tasks"]}


def test_an_exception_in_the_progress_callback_ends_the_run(tmp_path):
    path = str(tmp_path / "stopped.db")
    seen = []

    def progress(event):
        seen.append(event)
        if event["slot"] == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        tuning.simulate(scheduler="round-robin", seed=0, database=path, progress=progress, **SMALL)
    assert len(seen) == 3
    db = tuning.TuningDatabase(path)
    assert db.count() == seen[-1]["trials"] > 0  # everything measured before the stop is kept


def test_database_records_every_measurement_and_resumes(tmp_path):
    path = str(tmp_path / "tune.db")
    first = tuning.simulate(scheduler="round-robin", seed=3, database=path, **SMALL)
    db = tuning.TuningDatabase(path)
    assert db.count() == first["trials"]
    signatures = db.signatures("simulated")
    assert len(signatures) == 3
    for sig in signatures:
        best = db.best(sig, "simulated")
        assert best is not None and best["error"] == "none"
        records = db.records(sig, "simulated")
        assert min(sum(r["seconds"]) / len(r["seconds"]) for r in records if r["error"] == "none") \
            == pytest.approx(sum(best["seconds"]) / len(best["seconds"]))
    # Resuming starts from the stored bests and measures nothing twice.
    second = tuning.simulate(scheduler="round-robin", seed=3, database=path, **SMALL)
    assert second["initial_model_ms"] == pytest.approx(first["final_model_ms"])
    for sig in signatures:
        configs = [tuple(r["config"]) for r in db.records(sig, "simulated")]
        assert len(configs) == len(set(configs))
    # JSON lines out and in.
    jsonl = str(tmp_path / "export.jsonl")
    assert db.export_jsonl(jsonl) == db.count()
    other = tuning.TuningDatabase(str(tmp_path / "other.db"))
    assert other.import_jsonl(jsonl) == db.count()
    assert other.best(signatures[0], "simulated")["config"] == db.best(signatures[0], "simulated")["config"]
    # A plain SQLite client reads it too.
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_tune_python_tasks_with_constraints_and_failures(tmp_path):
    calls = []

    def measure(config):
        calls.append(dict(config))
        if config["x"] == 32 and config["mode"] == "slow":
            raise RuntimeError("does not launch")
        penalty = {"fast": 1.0, "slow": 2.0}[config["mode"]]
        return 1e-4 * penalty * (1 + abs(math.log2(config["x"]) - 3) + abs(config["u"] - 2))

    task = dict(name="toy", signature="toy/v1", flops=1e7, weight=2, baseline_seconds=1e-3,
                knobs=[("x", "pow2", 1, 64), ("u", "int", 0, 6, 2), ("mode", "choice", ["fast", "slow"])],
                constraints=[lambda v: v[0] * (v[1] + 1) <= 256],
                measure=measure)
    db_path = str(tmp_path / "toy.db")
    r = tuning.tune([task], scheduler="round-robin", budget_trials=40, slot_seconds=1e9,
                    survey_stop=False, database=db_path)
    assert r["trials"] == 40
    assert all(c["x"] * (c["u"] + 1) <= 256 for c in calls)
    assert len({tuple(sorted(c.items())) for c in calls}) == len(
        {tuple(r["config"]) for r in tuning.TuningDatabase(db_path).records("toy/v1", "cpu")})
    t = r["tasks"][0]
    assert t["best_ms"] < 1.0
    records = tuning.TuningDatabase(db_path).records("toy/v1", "cpu")
    assert len(records) == 40
    failed = [rec for rec in records if rec["error"] != "none"]
    assert all("does not launch" in rec["message"] for rec in failed)
    assert t["failures"] == len(failed)


def test_ensemble_sampler_matches_a_gaussian():
    samples, acceptance = tuning.sample_ensemble(
        lambda x: -0.5 * ((x[0] - 2.0) / 0.5) ** 2, [1.9], walkers=16, steps=1500, samples=1500, seed=1)
    mean = sum(s[0] for s in samples) / len(samples)
    var = sum((s[0] - mean) ** 2 for s in samples) / (len(samples) - 1)
    assert mean == pytest.approx(2.0, abs=0.06)
    assert var == pytest.approx(0.25, rel=0.2)
    assert 0.2 < acceptance < 0.9


def test_belief_prefers_a_rising_curve():
    rising = [0.6 / (1 + (i / math.exp(4.0)) ** -1.2) for i in range(1, 41)]
    flat = [0.3] * 40
    a = tuning.predict_belief(rising, 20, steps=200, samples=100)
    b = tuning.predict_belief(flat, 20, steps=200, samples=100)
    assert a["valid"] and b["valid"]
    assert a["expected_improvement"] > 10 * b["expected_improvement"]
    a_fit, b_fit, c_fit, rmse = tuning.fit_log_power(list(range(1, 41)), rising)
    assert rmse < 1e-3


def test_finish_when_cold_ends_tasks_sooner():
    common = dict(seed=3, tasks=4, trials_per_task=1000, early_stop_trials=100)
    off = tuning.simulate(**common)
    on = tuning.simulate(**common, finish_when_cold=True)
    assert on["stop_reason"] == off["stop_reason"] == "all-tasks-finished"
    assert on["trials"] < off["trials"]
    assert on["cold_time_share"] < off["cold_time_share"]

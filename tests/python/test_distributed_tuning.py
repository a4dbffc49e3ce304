"""Tuning with measurements on Ray workers (nimble/tuning/distributed.py): a local Ray instance with
2 CPUs on loopback, started once for the module. Simulated models, so that runs are
reproducible: the tuner's results with workers are checked against the in-process run, and
faults (a killed worker, a hanging one, a killed driver) against the database."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from nimble._C import tuning

ray = pytest.importorskip("ray")

from nimble.tuning import distributed  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SMALL = dict(tasks=3, mcmc_steps=50, slot_seconds=20.0)
# Up to 6 workers at once on the 2 CPUs of the test cluster: a fraction of a CPU each (their
# timings would disturb each other; simulated ones do not care).
SHARE = 0.25


@pytest.fixture(scope="module")
def ray_address():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             _node_ip_address="127.0.0.1")
    yield ray.get_runtime_context().gcs_address
    ray.shutdown()


def _pool_args(seed: int, tasks: int, sleep_scale: float = 0.0) -> tuple[dict, list[str]]:
    return (distributed.simulated_model(seed, tasks, sleep_scale=sleep_scale),
            tuning.SimulatedModelMeasurer(seed, tasks).signatures())


def _pool(group, seed: int, tasks: int, sleep_scale: float = 0.0):
    return group.pool(f"sim{seed}", *_pool_args(seed, tasks, sleep_scale))


def _each_config_once(db: tuning.TuningDatabase) -> int:
    records = 0
    for signature in db.signatures("simulated"):
        configs = [tuple(r["config"]) for r in db.records(signature, "simulated")]
        assert len(configs) == len(set(configs)), f"{signature}: a config was measured twice"
        records += len(configs)
    return records


def _measured_once(db: tuning.TuningDatabase, device: str) -> tuple[int, int]:
    """(records, records of results another model's batch measured): a config is measured on
    a worker once; a model that proposes it again records that result with cost 0."""
    measured, reused = [], 0
    for signature in db.signatures(device):
        for r in db.records(signature, device):
            if r["cost_seconds"] > 0:
                measured.append((signature, tuple(r["config"])))
            else:
                reused += 1
    assert len(measured) == len(set(measured)), "a config was measured twice"
    return len(measured) + reused, reused


def test_without_ray_workers_name_the_extra(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray now fails
    with pytest.raises(ImportError, match=r"pip install nimble\[ray\]"):
        distributed.WorkerGroup(2)
    from nimble.tuning.cli import main

    assert main(["tune", "--simulate", "--workers", "2", "--tasks", "2"]) == 2
    assert "pip install nimble[ray]" in capsys.readouterr().err


def test_two_workers_end_every_task_at_the_best_of_its_records(ray_address, tmp_path):
    """Which batch comes back first, and so which configs the search sees next, depends on
    the workers' timing; what holds in any order: the run ends when every task reached its
    early stop, each config was measured once, and every task's best is the best of the
    records the database holds for it (the mean of a successful record's timings)."""
    path = str(tmp_path / "tune.db")
    budget = dict(trials_per_task=500, early_stop_trials=100, database=path, **SMALL)
    with distributed.WorkerGroup(2, cores_per_worker=SHARE) as two:
        shared = tuning.simulate(seed=2, pool=_pool(two, 2, 3), **budget)
    assert shared["stop_reason"] == "all-tasks-finished"
    assert all(t["finished"] for t in shared["tasks"]) and len(shared["tasks"]) == 3
    db = tuning.TuningDatabase(path)
    assert _each_config_once(db) == shared["trials"] < 3 * 500
    here, ratios = tuning.SimulatedModelMeasurer(2, 3), []
    for task in shared["tasks"]:
        records = db.records(task["signature"], "simulated")
        assert len(records) == task["trials"], task["name"]
        means = [sum(r["seconds"]) / len(r["seconds"]) for r in records
                 if r["error"] == "none" and r["seconds"]]
        assert task["best_ms"] == pytest.approx(1e3 * min(means), rel=1e-12), task["name"]
        # Each record is its own config's result: measured again here, alone, it fails
        # alike and takes as long up to the noise (keyed by the batch a config came in).
        for r in records:
            ((seconds, error, *_),) = here.measure(task["signature"], [r["config"]],
                                                   tuning.fixed_repeats(3))
            assert r["error"] == error, (task["name"], r["config"])
            if error == "none":
                ratios.append(sum(r["seconds"]) / len(r["seconds"]) / (sum(seconds) / len(seconds)))
    assert sum(0.7 < x < 1.43 for x in ratios) >= 0.9 * len(ratios), sorted(ratios)
    assert shared["measure_seconds"] > 0
    assert shared["cold_seconds"] + shared["failed_seconds"] <= shared["measure_seconds"]


def _wait_for_records(db: tuning.TuningDatabase, count: int, thread: threading.Thread,
                      seconds: float = 120.0) -> None:
    """Until the database holds `count` records; fails, saying what it saw, when the tuning
    thread ends first or `seconds` pass."""
    deadline = time.monotonic() + seconds
    while db.count() < count:
        assert thread.is_alive(), f"the tuning thread ended after {db.count()} of {count} records"
        assert time.monotonic() < deadline, (
            f"{db.count()} of {count} records after {seconds:g} s: the workers stopped measuring")
        time.sleep(0.05)


def _run_in_thread(target):
    out = {}
    # A daemon: a test that fails while it runs must not keep the interpreter from exiting.
    thread = threading.Thread(target=lambda: out.setdefault("report", target()), daemon=True)
    thread.start()
    return thread, out


def test_a_killed_worker_has_its_batch_retried_and_the_run_goes_on(ray_address, tmp_path, capfd):
    path = str(tmp_path / "tune.db")
    with distributed.WorkerGroup(3, batch_timeout=60, cores_per_worker=SHARE) as three:
        pool = _pool(three, 4, 3, sleep_scale=0.01)  # a batch of ~8 simulated s: ~80 ms
        thread, out = _run_in_thread(lambda: tuning.simulate(
            seed=4, budget_trials=240, database=path, pool=pool, **SMALL))
        db = tuning.TuningDatabase(path)
        _wait_for_records(db, 40, thread)
        os.kill(three.pids()[0], signal.SIGKILL)
        thread.join(timeout=120)
        assert not thread.is_alive(), f"the run hangs after {db.count()} of 240 records"
        assert three.alive() == 2
    report = out["report"]
    assert report["trials"] == 240 and report["stop_reason"] == "budget"
    assert _each_config_once(db) == 240
    assert "died; 2 worker(s) left; its batch is retried on another worker" in capfd.readouterr().err


def test_a_hanging_worker_is_cut_at_the_timeout_and_replaced(ray_address, tmp_path, capfd):
    path = str(tmp_path / "tune.db")
    # A batch takes ~40 ms here: a healthy worker that a loaded machine slows past the
    # timeout is cut and replaced too, which the checks below allow; the stopped one must be.
    with distributed.WorkerGroup(2, batch_timeout=3.0, cores_per_worker=SHARE) as two:
        pool = _pool(two, 5, 3, sleep_scale=0.005)
        thread, out = _run_in_thread(lambda: tuning.simulate(
            seed=5, budget_trials=160, database=path, pool=pool, **SMALL))
        db = tuning.TuningDatabase(path)
        _wait_for_records(db, 24, thread)
        hung = two.pids()[0]
        os.kill(hung, signal.SIGSTOP)
        thread.join(timeout=120)
        assert not thread.is_alive(), f"the run hangs after {db.count()} of 160 records"
        assert two.alive() == 2 and hung not in two.pids()
    assert out["report"]["trials"] == 160
    assert _each_config_once(db) == 160
    assert f"(pid {hung}) ran past the batch timeout (3 s)" in capfd.readouterr().err


def test_a_killed_driver_leaves_a_database_that_resume_continues(ray_address, tmp_path):
    path = str(tmp_path / "tune.db")
    command = [sys.executable, "-m", "nimble", "tune", "--simulate", "--seed", "6", "--tasks", "3",
               "--mcmc-steps", "50", "--budget-trials", "400", "--workers", "2",
               "--ray-address", ray_address, "--cores-per-worker", str(SHARE), "--sleep-scale", "0.01",
               "--db", path, "--quiet"]
    env = dict(os.environ, PYTHONPATH=ROOT)
    driver = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if os.path.exists(path) and tuning.TuningDatabase(path).count() >= 64:
            break
        assert driver.poll() is None, driver.stderr.read().decode()
        time.sleep(0.1)
    driver.kill()
    driver.wait()
    db = tuning.TuningDatabase(path)
    before = _each_config_once(db)
    assert 64 <= before < 400
    resumed = subprocess.run(command[:-3] + ["--json"] + command[-3:-1], env=env,
                             capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    report = json.loads(resumed.stdout)
    after = _each_config_once(tuning.TuningDatabase(path))
    assert after == before + report["trials"]


def test_survey_tuning_of_three_models_summarizes_each(ray_address):
    command = [sys.executable, "-m", "nimble", "tune", "--simulate", "--models",
               "simulated:0,simulated:1,simulated:2", "--workers", "2", "--ray-address",
               ray_address, "--cores-per-worker", str(SHARE), "--tasks", "2", "--trials-per-task",
               "150", "--mcmc-steps", "50", "--json"]
    done = subprocess.run(command, env=dict(os.environ, PYTHONPATH=ROOT), capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert set(result["models"]) == {"simulated:0", "simulated:1", "simulated:2"}
    for summary in result["models"].values():
        assert summary["final_model_ms"] < summary["initial_model_ms"]
        assert summary["machine_seconds"] > 0
    cost = result["cost"]
    assert cost["machine_seconds"] == pytest.approx(
        sum(s["machine_seconds"] for s in result["models"].values()))
    assert set(cost["machine_seconds_by_kind"]) == {"hot", "cold", "failed"}
    if not os.path.exists("/sys/class/powercap"):
        assert cost["energy_joules"] is None  # absent, not 0


def test_models_sharing_a_task_measure_each_config_once(ray_address, tmp_path):
    path = str(tmp_path / "tune.db")
    budget = dict(seed=7, budget_trials=120, database=path, **SMALL)
    with distributed.WorkerGroup(2, cores_per_worker=SHARE) as two:
        # Two models with the same tasks (as resnet18 and resnet34 have): their tuners propose
        # the same configs, at the same time, on the same workers.
        pools = [_pool(two, 7, 3), two.pool("sim7-again", *_pool_args(7, 3))]
        runs = [_run_in_thread(lambda p=p: tuning.simulate(pool=p, **budget)) for p in pools]
        for thread, _ in runs:
            thread.join(timeout=120)
            assert not thread.is_alive(), "a model's run hangs"
    reports = [out["report"] for _, out in runs]
    db = tuning.TuningDatabase(path)
    records, reused = _measured_once(db, "simulated")
    assert records == sum(r["trials"] for r in reports) == 240
    assert reused > 0
    # What the tuners count as spent is what the workers measured, once.
    spent = sum(r["cost_seconds"] for s in db.signatures("simulated")
                for r in db.records(s, "simulated"))
    assert sum(r["measure_seconds"] for r in reports) == pytest.approx(spent)


def test_survey_tuning_of_two_zoo_models_measures_shared_tasks_once(ray_address, tmp_path):
    from nimble._C import kernels

    path = str(tmp_path / "tune.db")
    # resnet18 and resnet34 have the same 12 conv/linear shapes at 32x32 (resnet34 more of each).
    models = ["torchvision:resnet18", "torchvision:resnet34"]
    command = [sys.executable, "-m", "nimble", "tune", "--models", ",".join(models),
               "--image-size", "32", "--workers", "2", "--ray-address", ray_address,
               "--cores-per-worker", str(SHARE), "--budget-trials", "96", "--slot-seconds", "0.2",
               "--db", path, "--json"]
    done = subprocess.run(command, env=dict(os.environ, PYTHONPATH=ROOT), capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert list(result["models"]) == models
    # The survey may suspend a model on a plateau before its budget (when depends on the
    # timings); every other ends on it.
    for summary in result["models"].values():
        assert summary["trials"] == 96 or (summary["stop_reason"] == "suspended"
                                           and summary["trials"] < 96), summary
    db = tuning.TuningDatabase(path)
    records, reused = _measured_once(db, kernels.device_key())
    assert records == sum(s["trials"] for s in result["models"].values()) and reused > 0
    # The workers measured the candidates (a worker whose replay lacks the ops fails them all).
    failed = [r["message"] for s in db.signatures(kernels.device_key())
              for r in db.records(s, kernels.device_key()) if r["error"] != "none"]
    assert len(failed) < records / 4, failed[:3]
    assert result["cost"]["machine_seconds"] == pytest.approx(
        sum(s["machine_seconds"] for s in result["models"].values()))


@pytest.mark.parametrize("models, message", [
    ("torchvision:resnet1800", "unknown torchvision classification model 'resnet1800'"),
    ("resnet18", "expected torchvision:NAME"),
    ("simulated:x", "'simulated:x' has no integer seed"),
    ("hf:bert", "hf:bert runs through torch.compile"),
    ("simulated:0,torchvision:resnet18", "mixes simulated and zoo models"),
])
def test_survey_tuning_names_what_it_accepts(models, message):
    from nimble.tuning.cli import main

    with pytest.raises(SystemExit) as raised:
        main(["tune", "--models", models, "--workers", "2"])
    assert message in str(raised.value)
    if "mixes" not in message:
        assert "--models takes comma-separated zoo models (torchvision:NAME" in str(raised.value)


def test_a_zoo_model_is_tuned_on_workers_and_its_records_bind(ray_address, tmp_path):
    import nimble
    from nimble import zoo
    from nimble._C import kernels

    model, x = zoo.build("torchvision:squeezenet1_1", image_size=32)
    fast = nimble.Nimble(model).prepare(x, lower_for_cpu=False)
    path = str(tmp_path / "tune.db")
    report = nimble.tune(fast, budget_seconds=1e9, budget_trials=16, database=path, workers=2,
                         model=distributed.zoo_model("torchvision:squeezenet1_1", image_size=32),
                         scheduler="round-robin", slot_seconds=0.2, progress=False)
    assert report["trials"] == 16 and report["device"] == kernels.device_key()
    db = tuning.TuningDatabase(path)
    records = [r for s in db.signatures(report["device"]) for r in db.records(s, report["device"])]
    assert len(records) == 16
    assert all(r["error"] == "none" for r in records), [r["message"] for r in records]
    assert any(row["bound"] for row in fast.use_tuned(path, min_speedup=0))


def test_the_distributed_benchmarks_print_their_rows(ray_address, tmp_path, capsys):
    """python -m nimble.bench.distributed's three benchmarks on a tiny budget: the rows they
    print and the checks each row carries (timings are not judged here)."""
    import argparse

    from nimble.bench import distributed as bench

    args = argparse.Namespace(workers="1,2", seed=0, tasks=2, trials_per_task=40,
                              early_stop_trials=20, sleep_scale=0.0, runs=1, models="0,1",
                              survey_workers=2, round_seconds=40.0, plateau=2)

    def rows():  # Ray's own notices (a killed worker's) may come on the same stdout
        return [json.loads(line) for line in capsys.readouterr().out.splitlines()
                if line.startswith("{")]

    bench.throughput(args, cpus=2)
    one, two = rows()
    assert (one["bench"], one["workers"], two["workers"]) == ("throughput", 1, 2)
    for row in (one, two):
        assert 0 < row["trials"] <= 2 * 40 and row["target_speedup"] == round(0.85 * row["workers"], 2)
        assert row["stop_reason"] in ("all-tasks-finished", "budget") and row["final_model_ms"] > 0
    assert one["speedup"] == 1.0
    assert two["speedup"] == pytest.approx(two["trials_per_s"] / one["trials_per_s"], abs=0.02)

    bench.faults(args, cpus=2, scratch=str(tmp_path))
    clean, faulty = rows()
    assert clean["run"] == "fault-free" and faulty["run"] == 0
    # Killed mid-run (3 left) or after its end (the loss is not seen then): nothing lost.
    assert faulty["workers_left"] in (3, 4) and faulty["killed_worker"] in range(4)
    assert faulty["records"] == faulty["trials"] and faulty["lost"] == 0
    assert faulty["duplicates"] == 0

    bench.survey_bench(args, cpus=2)
    (survey,) = rows()
    assert survey["bench"] == "survey" and set(survey["models"]) == {"0", "1"}
    assert survey["survey_machine_s"] > 0 and survey["sequential_machine_s"] > 0
    for row in survey["models"].values():
        assert row["survey_stop"] in ("suspended", "all-tasks-finished", "budget")
        assert row["reached_99"] == (row["survey_final_ms"] <= row["alone_final_ms"] / 0.99)

"""`python -m nimble bench` prints one JSON object with the documented fields."""

import json
import subprocess
import sys

FIELDS = {"model", "eager_ms", "nimble_ms", "speedup", "prepare_s", "ops", "overhead_us_per_op",
          "multi_ms", "logical_streams", "physical_streams", "buffers_mb"}


def run(*args):
    return subprocess.run([sys.executable, "-m", "nimble", *args], capture_output=True, text=True)


def test_bench_json():
    done = run("bench", "--model", "transformer:encoder", "--runs", "3", "--warmup", "1", "--json")
    assert done.returncode == 0, done.stderr
    row = json.loads(done.stdout)
    assert FIELDS <= row.keys()
    assert row["ops"] > 0 and row["eager_ms"] > 0 and row["nimble_ms"] > 0
    # Per call and per op outside the kernels come from the same timed replays.
    assert row["call_overhead_us"] > 0
    assert abs(row["call_overhead_us"] - row["overhead_us_per_op"] * row["ops"]) <= 0.1 + row["ops"] * 1e-3
    # The one-stream replay's pool holds its working memory: no more than eager's peak.
    assert 0 < row["pool_mb"] <= row["eager_peak_mb"]


def test_bench_without_out_buffers_preallocates_nothing():
    done = run("bench", "--model", "torchvision:squeezenet1_1", "--image-size", "32", "--runs",
               "2", "--warmup", "1", "--out-variant-max-bytes", "1", "--json")
    assert done.returncode == 0, done.stderr
    row = json.loads(done.stdout)
    assert row["buffers_mb"] == 0 and row["eager_peak_mb"] > 0
    assert run("bench", "--out-variant-max-bytes", "-1").returncode == 2


def test_bench_measures_each_model_in_a_process_of_its_own():
    done = run("bench", "--model", "transformer:encoder", "--model", "torchvision:squeezenet1_1",
               "--image-size", "32", "--batch", "2", "--runs", "2", "--warmup", "1", "--json")
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    assert [r["model"] for r in rows] == ["transformer:encoder", "torchvision:squeezenet1_1"]
    assert all(FIELDS <= r.keys() and r["batch"] == 2 for r in rows)
    assert rows[1]["image_size"] == 32
    # Unknown models are refused before anything is measured.
    done = run("bench", "--model", "transformer:encoder", "--model", "torchvision:nope",
               "--runs", "1", "--warmup", "0")
    assert done.returncode == 2 and "unknown torchvision classification model 'nope'" in done.stderr
    assert "measured" not in done.stderr
    assert run("bench", "--image-size", "0").returncode == 2


def test_bench_child_failure_is_reported(capfd):
    import argparse

    from nimble.bench import _measure_apart

    args = argparse.Namespace(batch=0, image_size=64, runs=1, warmup=0, out_variant_max_bytes=0,
                              train=False, optimizer="sgd", breakdown=False)
    assert _measure_apart("transformer:encoder", args, None) == (None, 2)
    assert "--batch and --image-size must be positive" in capfd.readouterr().err


def test_bench_rejects_unknown_models_and_commands():
    done = run("bench", "--model", "torchvision:not_a_model", "--runs", "1")
    assert done.returncode == 2 and "unknown torchvision classification model 'not_a_model'" in done.stderr
    assert run("frobnicate").returncode == 2


TRAIN_FIELDS = {"model", "eager_ms", "fwd_bwd_ms", "fwd_bwd_speedup", "step_ms", "step_speedup",
                "multi_ms", "multi_vs_single", "physical_streams", "ops", "prepare_s", "breakdown"}


def test_bench_train_json():
    done = run("bench", "--train", "--model", "torchvision:squeezenet1_1", "--batch", "2",
               "--image-size", "32", "--runs", "2", "--warmup", "1", "--breakdown", "--json")
    assert done.returncode == 0, done.stderr
    row = json.loads(done.stdout)
    assert TRAIN_FIELDS <= row.keys()
    assert row["step_ms"] > 0 and row["breakdown"]["kernels_ms"] <= row["breakdown"]["replay_ms"]
    assert run("bench", "--train", "--model", "transformer:encoder").returncode == 2


def test_tune_is_a_command():
    done = run("tune", "--simulate", "--scheduler", "round-robin", "--seed", "0", "--tasks", "2",
               "--trials-per-task", "16", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["scheduler"] == "round-robin"

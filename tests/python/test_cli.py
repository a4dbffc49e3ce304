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


def test_bench_rejects_unknown_models_and_commands():
    done = run("bench", "--model", "torchvision:not_a_model", "--runs", "1")
    assert done.returncode == 2 and "unknown torchvision classification model 'not_a_model'" in done.stderr
    assert run("frobnicate").returncode == 2

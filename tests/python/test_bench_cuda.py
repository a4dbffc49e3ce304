"""`python -m nimble bench --device cuda`. Runs where a GPU is present; skips cleanly elsewhere
(the arguments, the refusal without a device and the report: test_cli.py)."""

import json
import math
import subprocess
import sys

import pytest
import torch

from nimble.bench.cuda import TOLERANCE, hand_captured_graph
from nimble.zoo import build

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")

VARIANTS = ["eager", "cuda_graph", "nimble_1", "nimble_multi"]


def bench(*args):
    done = subprocess.run([sys.executable, "-m", "nimble", "bench", "--device", "cuda", "--json",
                           "--runs", "5", "--warmup", "2", *args], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def check_row(row, spec, batch, variants=VARIANTS):
    assert row["model"] == spec and row["batch"] == batch
    assert row["image_size"] == (None if spec == "transformer:encoder" else 224)
    assert row["device"] == torch.cuda.get_device_name() and row["ops"] > 0
    assert list(row["variants"]) == variants
    for name, v in row["variants"].items():
        assert v["ms"] > 0 and v["gpu_ms"] > 0, name
        # Each call's events lie inside its wall interval, so the medians keep that order.
        assert v["gpu_ms"] <= v["ms"] + 0.02, name
        assert math.isfinite(v["max_abs_diff"]) and v["max_abs_diff"] >= 0, name
        assert (name == "eager") == ("prepare_s" not in v), name
    single, multi = row["variants"]["nimble_1"], row["variants"]["nimble_multi"]
    assert single["streams_requested"] == 1
    assert single["physical_streams"] == 1 and single["syncs"] == 0
    assert multi["physical_streams"] >= 1
    assert (multi["physical_streams"] == 1) == (multi["syncs"] == 0)
    ratios = row["ratios"]
    assert ratios["nimble_1_vs_cuda_graph"] == pytest.approx(
        row["variants"]["cuda_graph"]["ms"] / single["ms"], rel=1e-2)
    assert ratios["nimble_multi_vs_nimble_1"] == pytest.approx(single["ms"] / multi["ms"],
                                                                rel=1e-2)
    assert all(value > 0 for value in ratios.values())


MODELS = ["torchvision:resnet18", "torchvision:mobilenet_v2", "torchvision:googlenet",
          "torchvision:inception_v3", "torchvision:densenet121", "torchvision:efficientnet_b0",
          "torchvision:vit_b_16", "transformer:encoder"]


@pytest.mark.parametrize("batch", [1, 8])
def test_bench_rows_of_the_zoo(batch):
    args = ["--batch", str(batch)]
    for spec in MODELS:
        args += ["--model", spec]
    rows = bench(*args)
    assert [r["model"] for r in rows] == MODELS
    for row in rows:
        check_row(row, row["model"], batch)
        assert row["variants"]["nimble_multi"]["streams_requested"] == "auto"
        assert "nimble_multi_vs_compile" not in row["ratios"]


@pytest.mark.parametrize("batch", [1, 8])
def test_bench_googlenet_on_four_streams(batch):
    row = bench("--batch", str(batch), "--streams", "4", "--model", "torchvision:googlenet")
    check_row(row, "torchvision:googlenet", batch)
    multi = row["variants"]["nimble_multi"]
    # An Inception block has four independent branches.
    assert multi["streams_requested"] == 4 and multi["physical_streams"] == 4
    assert multi["syncs"] > 0 and row["logical_streams"] >= 4


def test_bench_with_torch_compile():
    pytest.importorskip("triton")
    row = bench("--compile", "--model", "torchvision:googlenet")
    check_row(row, "torchvision:googlenet", 1, VARIANTS + ["compile"])
    compiled = row["variants"]["compile"]
    assert compiled["prepare_s"] > 0 and "physical_streams" not in compiled
    assert row["ratios"]["nimble_multi_vs_compile"] == pytest.approx(
        compiled["ms"] / row["variants"]["nimble_multi"]["ms"], rel=1e-2)
    assert row["ratios"]["compile_s_vs_prepare_s"] == pytest.approx(
        compiled["prepare_s"] / row["variants"]["nimble_multi"]["prepare_s"], rel=1e-2)


@pytest.mark.parametrize("spec", ["torchvision:resnet18", "transformer:encoder"])
def test_hand_captured_graph_reads_each_input(spec):
    model, example = build(spec, batch=2, image_size=64)
    model, example = model.cuda(), example.cuda()
    replay = hand_captured_graph(model, example)
    for _ in range(2):
        x = torch.randn_like(example)
        with torch.no_grad():
            expected = model(x)
        torch.testing.assert_close(replay(x), expected, **TOLERANCE)

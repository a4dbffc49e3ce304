"""tests/gpu/run.sh and tests/gpu/report.py as far as a machine without a GPU allows: the
arguments, the one-line exit without a device, and the report written from canned results
of every part (the JSON rows the benches print, pytest's JUnit XML, the parts' exit codes)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from nimble.bench import cuda, cuda_train

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RUN = os.path.join(ROOT, "tests", "gpu", "run.sh")
REPORT = os.path.join(ROOT, "tests", "gpu", "report.py")


def run_sh(*args):
    env = dict(os.environ, PYTHON=sys.executable)
    return subprocess.run(["bash", RUN, *args], capture_output=True, text=True, env=env)


@pytest.mark.parametrize("args, message", [
    ((), "no OUTDIR given"),
    (("a", "b"), "one OUTDIR expected, got 'a' and 'b'"),
    (("--fast", "out"), "unknown option '--fast'"),
    (("--asan", "--tune", "out"), "--asan and --tune are separate runs"),
])
def test_run_sh_refuses_bad_arguments(args, message):
    done = run_sh(*args)
    assert done.returncode == 2
    assert message in done.stderr and "usage: bash tests/gpu/run.sh [--asan | --tune] OUTDIR" in done.stderr


def test_run_sh_help():
    done = run_sh("--help")
    assert done.returncode == 0 and done.stdout.startswith("usage:")


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is present")
@pytest.mark.parametrize("mode", [None, "--asan", "--tune"])
def test_run_sh_without_a_device_says_so_in_one_line_and_runs_nothing(tmp_path, mode):
    out = tmp_path / "out"
    done = run_sh(*([mode] if mode else []), str(out))
    assert done.returncode == 3
    assert done.stdout.count("\n") == 1 and done.stderr == ""
    assert done.stdout.startswith("tests/gpu/run.sh: no CUDA device (")
    assert not out.exists()


def _inference_row(spec, batch, multi_ms):
    names = ["eager", "cuda_graph", "nimble_1", "nimble_multi"]
    wall = {"eager": 3e-3, "cuda_graph": 1e-3, "nimble_1": 1.005e-3, "nimble_multi": multi_ms}
    variants = [cuda.Variant(n, print, prepare_s=None if n == "eager" else 1.0,
                             schedule={"physical_streams": 4, "physical_syncs": 9}
                             if n.startswith("nimble") else None) for n in names]
    samples = [[(wall[n], 0.9 * wall[n])] * 3 for n in names]
    meta = {"model": spec, "device": "Fake GPU", "batch": batch, "image_size": 224, "ops": 99,
            "logical_streams": 9}
    return cuda.summarize(meta, variants, samples, {n: 1e-6 for n in names})


def _training_row(spec, graph_ms):
    names = ["eager", "cuda_graph", "nimble_paper", "nimble_1", "nimble_multi"]
    wall = {"eager": 9e-3, "cuda_graph": graph_ms, "nimble_paper": 6e-3, "nimble_1": 4e-3,
            "nimble_multi": 3e-3}
    variants = [cuda.Variant(n, print, prepare_s=None if n == "eager" else 2.0) for n in names]
    samples = [[(wall[n], 0.9 * wall[n])] * 3 for n in names]
    meta = {"model": spec, "device": "Fake GPU", "batch": 32, "image_size": 32,
            "optimizer": "sgd", "ops": 500, "logical_streams": 30}
    row = cuda.summarize(meta, variants, samples, {n: 2e-7 for n in names},
                         ratios=cuda_train.RATIOS)
    for entry in row["variants"].values():
        entry["max_rel_diff"] = entry.pop("max_abs_diff")
        entry["matches_eager"] = True
    return row


JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">
<testcase classname="tests.python.test_cuda" name="test_a[cuda]" time="1.5"/>
<testcase classname="tests.python.test_cuda" name="test_b[cuda]" time="0.5"><failure message="x"/></testcase>
<testcase classname="tests.python.test_graph_training" name="test_c[cuda]" time="0"><skipped/></testcase>
</testsuite></testsuites>"""


def _canned(outdir):
    (outdir / "parts.tsv").write_text(
        "pytest\t1\t120\tpython3 -m pytest ...\n"
        "train_sgd\t0\t55\tpython3 -m nimble bench ...\n"
        "bench_b1\t124\t110\tpython3 -m nimble bench ...\n")
    (outdir / "pytest.xml").write_text(JUNIT)
    # googlenet misses the multi-stream target (1.5x of 1.6x), inception_v3 meets it.
    (outdir / "bench_b1.json").write_text(json.dumps([
        _inference_row("torchvision:googlenet", 1, 0.67e-3),
        _inference_row("torchvision:inception_v3", 1, 0.6e-3)]))
    (outdir / "train_sgd.json").write_text(json.dumps([
        _training_row("torchvision:resnet18", 3.8e-3), _training_row("torchvision:googlenet",
                                                                      3.0e-3)]))
    (outdir / "bert.json").write_text(json.dumps({
        "model": "hf:bert", "batch": 4, "sequence": 32, "device": "Fake GPU", "compile_s": 3.1,
        "eager_ms": 2.0, "nimble_ms": 0.5, "nimble_vs_eager": 4.0, "max_abs_diff": 1e-6,
        "matches_eager": True}))
    (outdir / "tune_check.json").write_text(json.dumps([{
        "model": "torchvision:mobilenet_v2", "device": "Fake GPU", "tasks": 52, "bound": 17,
        "bound_families": ["cuda_depthwise"], "untuned_ms": 1.2, "tuned_ms": 1.0,
        "speedup": 1.2, "depthwise_speedup_vs_cudnn_median": 1.4,
        "max_relative_error": 2e-6, "correct": True}]))


def test_report_from_canned_results(tmp_path):
    _canned(tmp_path)
    done = subprocess.run([sys.executable, REPORT, str(tmp_path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    text = (tmp_path / "report.md").read_text()
    assert done.stdout == text
    assert "Device: Fake GPU" in text
    assert "| bench_b1 | timeout | 124 | 110 |" in text and "| pytest | fail | 1 | 120 |" in text
    assert "## Tests: 1 passed, 1 failed, 0 errors, 1 skipped" in text
    assert "| tests.python.test_cuda::test_b[cuda] | fail | 0.5 |" in text
    assert "nimble_multi_vs_nimble_1 1.5" in text  # googlenet: 1.005 / 0.67
    assert "| hf:bert | 4 | 32 | 3.1 | 2 | 0.5 | 4 |" in text
    assert "| torchvision:mobilenet_v2 | 52 | 17 | ['cuda_depthwise'] | 1.2 | 1 | 1.2 | 1.4 |" \
        in text
    # The targets last: googlenet's multi-stream and the training graph ratios.
    last = text[text.index("## Targets"):]
    assert text.rstrip().endswith(last.rstrip())
    assert "| torchvision:googlenet b1 | multi-stream vs one stream | nimble_multi_vs_nimble_1 | " \
           "1.5 | 1.6 | NO |" in last
    assert "| torchvision:inception_v3 b1 | multi-stream vs one stream | " \
           "nimble_multi_vs_nimble_1 | 1.675 | 1.5 | yes |" in last
    assert "| torchvision:resnet18 b32 sgd | whole step vs hand-captured whole-step graph | " \
           "nimble_1_vs_cuda_graph | 0.95 | 0.97 | NO |" in last
    assert "| torchvision:googlenet b32 sgd | multi-stream whole step vs hand-captured graph | " \
           "nimble_multi_vs_cuda_graph | 1 | 1.1 | NO |" in last
    report = json.loads((tmp_path / "report.json").read_text())
    assert [p["status"] for p in report["parts"]] == ["fail", "pass", "timeout"]
    assert [t["outcome"] for t in report["tests"]] == ["pass", "fail", "skip"]
    assert len(report["inference"]) == 2 and len(report["training"]) == 2
    assert sum(t["met"] for t in report["targets"]) == 3 and len(report["targets"]) == 6


def test_report_of_a_run_that_produced_nothing(tmp_path):
    done = subprocess.run([sys.executable, REPORT, str(tmp_path)], capture_output=True, text=True)
    assert done.returncode == 0
    text = (tmp_path / "report.md").read_text()
    assert "## Tests: 0 passed" in text and "## Targets: 0 of 0 met" in text


def test_report_needs_an_existing_folder(tmp_path):
    done = subprocess.run([sys.executable, REPORT, str(tmp_path / "missing")],
                          capture_output=True, text=True)
    assert done.returncode == 2 and "usage:" in done.stderr

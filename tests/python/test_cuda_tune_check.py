"""tests/gpu/tune_check.py, the GPU tuning check of docs/cuda-kernels.md: it runs (and says
why it has nothing to do) without a GPU, and with one it tunes mobilenet_v2's CUDA graph
briefly and binds only kernels that agree with eager."""

import importlib.util
import pathlib

import pytest
import torch

SCRIPT = pathlib.Path(__file__).resolve().parents[1] / "gpu" / "tune_check.py"


def _load():
    spec = importlib.util.spec_from_file_location("tune_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU path")
def test_without_a_gpu_it_says_so_and_succeeds(capsys):
    assert _load().main([]) == 0
    assert "no CUDA device" in capsys.readouterr().out


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_short_tuning_run_binds_only_correct_kernels(tmp_path):
    out = tmp_path / "check.json"
    code = _load().main(["--models", "torchvision:mobilenet_v2", "--budget-seconds", "60",
                         "--database", str(tmp_path / "tune.db"), "--json", str(out)])
    assert code == 0, out.read_text()

"""What a tuning run cost (nimble/tuning/cost.py): energy read from RAPL packages and NVML
where they are, None (never 0) where they are not, and the split by kind of candidate. The
counters are faked: this machine may have neither."""

from __future__ import annotations

import os
import sys
import types

import pytest

from nimble.tuning import cost

POWERCAP = "/sys/class/powercap"


def _fake_powercap(monkeypatch, tmp_path, domains: dict[str, str]):
    """/sys/class/powercap as `domains` (name -> energy_uj file content), in tmp_path."""
    for name, content in domains.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "energy_uj").write_text(content)

    def moved(path: str) -> str:
        return str(tmp_path) + path[len(POWERCAP):] if path.startswith(POWERCAP) else path

    fake_os = types.SimpleNamespace(
        listdir=lambda path: os.listdir(moved(path)),
        path=types.SimpleNamespace(join=os.path.join))
    monkeypatch.setattr(cost, "os", fake_os)
    monkeypatch.setattr(cost, "open", lambda path, *a, **k: open(moved(path), *a, **k),
                        raising=False)


def _fake_nvml(monkeypatch, millijoules: list[int] | None, fail: bool = False):
    module = types.ModuleType("pynvml")
    module.nvmlInit = lambda: None
    if fail:
        def no_counter(handle):
            raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")
        module.nvmlDeviceGetTotalEnergyConsumption = no_counter
    else:
        module.nvmlDeviceGetTotalEnergyConsumption = lambda handle: millijoules[handle]
    module.nvmlDeviceGetCount = lambda: len(millijoules or [])
    module.nvmlDeviceGetHandleByIndex = lambda i: i
    monkeypatch.setitem(sys.modules, "pynvml", module)


def test_rapl_counts_packages_only_and_skips_unreadable_ones(monkeypatch, tmp_path):
    _fake_powercap(monkeypatch, tmp_path, {
        "intel-rapl:0": "2000000\n", "intel-rapl:1": "500000\n",
        "intel-rapl:0:0": "999000000\n",  # a subdomain: inside package 0 already
        "intel-rapl:2": "not a number\n", "dtpm": "7\n"})
    monkeypatch.setitem(sys.modules, "pynvml", None)
    assert cost.energy_counters() == {"rapl": pytest.approx(2.5), "nvml": None}


def test_counters_that_are_absent_read_none(monkeypatch, tmp_path):
    _fake_powercap(monkeypatch, tmp_path, {"dtpm": "7\n"})
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml fails
    assert cost.energy_counters() == {"rapl": None, "nvml": None}
    _fake_nvml(monkeypatch, [])  # NVML without a GPU
    assert cost.energy_counters()["nvml"] is None
    _fake_nvml(monkeypatch, [5], fail=True)  # a GPU without the counter
    assert cost.energy_counters()["nvml"] is None


def test_nvml_sums_every_gpu_in_joules(monkeypatch, tmp_path):
    _fake_powercap(monkeypatch, tmp_path, {})
    _fake_nvml(monkeypatch, [1500, 2500])
    assert cost.energy_counters() == {"rapl": None, "nvml": pytest.approx(4.0)}


def test_energy_delta_adds_the_counters_present_both_times_and_leaves_out_a_wrap():
    assert cost.energy_delta({"rapl": 10.0, "nvml": 3.0}, {"rapl": 12.5, "nvml": 4.0}) == 3.5
    assert cost.energy_delta({"rapl": 10.0, "nvml": None}, {"rapl": 11.0, "nvml": 9.0}) == 1.0
    assert cost.energy_delta({"rapl": 10.0, "nvml": 3.0}, {"rapl": 2.0, "nvml": 4.0}) == 1.0
    assert cost.energy_delta({"rapl": None, "nvml": None}, {"rapl": None, "nvml": None}) is None
    assert cost.energy_delta({"rapl": 10.0}, {"rapl": 9.0}) is None  # wrapped: unknown, not 0


REPORT = {"measure_seconds": 100.0, "cold_seconds": 30.0, "failed_seconds": 10.0}


def test_cost_summary_apportions_energy_by_machine_seconds():
    summary = cost.cost_summary(REPORT, wall_seconds=60.0, joules=500.0)
    assert summary["machine_seconds_by_kind"] == {"hot": 60.0, "cold": 30.0, "failed": 10.0}
    assert summary["energy_joules_by_kind"] == pytest.approx(
        {"hot": 300.0, "cold": 150.0, "failed": 50.0})
    assert cost.format_cost(summary) == ("measuring cost: 100 machine-s (hot 60, cold 30, "
                                         "failed 10), 60.0 s wall; energy 500 J")


def test_cost_summary_without_a_counter_says_absent():
    summary = cost.cost_summary(REPORT, wall_seconds=60.0, joules=None)
    assert summary["energy_joules"] is None and summary["energy_joules_by_kind"] is None
    assert cost.format_cost(summary).endswith("energy: absent (no RAPL or NVML counter here)")

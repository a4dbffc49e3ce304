"""What a tuning run cost: machine-seconds spent measuring, split into hot, cold and failed
candidates, and energy where this machine has a counter (RAPL packages under
/sys/class/powercap on CPUs, NVML on NVIDIA GPUs). An absent counter is reported as None,
never as 0."""

from __future__ import annotations

import os


def _rapl_joules() -> float | None:
    root = "/sys/class/powercap"
    try:
        names = os.listdir(root)
    except OSError:
        return None
    total, found = 0.0, False
    for name in names:
        if not name.startswith("intel-rapl:") or name.count(":") != 1:
            continue  # packages only: their subdomains are counted inside them
        try:
            with open(os.path.join(root, name, "energy_uj")) as f:
                total += int(f.read()) / 1e6
            found = True
        except (OSError, ValueError):
            continue
    return total if found else None


def _nvml_joules() -> float | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        count = pynvml.nvmlDeviceGetCount()
        if count == 0:
            return None
        return sum(pynvml.nvmlDeviceGetTotalEnergyConsumption(
            pynvml.nvmlDeviceGetHandleByIndex(i)) for i in range(count)) / 1e3
    except Exception:  # no pynvml, no driver, or a GPU without the counter
        return None


def energy_counters() -> dict[str, float | None]:
    """Joules consumed so far, per counter ("rapl", "nvml"); None where a counter is absent."""
    return {"rapl": _rapl_joules(), "nvml": _nvml_joules()}


def energy_delta(before: dict, after: dict) -> float | None:
    """Joules between two readings, all present counters together; None when no counter was
    readable both times (a counter that wrapped is left out rather than read wrong)."""
    deltas = [after[k] - before[k] for k in before
              if before[k] is not None and after.get(k) is not None and after[k] >= before[k]]
    return sum(deltas) if deltas else None


def cost_summary(report: dict, wall_seconds: float, joules: float | None) -> dict:
    """The tuner report's machine-seconds by kind of candidate, the wall time, and the energy
    (apportioned to the kinds by machine-seconds; None: no counter)."""
    total = report["measure_seconds"]
    cold, failed = report["cold_seconds"], report["failed_seconds"]
    split = {"hot": total - cold - failed, "cold": cold, "failed": failed}
    out = {"machine_seconds": total, "wall_seconds": wall_seconds,
           "machine_seconds_by_kind": split, "energy_joules": joules,
           "energy_joules_by_kind": None}
    if joules is not None and total > 0:
        out["energy_joules_by_kind"] = {k: joules * v / total for k, v in split.items()}
    return out


def format_cost(cost: dict) -> str:
    s = cost["machine_seconds_by_kind"]
    energy = ("energy: absent (no RAPL or NVML counter here)" if cost["energy_joules"] is None
              else f"energy {cost['energy_joules']:.0f} J")
    return (f"measuring cost: {cost['machine_seconds']:.0f} machine-s (hot {s['hot']:.0f}, "
            f"cold {s['cold']:.0f}, failed {s['failed']:.0f}), {cost['wall_seconds']:.1f} s "
            f"wall; {energy}")

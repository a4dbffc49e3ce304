"""A tuning run's latency curve: (seconds, trials, model latency) points, read (time to reach a
latency), printed, written as CSV and plotted. Shared by the command line, real-model tuning and
the distributed-tuning benchmarks."""

from __future__ import annotations


def time_to_reach(curve, latency_ms: float) -> float | None:
    for seconds, _trials, model_ms in curve:
        if model_ms is not None and model_ms <= latency_ms:
            return seconds
    return None


def format_seconds(v, unit="s") -> str:
    return "never" if v is None else f"{v:.0f} {unit}"


def scheduler_overhead(report: dict) -> float:
    """The scheduler's own wall time as a share of the tuning time it scheduled (slots that end
    early, when their task finishes, count for what they took, not for their nominal length)."""
    return report["scheduler_wall_seconds"] / max(report["tuning_seconds"], 1e-9)


def print_curve(report: dict) -> None:
    """The model latency at each tenth of the tuning time, then times to 95%/99% of the final
    latency, scheduler overhead and the share of time on cold and failing candidates."""
    curve, final = report["curve"], report["final_model_ms"]
    t95 = time_to_reach(curve, final / 0.95)
    t99 = time_to_reach(curve, final / 0.99)
    overhead = scheduler_overhead(report)
    print(f"{'tuning time (s)':>16} {'trials':>7} {'model latency (ms)':>19}")
    marks = [i * report["tuning_seconds"] / 10 for i in range(11)]
    shown = 0
    for seconds, trials, model_ms in curve:
        if shown < len(marks) and seconds >= marks[shown]:
            print(f"{seconds:16.0f} {trials:7d} {model_ms:19.3f}")
            while shown < len(marks) and seconds >= marks[shown]:
                shown += 1
    print(f"initial {report['initial_model_ms']:.3f} ms, final {final:.3f} ms")
    print(f"time to 95% of the final latency: {format_seconds(t95)}; to 99%: {format_seconds(t99)}")
    print(f"scheduler overhead {100 * overhead:.3f}% of the tuning time; "
          f"{100 * report['cold_time_share']:.1f}% of measurement time on cold candidates, "
          f"{100 * report['failed_time_share']:.1f}% on failing ones; "
          f"{report['cut_short']} candidates cut short"
          + (f", {report['stalled_samples']} preempted repeats timed again"
             if report.get("stalled_samples") else ""))


def write_csv(path: str, curve) -> None:
    with open(path, "w") as f:
        f.write("seconds,trials,model_ms\n")
        for s, t, ms in curve:
            f.write(f"{s:.6g},{t},{ms:.9g}\n")


PLOT_INSTALL_HINT = "plots need matplotlib: pip install nimble[plot]"


def plotting_available() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def write_plot(path: str, curves: dict, title: str = "") -> None:
    """Model latency (ms) over tuning time (s), one step line per curve, to a 900x540 PNG file."""
    try:
        from matplotlib.figure import Figure  # no pyplot: no GUI backend, no global figure state
    except ImportError as e:
        raise ImportError(PLOT_INSTALL_HINT) from e
    if not any(ms is not None for c in curves.values() for _s, _t, ms in c):
        raise ValueError("nothing to plot")
    fig = Figure(figsize=(9, 5.4), dpi=100, layout="constrained")
    ax = fig.add_subplot()
    for name, curve in curves.items():
        points = [(s, ms) for s, _t, ms in curve if ms is not None]
        # A step: the best latency so far holds until the next measurement improves it.
        ax.step([s for s, _ in points], [ms for _, ms in points], where="post", label=name,
                linewidth=2)
    ax.set_xlabel("tuning time (s)")
    ax.set_ylabel("model latency (ms)")
    ax.set_xlim(left=0)
    ax.grid(color="0.85")
    if title:
        ax.set_title(title)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), frameon=False)
    fig.savefig(path, format="png")

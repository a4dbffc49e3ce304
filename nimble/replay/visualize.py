"""Files that show a replay: the op graph as DOT, one replay as a Chrome/Perfetto trace."""

from __future__ import annotations

import json

_COLOURS = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1",
            "#ff9da7", "#9c755f", "#bab0ac"]


def write_dot(path: str, schedule: dict, dependencies: list[tuple[int, int]]) -> None:
    lines = ["digraph nimble {", "  node [shape=box, style=filled, fontname=Helvetica];"]
    for op, name in enumerate(schedule["ops"]):
        stream = schedule["physical_stream"][op]
        logical = schedule["logical_stream"][op]
        colour = _COLOURS[stream % len(_COLOURS)]
        lines.append(
            f'  op{op} [label="{op}: {name}\\nstream {stream} (logical {logical})", '
            f'fillcolor="{colour}"];'
        )
    for source, target in dependencies:
        cross = schedule["physical_stream"][source] != schedule["physical_stream"][target]
        lines.append(f"  op{source} -> op{target}{' [style=dashed]' if cross else ''};")
    lines.append("}")
    with open(path, "w") as out:
        out.write("\n".join(lines) + "\n")


def write_trace(path: str, names: list[str], timings: list[tuple]) -> None:
    events = [
        {"name": "thread_name", "ph": "M", "pid": 0, "tid": stream, "args": {"name": f"stream {stream}"}}
        for stream in sorted({t[1] for t in timings})
    ]
    for op, stream, start_ns, end_ns, *_ in timings:
        events.append({
            "name": names[op], "ph": "X", "pid": 0, "tid": stream,
            "ts": start_ns / 1e3, "dur": max(end_ns - start_ns, 1) / 1e3, "args": {"op": op},
        })
    with open(path, "w") as out:
        json.dump({"traceEvents": events, "displayTimeUnit": "ns"}, out)

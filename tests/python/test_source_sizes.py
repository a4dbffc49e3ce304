"""Every source file of the core (csrc/), the tuner (tuning/) and the Python package (nimble/)
stays short enough for a reader to hold: a file that grows past the limit is split along its stages or
concepts, as program/program_builder.cpp was into op_lowering.cpp (and its trace rewrites into
passes/trace_passes.cpp)."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("csrc", "tuning", "nimble")
SUFFIXES = {".c", ".cc", ".cpp", ".cu", ".cuh", ".h", ".hpp", ".inc", ".py"}
MAX_LINES = 400


def source_files() -> list[Path]:
    return sorted(
        p for folder in FOLDERS for p in (ROOT / folder).rglob("*")
        if p.is_file() and p.suffix in SUFFIXES
    )


def line_count(path: Path) -> int:
    with path.open("rb") as f:
        return sum(1 for _ in f)


def test_the_core_has_sources_to_measure():
    assert len(source_files()) > 50, f"no C++ sources found under {FOLDERS} of {ROOT}"


def test_no_source_file_is_over_the_limit():
    long = [
        f"{p.relative_to(ROOT)}: {n} lines"
        for p in source_files()
        if (n := line_count(p)) > MAX_LINES
    ]
    assert not long, (
        f"sources over {MAX_LINES} lines (split them along their stages or concepts):\n"
        + "\n".join(long)
    )

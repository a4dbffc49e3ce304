"""Writes OUTDIR/report.md and OUTDIR/report.json from what tests/gpu/run.sh left in OUTDIR,
and prints the markdown (the targets table last). Every input is optional: a part that
did not run, failed or timed out shows as such.

    python tests/gpu/report.py OUTDIR

Inputs: parts.tsv (name, exit code, seconds, command per line) and each part's NAME.log,
pytest*.xml (JUnit), bench_*.json / bench_*.jsonl (rows of `python -m nimble bench --device
cuda --json`: a row, a list of rows, or one row per line), train_*.json / train_*.jsonl
(rows of `... --train --json`), step_gap.json (tests/gpu/train_gap.py), bert.json (tests/gpu/bert_compile.py), tune_check.json
(tests/gpu/tune_check.py, the --tune run). The failure messages (the end of each failed
part's log, each failed test's message) are in the report itself: it may be all that
comes back from a GPU machine.
"""

from __future__ import annotations

import glob
import json
import os
import sys
import xml.etree.ElementTree as ElementTree

# Issue 45's targets: (row filter, ratio, at least, what).
INFERENCE_TARGETS = [
    (lambda r: True, "nimble_1_vs_cuda_graph", 0.99, "one stream vs hand-captured graph"),
    (lambda r: True, "nimble_multi_vs_nimble_1", 0.98, "streams=auto never below one stream"),
    (lambda r: r["model"] == "torchvision:googlenet" and r["batch"] == 1,
     "nimble_multi_vs_nimble_1", 1.8, "multi-stream vs one stream"),
    (lambda r: r["model"] == "torchvision:inception_v3" and r["batch"] == 1,
     "nimble_multi_vs_nimble_1", 1.5, "multi-stream vs one stream"),
    (lambda r: r["model"] in ("torchvision:googlenet", "torchvision:inception_v3"),
     "nimble_multi_vs_compile", 1.0, "multi-stream vs torch.compile(reduce-overhead)"),
]
TRAINING_TARGETS = [
    (lambda r: r["model"] in ("torchvision:resnet18", "torchvision:mobilenet_v2",
                              "torchvision:googlenet"),
     "nimble_1_vs_cuda_graph", 0.97, "whole step vs hand-captured whole-step graph"),
    (lambda r: r["model"] == "torchvision:googlenet",
     "nimble_multi_vs_cuda_graph", 1.1, "multi-stream whole step vs hand-captured graph"),
]
# How much of a failure the report quotes.
LOG_LINES = 25
MESSAGE_LINES = 15


def read_parts(outdir: str) -> list[dict]:
    path = os.path.join(outdir, "parts.tsv")
    if not os.path.exists(path):
        return []
    parts = []
    with open(path) as f:
        for line in f:
            fields = line.rstrip("\n").split("\t")
            if len(fields) < 4:
                continue
            name, code, seconds, command = fields[:4]
            code = int(code)
            status = "pass" if code == 0 else ("timeout" if code in (124, 137) else "fail")
            parts.append({"part": name, "status": status, "exit_code": code,
                          "seconds": int(seconds), "command": command})
    return parts


def read_tests(outdir: str) -> list[dict]:
    tests = []
    for path in sorted(glob.glob(os.path.join(outdir, "pytest*.xml"))):
        suite = os.path.basename(path)[len("pytest"):-len(".xml")].lstrip("-_") or "gpu"
        try:
            root = ElementTree.parse(path).getroot()
        except ElementTree.ParseError:
            tests.append({"suite": suite, "test": os.path.basename(path), "outcome": "unreadable"})
            continue
        for case in root.iter("testcase"):
            outcome, message = "pass", ""
            for tag, name in (("failure", "fail"), ("error", "error"), ("skipped", "skip")):
                found = case.find(tag)
                if found is not None:
                    outcome = name
                    if name != "skip":
                        message = (found.text or found.get("message") or "").strip()
            test = f"{case.get('classname', '')}::{case.get('name', '')}".lstrip(":")
            entry = {"suite": suite, "test": test, "outcome": outcome,
                     "seconds": round(float(case.get("time", 0) or 0), 2)}
            if message:
                entry["message"] = message
            tests.append(entry)
    return tests


def read_rows(outdir: str, pattern: str) -> list[dict]:
    rows = []
    for path in sorted(glob.glob(os.path.join(outdir, pattern))):
        try:
            with open(path) as f:
                text = f.read()
        except OSError:
            continue
        try:
            data = json.loads(text)
        except ValueError:  # one row per line (tests/gpu/run.sh's .jsonl)
            data = []
            for line in text.splitlines():
                try:
                    data.append(json.loads(line))
                except ValueError:
                    continue
        rows.extend(data if isinstance(data, list) else [data])
    return rows


def tail(path: str, lines: int) -> str:
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:]).rstrip()
    except OSError:
        return "(no log)"


def read_failures(outdir: str, parts: list[dict], tests: list[dict]) -> list[dict]:
    """What failed, in the words of the failure: the end of each failed part's log, and
    each failed test's message (cut to its first and last lines)."""
    found = [{"what": f"part {p['part']} ({p['status']}, exit {p['exit_code']})",
              "text": tail(os.path.join(outdir, p["part"] + ".log"), LOG_LINES)}
             for p in parts if p["status"] != "pass"]
    for t in tests:
        if t.get("message"):
            lines = t["message"].splitlines()
            if len(lines) > MESSAGE_LINES:
                lines = lines[:3] + ["..."] + lines[-(MESSAGE_LINES - 4):]
            found.append({"what": f"test {t['test']} ({t['outcome']})", "text": "\n".join(lines)})
    return found


def check_targets(rows: list[dict], targets) -> list[dict]:
    found = []
    for row in rows:
        for applies, ratio, least, what in targets:
            if not applies(row) or ratio not in row.get("ratios", {}):
                continue
            value = row["ratios"][ratio]
            label = f"{row['model']} b{row['batch']}" + (
                f" {row['optimizer']}" if "optimizer" in row else "")
            found.append({"case": label, "what": what, "ratio": ratio, "value": value,
                          "target": least, "met": value >= least})
    return found


def table(rows: list[dict], columns: list[str]) -> list[str]:
    if not rows:
        return ["(none)"]

    def cell(value):
        if isinstance(value, float):
            return f"{value:.4g}"
        return "" if value is None else str(value)

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(r.get(c)) for c in columns) + " |" for r in rows]
    return lines


def variant_lines(rows: list[dict]) -> list[dict]:
    lines = []
    for row in rows:
        for name, entry in row.get("variants", {}).items():
            lines.append({"model": row["model"], "batch": row["batch"],
                          "optimizer": row.get("optimizer"), "variant": name, **entry})
    return lines


def build_report(outdir: str) -> dict:
    inference = read_rows(outdir, "bench_*.json*")
    training = read_rows(outdir, "train_*.json*")
    bert = read_rows(outdir, "bert.json")
    step_gap = read_rows(outdir, "step_gap.json")
    tuning = read_rows(outdir, "tune_check.json")
    parts, tests = read_parts(outdir), read_tests(outdir)
    return {
        "parts": parts,
        "tests": tests,
        "failures": read_failures(outdir, parts, tests),
        "inference": inference,
        "training": training,
        "bert": bert,
        "step_gap": step_gap,
        "tuning": tuning,
        "targets": check_targets(inference, INFERENCE_TARGETS)
        + check_targets(training, TRAINING_TARGETS),
    }


def render(report: dict) -> str:
    tests = report["tests"]
    counts = {o: sum(t["outcome"] == o for t in tests) for o in ("pass", "fail", "error", "skip")}
    out = ["# nimble GPU check", ""]
    devices = {r["device"] for r in report["inference"] + report["training"] + report["bert"]
               + report["tuning"]}
    out += [f"Device: {', '.join(sorted(devices)) or 'unknown'}", "", "## Parts", ""]
    out += table(report["parts"], ["part", "status", "exit_code", "seconds", "command"])
    out += ["", f"## Tests: {counts['pass']} passed, {counts['fail']} failed, "
            f"{counts['error']} errors, {counts['skip']} skipped", ""]
    out += table(tests, ["suite", "test", "outcome", "seconds"])
    out += ["", f"## Failures: {len(report['failures'])}", ""]
    for failure in report["failures"]:
        out += [f"### {failure['what']}", "", "```", failure["text"], "```", ""]
    out += ["", "## Inference (python -m nimble bench --device cuda)", ""]
    out += table(variant_lines(report["inference"]),
                 ["model", "batch", "variant", "ms", "gpu_ms", "prepare_s", "physical_streams",
                  "syncs", "max_abs_diff"])
    out += ["", "Ratios:", ""]
    out += [f"- {r['model']} b{r['batch']}: " + ", ".join(
        f"{k} {v}" for k, v in r.get("ratios", {}).items() if not k.endswith("_gpu"))
        for r in report["inference"]]
    out += ["", "## Training (python -m nimble bench --device cuda --train)", ""]
    out += table(variant_lines(report["training"]),
                 ["model", "batch", "optimizer", "variant", "ms", "gpu_ms", "prepare_s",
                  "physical_streams", "max_rel_diff", "matches_eager"])
    out += ["", "Eager against itself (the drift a variant is allowed): " + ", ".join(
        f"{r['model']} {r['optimizer']} {r['eager_drift']:.1e}"
        for r in report["training"] if "eager_drift" in r)]
    out += ["", "Ratios:", ""]
    out += [f"- {r['model']} b{r['batch']} {r['optimizer']}: " + ", ".join(
        f"{k} {v}" for k, v in r.get("ratios", {}).items() if not k.endswith("_gpu"))
        for r in report["training"]]
    out += ["", "## Where the training step's time goes (tests/gpu/train_gap.py)", ""]
    out += table([dict(variant=name, model=r["model"], optimizer=r["optimizer"], **v)
                  for r in report["step_gap"] for name, v in r.get("variants", {}).items()],
                 ["model", "optimizer", "variant", "host_us", "gpu_us", "wall_us", "kernels",
                  "busy_us"])
    out += [f"- {r['model']} {r['optimizer']}: kernel counts that differ (hand graph, nimble): "
            + (", ".join(f"{k} {v}" for k, v in r.get("kernel_count_differences", {}).items())
               or "none") for r in report["step_gap"]]
    out += ["", "## torch.compile(backend=\"nimble\") on BERT with a mask", ""]
    out += table(report["bert"], ["model", "batch", "sequence", "compile_s", "eager_ms",
                                  "nimble_ms", "nimble_vs_eager", "max_abs_diff",
                                  "matches_eager"])
    out += ["", "## Tuned CUDA kernels (tests/gpu/tune_check.py)", ""]
    out += table(report["tuning"], ["model", "tasks", "bound", "bound_families", "untuned_ms",
                                    "tuned_ms", "speedup", "depthwise_speedup_vs_cudnn_median",
                                    "max_relative_error", "correct"])
    met = sum(t["met"] for t in report["targets"])
    out += ["", f"## Targets: {met} of {len(report['targets'])} met", ""]
    out += table([dict(t, met="yes" if t["met"] else "NO") for t in report["targets"]],
                 ["case", "what", "ratio", "value", "target", "met"])
    return "\n".join(out) + "\n"


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not os.path.isdir(argv[0]):
        print("usage: python tests/gpu/report.py OUTDIR (a folder tests/gpu/run.sh wrote)",
              file=sys.stderr)
        return 2
    outdir = argv[0]
    report = build_report(outdir)
    text = render(report)
    with open(os.path.join(outdir, "report.md"), "w") as f:
        f.write(text)
    with open(os.path.join(outdir, "report.json"), "w") as f:
        json.dump(report, f, indent=2)
    print(text, end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

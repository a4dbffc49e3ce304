"""Tuning-database lines written by hand, for the tests that bind or refuse a record: one
record per line as `TuningDatabase.import_jsonl` reads them, on this machine's device key."""

from __future__ import annotations

import json

import nimble


def record_line(signature, config, seconds, run="run"):
    return json.dumps({"run": run, "signature": signature,
                       "device": nimble._C.kernels.device_key(), "config": config,
                       "seconds": seconds, "error": "none", "message": "", "cost_seconds": 0.0,
                       "cut_short": False, "recorded_at": 0.0})


def database(tmp_path, lines):
    """A tuning database in `tmp_path` holding `lines`."""
    path = tmp_path / "records.jsonl"
    path.write_text("\n".join(lines) + "\n")
    db = str(tmp_path / "tune.db")
    assert nimble._C.tuning.TuningDatabase(db).import_jsonl(str(path)) == len(lines)
    return db

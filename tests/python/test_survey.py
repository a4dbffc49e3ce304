"""Trimmer's model-level survey (nimble/tuning/survey.py): which model is suspended when, and
where its workers go. Scripted tuners report fixed latency curves to a WorkerGroup without
actors (its capacity bookkeeping is what the survey steers; Ray plays no part in it), so
every round is decided the same way on every run."""

from __future__ import annotations

import threading

import pytest

from nimble.tuning import survey
from nimble.tuning.distributed import WorkerGroup

WORKERS = 3
ROUND = 10.0  # seconds of each model's own tuning time


def _group_without_actors(workers: int) -> WorkerGroup:
    """The survey's view of a group (pool, pause, suspend, capacity) over `workers` live
    workers, with nothing measuring."""
    group = WorkerGroup.__new__(WorkerGroup)
    group._lock = threading.Lock()
    group._models = {}
    group._actors = [object()] * workers
    return group


def _scripted(curves: dict[str, list[float]], seen: dict[str, list[int]]):
    """run_model for survey_tune: model `name` reports latency curves[name][i] after i rounds
    of tuning time, asking its capacity before each report, and ends like a tuner whose
    workers were taken away (capacity 0) or whose budget ran out (its curve's end)."""

    def run_model(name, pool, progress):
        for i, ms in enumerate(curves[name]):
            capacity = pool.capacity()
            if capacity == 0:
                return {"stop_reason": "no-workers", "trials": i, "initial_model_ms":
                        curves[name][0], "final_model_ms": curves[name][i - 1],
                        "measure_seconds": ROUND * i}
            seen[name].append(capacity)
            progress({"tuning_seconds": ROUND * i, "model_ms": ms})
        return {"stop_reason": "budget", "trials": len(curves[name]),
                "initial_model_ms": curves[name][0], "final_model_ms": curves[name][-1],
                "measure_seconds": ROUND * len(curves[name])}

    return run_model


def test_the_model_on_a_plateau_is_suspended_and_its_workers_go_to_the_others():
    curves = {
        "improving": [10.0 * 0.8**i for i in range(12)],  # 20% a round, to the end
        # 20% once, then nothing
        "plateau": [10.0, 8.0] + [8.0] * 10,
    }
    seen = {name: [] for name in curves}
    logged = []
    group = _group_without_actors(WORKERS)
    result = survey.survey_tune({name: ({}, []) for name in curves}, group,
                                _scripted(curves, seen), round_seconds=ROUND,
                                log=logged.append)
    plateau, improving = result["models"]["plateau"], result["models"]["improving"]
    assert plateau["stop_reason"] == "suspended"
    # The rate criterion judges from round 3 on (it needs two rounds of history): rounds 3
    # and 4 are poor (a falling rate, no gain), the second in a row suspends.
    assert plateau["suspended_round"] == 4
    assert plateau["final_model_ms"] == 8.0 and plateau["trials"] == 5
    assert improving["stop_reason"] == "budget" and improving["suspended_round"] is None
    assert improving["trials"] == 12
    assert result["rounds"] == 11
    assert logged == ["round 4: suspended plateau (improvement 0.0000%/s, the lowest, on a "
                      "plateau); its workers go to the 1 other model(s)"]
    # Once the plateau model is suspended, the improving one has every worker.
    assert seen["improving"][-1] == WORKERS
    assert seen["improving"][6:] == [WORKERS] * 6
    assert group.capacity("plateau") == 0


def test_models_that_keep_improving_are_never_suspended():
    curves = {"a": [10.0 * 0.8**i for i in range(6)], "b": [5.0 * 0.9**i for i in range(6)]}
    seen = {name: [] for name in curves}
    result = survey.survey_tune({name: ({}, []) for name in curves},
                                _group_without_actors(WORKERS), _scripted(curves, seen),
                                round_seconds=ROUND, log=pytest.fail)
    assert {m["stop_reason"] for m in result["models"].values()} == {"budget"}
    # Two models running: an even split of three workers, the first named gets the odd one.
    assert set(seen["a"]) <= {2, 3} and set(seen["b"]) <= {1, 3}


def test_the_last_model_running_is_suspended_on_its_plateau_too():
    """Trimmer's survey stop at model level: one model alone stops when it stops improving,
    before its own budget."""
    curves = {"alone": [10.0, 5.0, 5.0, 5.0, 5.0, 5.0, 5.0, 5.0]}
    seen = {"alone": []}
    result = survey.survey_tune({"alone": ({}, [])}, _group_without_actors(WORKERS),
                                _scripted(curves, seen), round_seconds=ROUND, log=lambda _: None)
    alone = result["models"]["alone"]
    assert alone["stop_reason"] == "suspended" and alone["suspended_round"] == 4
    assert seen["alone"] == [WORKERS] * 5


def test_a_failing_model_is_reported_after_the_others_finish():
    def run_model(name, pool, progress):
        if name == "broken":
            raise ValueError("measurer exploded")
        return _scripted({"fine": [2.0, 1.0]}, {"fine": []})(name, pool, progress)

    with pytest.raises(RuntimeError, match="tuning broken failed") as raised:
        survey.survey_tune({"fine": ({}, []), "broken": ({}, [])}, _group_without_actors(2),
                           run_model, round_seconds=ROUND, log=lambda _: None)
    assert isinstance(raised.value.__cause__, ValueError)

"""Tuned picks confirmed in the whole lowered replay (csrc/slot/replay_confirmation.h): each pick
that differs from the rule's is timed by paired whole runs with and without it, kept only where
it wins the sign test, and `prepare(tuned=db)` binds the kept ones without timing them op by op
again. The picks here are forced slower or faster by a handicap added to their runs' times, so
the verdicts do not depend on the machine's timing."""

import random

import pytest
import torch

import nimble
import nimble._C  # noqa: F401  (compare_pairs before any Nimble is built)
from nimble.testing import assert_matches_eager
from nimble.tuning.budget_shares import MAX_REPLAY_SHARE, MIN_REPLAY_SHARE, replay_share
from tuning_records import database, record_line

CONFIRMED = "confirmed in context"


def compare(a, b, **kw):
    return nimble._C.kernels.compare_pairs(a, b, **kw)


def test_the_sign_test_over_paired_runs():
    rng = random.Random(0)
    base = [1e-3 * (1 + rng.random()) for _ in range(100)]  # a noisy machine: 1-2 ms a run
    faster = compare(base, [t * 0.97 for t in base])
    assert faster["b_wins"] and not faster["b_loses"]
    assert faster["faster"] == 100 and faster["median_ratio"] == pytest.approx(0.97)
    slower = compare(base, [t * 1.03 for t in base])
    assert slower["b_loses"] and not slower["b_wins"]
    # The same times in another order: as many pairs faster as slower, neither wins.
    same = compare(base, base[::-1])
    assert same["faster"] == same["slower"] == 50
    assert not same["b_wins"] and not same["b_loses"]
    # 58 of 100 pairs faster is not enough at 5% one-sided (needs more than 58.2); 60 is.
    for faster_pairs, wins in ((58, False), (60, True)):
        b = [t * (0.99 if i < faster_pairs else 1.01) for i, t in enumerate(base)]
        assert compare(base, b)["b_wins"] == wins, faster_pairs
    # Faster in every pair by less than min_gain: not a win.
    assert not compare(base, [t * 0.99 for t in base], min_gain=0.02)["b_wins"]
    # Ties count for neither side.
    assert compare(base, base)["faster"] == 0 and not compare(base, base)["b_wins"]


@pytest.fixture(scope="module")
def model_and_input():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(64, 64, 3, padding=1), torch.nn.ReLU(),
                                torch.nn.Conv2d(64, 64, 3, padding=1)).eval()
    return model, torch.randn(1, 64, 32, 32)


def _tasks(fast):
    program = fast._program
    with program.snapshot():
        return nimble._C.kernels.ContextRecorder(fast.replay, program.example_inputs).tasks()


def _key(signature):
    return signature[len("lowered "):].split(" epilogue=")[0]


def _picked(tmp_path, fast):
    """A database whose re-timed pick for the model's one shape is a configuration other than
    the rule's (as context_confirmation.h writes it: the rule's and the winner's records)."""
    tasks = _tasks(fast)
    rule = tasks[0]["start"]
    other = next(c for c in tasks[0]["configs"] if c != rule and c[1] == rule[1])
    lines = []
    for task in tasks:
        assert task["start"] == rule
        lines += [record_line(task["signature"], rule, [1e-3], run=CONFIRMED),
                  record_line(task["signature"], other, [0.5e-3], run=CONFIRMED)]
    db = database(tmp_path, lines)
    key = _key(tasks[0]["signature"])
    choice = nimble._C.kernels.lowering_choices(db)[key]
    assert choice["in_replay"] is None and choice["ms"] == pytest.approx(0.5)
    return db, key, choice


def _confirm(fast, db, **kw):
    program = fast._program
    with program.snapshot():
        return nimble._C.kernels.confirm_in_replay(fast.replay, program.example_inputs, db, 1e9,
                                                   pairs=40, min_pairs=10, **kw)


def test_a_pick_slower_in_the_whole_replay_is_dropped_and_not_bound(model_and_input, tmp_path):
    model, x = model_and_input
    fast = nimble.Nimble(model).prepare(x)
    before = [op.get("tuning") for op in fast.replay.ops()]
    db, key, choice = _picked(tmp_path, fast)

    # Faster op by op (0.5 against 1 ms re-timed), a second slower a run in the whole replay.
    seen = []
    done = _confirm(fast, db, handicap_seconds={key: 1.0}, each=seen.append)
    [pick] = done["picks"]
    assert seen == [pick]  # `each` gets every pick as it is judged
    assert pick["key"] == key and pick["spec"] == choice["spec"] and pick["ops"] == 2
    assert pick["tried"] and not pick["kept"]
    assert pick["comparison"]["b_loses"] and pick["comparison"]["faster"] == 0
    assert not done["combination_kept"]
    # The replay runs the rule's kernels again, and stays right.
    assert [op.get("tuning") for op in fast.replay.ops()] == before
    with torch.no_grad():
        assert_matches_eager(fast(x), model(x))

    # The verdict is in the database, and prepare does not bind the pick (nor time it).
    assert nimble._C.kernels.lowering_choices(db)[key]["in_replay"] is False
    tuned = nimble.Nimble(model).prepare(x, tuned=db)
    assert [op.get("tuning") for op in tuned.replay.ops()] == before
    rows = [r for r in tuned.tuned_report() if r["family"] == "prepacked"]
    assert len(rows) == 2 and not any(r["bound"] for r in rows)
    assert all("did not run the whole replay faster" in r["reason"] for r in rows), rows
    assert all(r["aten_ms"] == 0 for r in rows)  # not timed op by op at prepare


def test_a_pick_faster_in_the_whole_replay_is_kept_and_bound(model_and_input, tmp_path):
    model, x = model_and_input
    fast = nimble.Nimble(model).prepare(x)
    before = [op.get("tuning") for op in fast.replay.ops()]
    db, key, choice = _picked(tmp_path, fast)

    done = _confirm(fast, db, handicap_seconds={key: -1.0})
    [pick] = done["picks"]
    assert pick["kept"] and pick["comparison"]["b_wins"]
    assert done["combination_kept"] and done["combination"]["faster"] == done["combination"]["pairs"]
    assert [op.get("tuning") for op in fast.replay.ops()] == before
    assert nimble._C.kernels.lowering_choices(db)[key]["in_replay"] is True

    # prepare binds it without timing it op by op; its last paired check of the whole replay
    # could only drop it where it runs significantly slower (then it says so).
    tuned = nimble.Nimble(model).prepare(x, tuned=db)
    rows = [r for r in tuned.tuned_report() if r["family"] == "prepacked"]
    assert len(rows) == 2 and all(r["aten_ms"] == 0 for r in rows)
    for r in rows:
        assert r["bound"] or "significantly slower" in r["reason"], r
    ops = [op for op in tuned.replay.ops() if op.get("shape_key") == key]
    assert len(ops) == 2
    assert all(op["tuning"] == (choice["spec"] if rows[0]["bound"] else before[i])
               for i, op in zip([i for i, o in enumerate(tuned.replay.ops())
                                 if o.get("shape_key") == key], ops))
    with torch.no_grad():
        assert_matches_eager(tuned(x), model(x))


def test_a_later_pick_is_not_judged_by_an_earlier_verdict(model_and_input, tmp_path):
    """A verdict holds for the configuration it judged: a database whose pick changed since
    (another tuning run) has no verdict on the new pick, and prepare times it as before."""
    model, x = model_and_input
    fast = nimble.Nimble(model).prepare(x)
    db, key, choice = _picked(tmp_path, fast)
    _confirm(fast, db, handicap_seconds={key: 1.0})
    tasks = _tasks(fast)
    rule = tasks[0]["start"]
    old = next(c for c in tasks[0]["configs"] if c != rule and c[1] == rule[1])
    newer = next(c for c in tasks[0]["configs"] if c not in (rule, old))
    nimble._C.tuning.TuningDatabase(db)  # still readable
    path = tmp_path / "more.jsonl"
    path.write_text("\n".join(record_line(t["signature"], newer, [0.2e-3], run=CONFIRMED)
                              for t in tasks) + "\n")
    nimble._C.tuning.TuningDatabase(db).import_jsonl(str(path))
    now = nimble._C.kernels.lowering_choices(db)[key]
    assert now["spec"] != choice["spec"] and now["in_replay"] is None


def test_the_whole_replay_share_of_a_tuning_budget():
    """100 pairs of runs for every task and two more, between the bounds."""
    assert replay_share(0.001, 30, 120) == pytest.approx(2 * 100 * 0.001 * 32 / 120)  # 5.3%
    assert replay_share(0.0001, 30, 120) == MIN_REPLAY_SHARE
    assert replay_share(0.050, 30, 120) == MAX_REPLAY_SHARE
    assert replay_share(0.001, 30, float("inf")) == MIN_REPLAY_SHARE

"""How an in-context tuning budget is shared out (nimble/tuning/tune.py spends it): the search
gets what re-timing each task's pick against the rule's (confirm) and confirming the picks in
the whole replay (confirm_whole) leave, and a user whose budget cannot re-time every task is
told so."""

from __future__ import annotations

import math

# The share of an in-context tuning budget kept for re-timing each task's best against the
# rule's (confirm): the search's fastest is the luckiest of hundreds of short timings. At
# least CONFIRM_SHARE; more, up to MAX_CONFIRM_SHARE, where re-timing every task takes more
# (confirm_share): with 15% of 120 s, 3 of mobilenet_v2's 31 tasks at 224x224 were re-timed
# and the others bound on the search's records ran the replay 0.93x (docs/tuning.md).
CONFIRM_SHARE = 0.15
MAX_CONFIRM_SHARE = 0.5
# Replays one task's re-timing takes (context_confirmation.h: 4 configurations x 10 rounds x
# a warm-up and 2 timed replays, with their checks): 96-333 in tune --model runs, most near 250.
CONFIRM_REPLAYS_PER_TASK = 250
# The share kept for confirming the re-timed picks in the whole replay (confirm_in_replay): each
# pick that differs from the rule by REPLAY_PAIRS paired runs with and without it, then the kept
# ones together; sized as for every task's pick, between the two bounds.
REPLAY_PAIRS = 100
MIN_REPLAY_SHARE = 0.05
MAX_REPLAY_SHARE = 0.25


def confirm_share(replay_seconds: float, tasks: int, budget_seconds: float) -> float:
    """The share of an in-context budget of `budget_seconds` kept for re-timing `tasks` tasks
    of a replay that takes `replay_seconds` a run: what re-timing all of them takes, at least
    CONFIRM_SHARE and at most MAX_CONFIRM_SHARE (the search needs the rest)."""
    if not 0 < budget_seconds < math.inf:
        return CONFIRM_SHARE
    need = CONFIRM_REPLAYS_PER_TASK * replay_seconds * tasks / budget_seconds
    return min(MAX_CONFIRM_SHARE, max(CONFIRM_SHARE, need))


def replay_share(replay_seconds: float, tasks: int, budget_seconds: float) -> float:
    """The share of an in-context budget of `budget_seconds` kept for confirming the picks of
    `tasks` tasks in the whole replay, which takes `replay_seconds` a run: REPLAY_PAIRS pairs of
    runs for each, and the combination's twice that, between MIN_REPLAY_SHARE and
    MAX_REPLAY_SHARE."""
    if not 0 < budget_seconds < math.inf:
        return MIN_REPLAY_SHARE
    need = whole_replay_seconds(replay_seconds, tasks) / budget_seconds
    return min(MAX_REPLAY_SHARE, max(MIN_REPLAY_SHARE, need))


def short_budget_warning(replay_seconds: float, tasks: int, budget_seconds: float) -> str | None:
    """What to tell a user whose in-context budget of `budget_seconds` cannot re-time every one
    of `tasks` tasks of a replay that takes `replay_seconds` a run, even with the largest share
    (MAX_CONFIRM_SHARE), and the budget that can; None where it can. A long replay: vit_b_16 at
    224x224 takes 0.16-0.5 s a run, 40-125 s a task's re-timing, so 120 s re-time at most one of
    its 6 tasks (docs/tuning.md)."""
    if not 0 < budget_seconds < math.inf or tasks <= 0:
        return None
    need = CONFIRM_REPLAYS_PER_TASK * replay_seconds * tasks
    if need <= MAX_CONFIRM_SHARE * budget_seconds:
        return None
    each = CONFIRM_REPLAYS_PER_TASK * replay_seconds
    fits = int(MAX_CONFIRM_SHARE * budget_seconds // each)
    return (f"a replay takes {1e3 * replay_seconds:.0f} ms: re-timing a task's pick against the "
            f"rule's takes about {each:.0f} s ({CONFIRM_REPLAYS_PER_TASK} replays), so "
            f"{budget_seconds:.0f} s re-time at most {fits} of the {tasks} tasks (the others' "
            f"picks rest on the search's luckiest timings); a budget of "
            f"{math.ceil(need / MAX_CONFIRM_SHARE)} s re-times them all")


def whole_replay_seconds(replay_seconds: float, tasks: int) -> float:
    """What confirming every task's pick in the whole replay takes: REPLAY_PAIRS pairs of runs
    for each, and the combination's twice that."""
    return 2 * REPLAY_PAIRS * replay_seconds * (tasks + 2)

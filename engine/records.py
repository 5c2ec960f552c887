"""What goes into the event log, as compact msgpack-able lists.

Every record is a list whose first item names its kind. Score events are
logged as received together with the admission verdict the router decided
in log order (0 = go on to apply, else the outcome code), so every
partition can replay its share of the log on its own and reach the same
outcomes, whatever the current dedup settings. Nothing here reads a clock.

* ``["B", board_id, policy, shards, max_plausible_time_ms, review_above]`` board created
* ``["T", board_id, state]`` season state change (its offset is the freeze position)
* ``["S", board_id, event_id, player_id, value, achieved_at, submitted_at, verdict]`` score event
* ``["I", board_id, event_id, correction_id, reason, moderator]`` invalidation
* ``["D", board_id, event_id, decision, reason, moderator, player_id]`` quarantine decision
"""

from __future__ import annotations

from engine.model import BoardSpec, Outcome, Policy, ScoreEvent

BOARD, STATE, SCORE, INVALIDATE, DECIDE = "B", "T", "S", "I", "D"

OUTCOMES: list[Outcome] = list(Outcome)
CODE = {o: i + 1 for i, o in enumerate(OUTCOMES)}  # 0 means "apply"
APPLY = 0


def outcome_of(code: int) -> Outcome:
    return OUTCOMES[code - 1]


def board_record(spec: BoardSpec) -> list:
    return [BOARD, spec.board_id, spec.policy.value, spec.shards, spec.max_plausible_time_ms, spec.review_above]


def spec_of(rec: list) -> BoardSpec:
    return BoardSpec(rec[1], Policy(rec[2]), rec[3], rec[4], rec[5])


def score_record(ev: ScoreEvent, verdict: Outcome | None) -> list:
    return [SCORE, ev.board_id, ev.event_id, ev.player_id, ev.value, ev.achieved_at, ev.submitted_at,
            APPLY if verdict is None else CODE[verdict]]


def event_of(rec: list) -> ScoreEvent:
    return ScoreEvent(rec[1], rec[2], rec[3], rec[4], rec[5], rec[6])


def verdict_of(rec: list) -> Outcome | None:
    return None if rec[7] == APPLY else outcome_of(rec[7])

"""The comparator: one exact total-order key per policy (docs/api.md §6).

(``latest`` ranks as ``best_score``; which event is its row is
:func:`latest_order`, docs/api.md §14.)

A rank key is a tuple ``(primary, tie, player_id)`` of two ints and a str,
ordered ascending: the first key is rank 1. Descending boards negate the
primary. Python compares ints exactly at any size and strs by code point,
which is the API's order for player ids, so no float ever decides a rank
(the design documents show ``score * 10**13 - ms`` collapsing past 2**53).

>>> best_score_key(9500, 1000, "p-ben") < best_score_key(9500, 2000, "p-chloe")
True
>>> fastest_time_key(52340, 2, "p-fin") < fastest_time_key(52340, 7, "p-gus")
True
"""

from __future__ import annotations

from typing import Callable

from engine.core.model import Outcome, Policy

RankKey = tuple  # (int, int, str)


def best_score_key(value: int, achieved_at: int, player_id: str) -> RankKey:
    """Higher value first; then earlier achieved_at; then lower player id."""
    return (-value, achieved_at, player_id)


def cumulative_key(total: int, reached_at: int, player_id: str) -> RankKey:
    """Higher total first; then earlier time the total was reached (the
    latest achieved_at among the applied events); then lower player id."""
    return (-total, reached_at, player_id)


def fastest_time_key(time_ms: int, submitted_at: int, player_id: str) -> RankKey:
    """Lower time first; then earlier submitted_at; then lower player id."""
    return (time_ms, submitted_at, player_id)


def latest_key(value: int, achieved_at: int, player_id: str) -> RankKey:
    """A latest board ranks its rows as best_score does: higher value first;
    then earlier achieved_at (of the row's event); then lower player id."""
    return (-value, achieved_at, player_id)


def latest_order(achieved_at: int, submitted_at: int, event_id: str) -> tuple[int, int, str]:
    """Which of a player's events is the row on a latest board (docs/api.md
    §14): the greatest of these wins (the latest achieved_at, then the later
    submitted_at, then the greater event id by code point). Event ids of a
    board are distinct, so it is a total order and arrival order never
    decides. The partition's kernel compares the ids' UTF-8 bytes, which
    order as their code points.

    >>> latest_order(5, 5, "e-b") > latest_order(5, 5, "e-a") > latest_order(5, 4, "e-z")
    True
    """
    return (achieved_at, submitted_at, event_id)


def key_for(policy: Policy) -> Callable[[int, int, int, str], RankKey]:
    """``f(value, achieved_at, submitted_at, player_id) -> RankKey`` for a policy."""
    return _KEY_FNS[policy]


_KEY_FNS = {
    Policy.BEST_SCORE: lambda v, a, s, p: (-v, a, p),
    Policy.CUMULATIVE: lambda v, a, s, p: (-v, a, p),
    Policy.FASTEST_TIME: lambda v, a, s, p: (v, s, p),
    Policy.LATEST: lambda v, a, s, p: (-v, a, p),
}


# Outcome names per policy for "the event became the row" / "it did not".
IMPROVED = {
    Policy.BEST_SCORE: Outcome.APPLIED_NEW_BEST,
    Policy.FASTEST_TIME: Outcome.APPLIED_NEW_BEST_TIME,
    Policy.CUMULATIVE: Outcome.APPLIED,
    Policy.LATEST: Outcome.APPLIED_LATEST,
}
FIRST = {
    Policy.BEST_SCORE: Outcome.APPLIED_FIRST_SCORE,
    Policy.FASTEST_TIME: Outcome.APPLIED_NEW_BEST_TIME,
    Policy.CUMULATIVE: Outcome.APPLIED,
    Policy.LATEST: Outcome.APPLIED_LATEST,
}
NOT_IMPROVED = {
    Policy.BEST_SCORE: Outcome.REJECTED_NOT_AN_IMPROVEMENT,
    Policy.FASTEST_TIME: Outcome.REJECTED_NOT_FASTER,
    Policy.LATEST: Outcome.REJECTED_NOT_LATEST,
}

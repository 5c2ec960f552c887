"""engine.core.season: the lifecycle table, the scheduled close (``due``) and the
next season's spec, tested directly (no clock, no router)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.core import season
from engine.core.errors import InvalidTransition, ValidationFailed
from engine.core.model import DEFAULT_FINALIZE_AFTER_S, MAX_FINALIZE_AFTER_S, BoardSpec, BoardState, Policy
from engine.core.season import ORDER, Due, due, finalize_at, next_season

OPEN, FROZEN, FINALIZED, ARCHIVED = ORDER


def test_order_is_the_transition_table():
    for a, b in zip(ORDER, ORDER[1:]):
        assert season.TRANSITIONS[a] == {b}
    assert season.TRANSITIONS[ARCHIVED] == frozenset()


def test_due_at_the_edges():
    # FROZEN exactly at closes_at, not a millisecond before
    assert due(OPEN, 10_000, 5, 9_999) == Due((), 10_000)
    assert due(OPEN, 10_000, 5, 10_000) == Due((FROZEN,), 15_000)
    # FINALIZED exactly finalize_after_s later
    assert due(FROZEN, 10_000, 5, 14_999) == Due((), 15_000)
    assert due(FROZEN, 10_000, 5, 15_000) == Due((FINALIZED,), None)
    # both overdue (a server down through both): both, in order
    assert due(OPEN, 10_000, 5, 99_000) == Due((FROZEN, FINALIZED), None)
    # finalize_after_s = 0: both at closes_at
    assert due(OPEN, 10_000, 0, 10_000) == Due((FROZEN, FINALIZED), None)
    # nothing scheduled, or nothing left
    assert due(OPEN, None, 5, 99_000) == Due((), None)
    assert due(FINALIZED, 10_000, 5, 99_000) == Due((), None)
    assert due(ARCHIVED, 10_000, 5, 0) == Due((), None)


def test_an_admin_who_moved_first_leaves_the_schedule_nothing_to_do_for_that_step():
    # frozen by hand before closes_at: the schedule only finalizes, at its own time
    assert due(FROZEN, 10_000, 5, 1_000) == Due((), 15_000)
    assert due(FROZEN, 10_000, 5, 20_000) == Due((FINALIZED,), None)


def _apply(state: BoardState, d: Due) -> BoardState:
    for target in d.transitions:
        state = season.next_state(state, target)  # raises on a skipped or backward step
    return state


@given(st.sampled_from(ORDER), st.integers(-10**6, 10**6), st.integers(0, 5_000), st.integers(-2 * 10**6, 10**7),
       st.integers(0, 10**7))
def test_due_properties(state, closes_at, after_s, now, later):
    d = due(state, closes_at, after_s, now)
    # forward only, one table step at a time, never beyond FINALIZED
    reached = _apply(state, d)
    assert ORDER.index(reached) >= ORDER.index(state)
    assert all(t in (FROZEN, FINALIZED) for t in d.transitions)
    # never early: FROZEN not before closes_at, FINALIZED not before closes_at + finalize_after_s
    if FROZEN in d.transitions:
        assert now >= closes_at
    if FINALIZED in d.transitions:
        assert now >= finalize_at(closes_at, after_s)
    # never late: whatever is due is made (the brute-force oracle)
    want = OPEN
    if now >= closes_at:
        want = FROZEN
    if now >= closes_at + after_s * 1000:
        want = FINALIZED
    assert ORDER.index(reached) == max(ORDER.index(state), ORDER.index(want))
    # idempotent: once made, nothing more is due at the same instant
    assert due(reached, closes_at, after_s, now).transitions == ()
    # the wake-up is the instant the next transition falls due, in the future
    if d.wake_at is not None:
        assert d.wake_at > now
        assert due(reached, closes_at, after_s, d.wake_at - 1).transitions == ()
        assert due(reached, closes_at, after_s, d.wake_at).transitions != ()
    else:
        assert due(reached, closes_at, after_s, now + later).transitions == ()
    # a later instant never asks for less: made then, made now or still owed
    d2 = due(state, closes_at, after_s, now + later)
    assert d.transitions == d2.transitions[:len(d.transitions)]


def test_next_state_refuses_what_the_table_does_not_hold():
    with pytest.raises(InvalidTransition):
        season.next_state(OPEN, FINALIZED)
    with pytest.raises(InvalidTransition):
        season.next_state(FROZEN, OPEN)


def test_check_schedule():
    season.check_schedule(None, 0)
    season.check_schedule(1_793_527_500_000, MAX_FINALIZE_AFTER_S)
    for closes_at, after, field in [(1.5, 0, "closes_at"), (True, 0, "closes_at"), ("2026-01-01", 0, "closes_at"),
                                    (10**16, 0, "closes_at"), (None, -1, "finalize_after_s"),
                                    (None, 1.0, "finalize_after_s"), (None, MAX_FINALIZE_AFTER_S + 1, "finalize_after_s"),
                                    (None, False, "finalize_after_s")]:
        with pytest.raises(ValidationFailed) as err:
            season.check_schedule(closes_at, after)
        assert err.value.field == field


SPEC = BoardSpec("arena-clash:solo:S7:global", Policy.FASTEST_TIME, shards=3, max_plausible_time_ms=60_000,
                 review_above=900, closes_at=1_000, finalize_after_s=120)


def test_next_season_copies_the_settings_and_takes_the_new_schedule():
    spec = next_season(SPEC, "S8", 5_000)
    assert spec == BoardSpec("arena-clash:solo:S8:global", Policy.FASTEST_TIME, shards=3,
                             max_plausible_time_ms=60_000, review_above=900, closes_at=5_000, finalize_after_s=120)
    assert next_season(SPEC, "S8", None, 0) == BoardSpec(
        "arena-clash:solo:S8:global", Policy.FASTEST_TIME, 3, 60_000, 900, None, 0)
    plain = BoardSpec("g:m:s:x", Policy.BEST_SCORE)
    assert next_season(plain, "s2", None).finalize_after_s == DEFAULT_FINALIZE_AFTER_S


@pytest.mark.parametrize("bad", ["", "-S8", "S8:x", "S 8", "é", "x" * 65, "S8\n", 8, None])
def test_next_season_refuses_a_season_that_is_not_an_id_part(bad):
    with pytest.raises(ValidationFailed) as err:
        next_season(SPEC, bad, None)
    assert err.value.field == "season"


def test_next_season_of_a_board_id_without_four_parts():
    with pytest.raises(ValidationFailed) as err:
        next_season(BoardSpec("g:best:s1", Policy.BEST_SCORE), "s2", None)
    assert err.value.field == "board_id"


def test_the_next_season_of_a_series_is_a_series_with_room_for_its_dates():
    from engine.core.windows import Recurrence

    series = BoardSpec("g:m:daily:x", Policy.BEST_SCORE, recurrence=Recurrence("day", "Europe/Berlin", 240, 7))
    assert next_season(series, "d" * 55, None).recurrence == series.recurrence
    with pytest.raises(ValidationFailed) as err:
        next_season(series, "d" * 56, None)
    assert err.value.field == "season"
    assert next_season(BoardSpec("g:m:s:x", Policy.BEST_SCORE), "d" * 64, None).recurrence is None

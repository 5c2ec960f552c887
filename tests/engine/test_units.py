"""Unit tests of the pure core's small modules and edge cases."""

from __future__ import annotations

import pytest

from engine.core.board import Board
from engine.core.dedup import DedupWindow, Seen, fingerprint
from engine.core.errors import (
    AlreadyDecided, EventNotFound, InvalidTransition, PlayerNotFound, PlayerNotRanked, ValidationFailed, ViewExpired,
)
from engine.core.model import (
    INT64_MAX,
    INT64_MIN,
    BoardSpec,
    BoardState,
    Outcome,
    Policy,
    RowStatus,
    ScoreEvent,
)
from engine.core.policy import best_score_key, cumulative_key, fastest_time_key
from engine.core.season import TRANSITIONS, accepts_scores, next_state
from engine.core.timefmt import format_timestamp, parse_timestamp

B = "g:m:s:u"


def ev(eid, pid, value, at=0, sub=None):
    return ScoreEvent(B, eid, pid, value, at, at if sub is None else sub)


def board(policy=Policy.BEST_SCORE, **kw) -> Board:
    return Board(BoardSpec(B, policy, **kw))


# ------------------------------------------------------------------ policy


def test_keys_are_exact_at_int64_bounds_where_floats_collapse():
    big = 2**53
    assert best_score_key(big + 1, 0, "a") < best_score_key(big, 0, "a")
    assert float(big + 1) == float(big)  # what a float encoding would lose
    assert best_score_key(INT64_MAX, 5, "a") < best_score_key(INT64_MAX - 1, 0, "a")
    assert best_score_key(INT64_MIN + 1, 0, "z") < best_score_key(INT64_MIN, 0, "a")
    assert fastest_time_key(1, 9, "z") < fastest_time_key(2, 0, "a")
    assert cumulative_key(-5, 0, "a") > cumulative_key(-4, 99, "z")


def test_player_id_tie_break_is_by_code_point_like_utf8_bytes():
    ids = ["b", "a", "é", "Z", "𝔘", "ｚ", "a\u0301"]
    by_key = sorted(ids, key=lambda p: best_score_key(1, 1, p))
    assert by_key == sorted(ids, key=lambda p: p.encode("utf-8"))


# ------------------------------------------------------------------- dedup


def test_dedup_window_detects_duplicate_and_conflict_and_evicts_oldest():
    w = DedupWindow(2)
    fp = fingerprint("p", 1, 2, 2)
    assert w.check("e1", fp) is Seen.NEW
    w.remember("e1", fp)
    assert w.check("e1", fp) is Seen.DUPLICATE
    assert w.check("e1", fingerprint("p", 2, 2, 2)) is Seen.CONFLICT
    w.remember("e2", fp)
    w.remember("e3", fp)
    assert "e1" not in w and len(w) == 2
    w._check()
    assert DedupWindow.from_state(2, w.to_state()).to_state() == w.to_state()


def test_fingerprint_is_stable_and_content_sensitive():
    assert fingerprint("p", 1, 2, 3) == fingerprint("p", 1, 2, 3)
    assert fingerprint("p", 1, 2, 3) != fingerprint("p", 1, 3, 2)
    # Pinned: snapshots store fingerprints, so they must not change across versions or processes.
    assert fingerprint("p", 1, 2, 3) == 0xF4DCA79D0276F1CA  # FNV-1a+fmix64 of the id bytes, then the three int64s mixed in
    assert fingerprint("p", -1, 2, 3) != fingerprint("p", 1, 2, 3) != fingerprint("p\u00e9", 1, 2, 3)


def test_ids_beyond_the_window_fall_back_on_history_and_guards():
    b = Board(BoardSpec(B, Policy.CUMULATIVE), dedup_retention=1)
    assert b.apply(ev("e1", "p", 10)).outcome is Outcome.APPLIED
    assert b.apply(ev("e2", "p", 5)).outcome is Outcome.APPLIED
    # e1 left the window; the partition still knows it: no double count.
    assert b.apply(ev("e1", "p", 10)).outcome is Outcome.DUPLICATE_IGNORED
    assert b.apply(ev("e1", "p", 11)).outcome is Outcome.REJECTED_EVENT_ID_CONFLICT
    assert b.player("p").value == 15


# ------------------------------------------------------------------ season


def test_season_table_moves_only_forward():
    assert next_state(BoardState.OPEN, BoardState.FROZEN) is BoardState.FROZEN
    for current, allowed in TRANSITIONS.items():
        for wanted in BoardState:
            if wanted not in allowed:
                with pytest.raises(InvalidTransition):
                    next_state(current, wanted)
    assert accepts_scores(BoardState.OPEN) and not accepts_scores(BoardState.FROZEN)


def test_quarantine_decisions_apply_as_corrections_once():
    b = board()
    b.apply(ev("e1", "p", 10))
    b.set_state(BoardState.FROZEN)
    assert b.apply(ev("late", "q", 99)).outcome is Outcome.HELD_FOR_CORRECTION
    assert b.apply(ev("late", "q", 99)).outcome is Outcome.DUPLICATE_IGNORED
    assert [h.event_id for h in b.quarantine()] == ["late"]
    b.set_state(BoardState.FINALIZED)
    r = b.decide("late", "apply")
    assert r.outcome is Outcome.APPLIED_FIRST_SCORE and b.player("q").rank == 1
    with pytest.raises(AlreadyDecided):
        b.decide("late", "reject")
    with pytest.raises(EventNotFound):
        b.decide("never", "apply")
    assert b.quarantine() == []
    assert [(h.kind, h.outcome) for h in b.history("q")] == [
        ("score", "HELD_FOR_CORRECTION"), ("score", "DUPLICATE_IGNORED"), ("decision", "APPLIED_FIRST_SCORE")]
    b.set_state(BoardState.ARCHIVED)
    with pytest.raises(InvalidTransition):
        b.invalidate("e1")


def test_review_above_holds_instead_of_applying():
    b = board(review_above=1000)
    assert b.apply(ev("big", "p", 1001)).outcome is Outcome.HELD_FOR_REVIEW
    assert b.apply(ev("ok", "p", 1000)).outcome is Outcome.APPLIED_FIRST_SCORE
    assert b.quarantine()[0].reason is Outcome.HELD_FOR_REVIEW
    assert b.version == 1


# ---------------------------------------------------------- partition edges


def test_empty_board_reads():
    b = board()
    assert b.top(0, 10).entries == () and b.info().size == 0
    with pytest.raises(PlayerNotFound):
        b.player("nobody")
    with pytest.raises(PlayerNotFound):
        b.around("nobody", 1)
    assert b.ranked_subset(["a", "b"]).entries == ()
    assert b.changes_since(0).kind == "deltas"


def test_around_radius_zero_and_both_edges():
    b = board()
    b.apply_batch([ev(f"e{i}", f"p{i}", 100 - i) for i in range(5)])
    assert [e.player_id for e in b.around("p2", 0).entries] == ["p2"]
    assert [e.rank for e in b.around("p0", 2).entries] == [1, 2, 3]
    assert [e.rank for e in b.around("p4", 2).entries] == [3, 4, 5]
    assert [e.rank for e in b.around("p2", 100).entries] == [1, 2, 3, 4, 5]


def test_negative_scores_deltas_and_int64_extremes():
    b = board()
    b.apply_batch([ev("a", "lo", INT64_MIN), ev("b", "hi", INT64_MAX), ev("c", "neg", -1)])
    assert [e.player_id for e in b.top(0, 3).entries] == ["hi", "neg", "lo"]
    c = board(Policy.CUMULATIVE)
    c.apply_batch([ev("a", "p", -10), ev("b", "p", 3)])
    assert c.player("p").value == -7
    assert c.apply(ev("c", "p", INT64_MIN)).outcome is Outcome.REJECTED_TOTAL_OUT_OF_RANGE
    assert c.player("p").value == -7


def test_fastest_time_bounds_and_same_time_earlier_submission_wins():
    f = board(Policy.FASTEST_TIME, max_plausible_time_ms=1000)
    assert f.apply(ev("z", "p", 0)).outcome is Outcome.REJECTED_INVALID_TIMING
    assert f.apply(ev("big", "p", 1001)).outcome is Outcome.REJECTED_INVALID_TIMING
    assert f.apply(ev("a", "p", 500, at=10, sub=10)).outcome is Outcome.APPLIED_NEW_BEST_TIME
    assert f.apply(ev("b", "p", 500, at=9, sub=11)).outcome is Outcome.REJECTED_NOT_FASTER
    assert f.apply(ev("c", "p", 500, at=20, sub=9)).outcome is Outcome.APPLIED_NEW_BEST_TIME
    assert f.version == 2


def test_same_score_achieved_earlier_counts_as_better():
    b = board()
    assert b.apply(ev("a", "p", 100, at=50)).outcome is Outcome.APPLIED_FIRST_SCORE
    assert b.apply(ev("b", "p", 100, at=50)).outcome is Outcome.REJECTED_NOT_AN_IMPROVEMENT
    assert b.apply(ev("c", "p", 100, at=40)).outcome is Outcome.APPLIED_NEW_BEST
    assert b.player("p").achieved_at == 40


def test_invalidated_player_is_unranked_then_ranked_again():
    b = board()
    b.apply_batch([ev("a", "p", 100), ev("b", "q", 50)])
    r = b.invalidate("a")
    assert r.status is RowStatus.INVALIDATED and r.value is None
    assert b.player("p").rank is None and b.player("q").rank == 1
    with pytest.raises(PlayerNotRanked):
        b.around("p", 1)
    assert b.apply(ev("c", "p", 10)).outcome is Outcome.APPLIED_NEW_BEST
    assert b.player("p").rank == 2
    with pytest.raises(EventNotFound):
        b.invalidate("never-applied")


def test_pinned_version_on_the_facade_expires_after_a_write():
    b = board()
    b.apply(ev("a", "p", 1))
    v = b.version
    assert b.top(0, 1, at_version=v).version == v
    b.apply(ev("b", "q", 2))
    with pytest.raises(ViewExpired):
        b.top(0, 1, at_version=v)


# ------------------------------------------------------------------ timefmt


@pytest.mark.parametrize("raw,ms", [
    ("1970-01-01T00:00:00Z", 0), ("1970-01-01T00:00:00.5Z", 500), ("1970-01-01T01:00:00+01:00", 0),
    ("1969-12-31T23:59:59.999Z", -1), (1_793_527_500_000, 1_793_527_500_000),
])
def test_parse_timestamp(raw, ms):
    assert parse_timestamp(raw) == ms


@pytest.mark.parametrize("raw", ["2026-11-01T10:00:00", "2026-13-01T10:00:00Z", "yesterday", 1.5, True, None,
                                 "2026-02-30T00:00:00Z", 10**20])
def test_parse_timestamp_rejects(raw):
    with pytest.raises(ValidationFailed):
        parse_timestamp(raw, "events[0].achieved_at")


def test_format_timestamp_round_trips_to_ms():
    for ms in (0, -1, 1, 1_793_527_500_123, 253_402_300_799_999):
        assert parse_timestamp(format_timestamp(ms)) == ms


def test_apply_batch_answers_an_unknown_board_with_the_version_reached_before_it():
    b = Board(BoardSpec(B, Policy.BEST_SCORE))
    res = b.apply_batch([ev("e0", "p", 1)._replace(board_id="other"), ev("e1", "p", 5),
                         ev("e2", "p", 1)._replace(board_id="other")])
    assert [(r.outcome, r.version) for r in res] == [
        (Outcome.REJECTED_UNKNOWN_SEASON, 0), (Outcome.APPLIED_FIRST_SCORE, 1), (Outcome.REJECTED_UNKNOWN_SEASON, 1)]

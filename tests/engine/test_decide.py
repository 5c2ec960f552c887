"""engine.router.decide: a submission judged against the registry plus the cycle's
overlay; pure (the registry never changes while deciding), and what it
decides is what the registry's one fold then applies."""

from __future__ import annotations

import pytest

from engine.core import records as R
from engine.core.columns import ScoreBatch
from engine.router.decide import Overlay, Submission, decide
from engine.core.errors import AlreadyDecided, BoardExists, BoardNotFound, InvalidTransition
from engine.core.model import BoardSpec, BoardState, Invalidation, Outcome, Policy, QuarantineDecision, ScoreEvent
from engine.router.registry import BoardRegistry
from engine.core.windows import Recurrence
from hypothesis import given, settings, strategies as st
from tests.engine.test_series import DAY, instance, ms, ref_window_date, ref_window_end

B = "g:m:s:dec"


def _scores(*events) -> ScoreBatch:
    return ScoreBatch.from_events(list(events))


def _ev(eid: str, player: str = "p", value: int = 1) -> ScoreEvent:
    return ScoreEvent(B, eid, player, value, 1, 1)


def _cycle(registry: BoardRegistry, *subs) -> tuple[list, list]:
    """Decide each submission against one overlay, as a sequencer cycle does;
    (records, per submission the decision or the error)."""
    ov = Overlay(registry)
    records, got = [], []
    for kind, payload in subs:
        try:
            d = decide(ov, kind, payload)
        except Exception as exc:  # noqa: BLE001 - the test looks at which
            got.append(exc)
            continue
        ov.note(d)
        records.extend(zip(d.records, d.memos))
        got.append(d)
    return records, got


def _fold(registry: BoardRegistry, records: list, first: int = 0) -> None:
    for i, (rec, memo) in enumerate(records):
        registry.apply(first + i, rec, memo)


def test_deciding_changes_nothing_and_the_fold_applies_what_was_decided():
    reg = BoardRegistry(2)
    records, got = _cycle(reg, (Submission.BOARD, BoardSpec(B, Policy.BEST_SCORE, shards=2, review_above=100)),
                          (Submission.SCORES, _scores(_ev("e1"), _ev("big", "q", 500), _ev("e1"))),
                          (Submission.SCORES, _scores(_ev("e1"), _ev("e2", "r"))))
    assert reg.boards == {} and reg.log_offset == -1  # nothing yet: the append has not happened
    first, second = got[1], got[2]
    codes = [int(v) for m in first.memos for v in m.verdicts]
    assert sorted(codes) == sorted([R.APPLY, R.CODE[Outcome.HELD_FOR_REVIEW], R.CODE[Outcome.DUPLICATE_IGNORED]])
    # the second batch of the cycle sees e1 as remembered by the first (the overlay)
    by_id = {eid: int(v) for m in second.memos for eid, v in zip(m.cols.event_ids, m.verdicts)}
    assert by_id == {"e1": R.CODE[Outcome.DUPLICATE_IGNORED], "e2": R.APPLY}
    _fold(reg, records)
    ctl = reg.ctl(B)
    assert list(ctl.admission.held) == ["big"] and len(ctl.admission.dedup) == 3
    assert reg.log_offset == len(records) - 1


def test_the_live_fold_with_memos_equals_the_replay_fold_without():
    live, replay = BoardRegistry(3), BoardRegistry(3)
    records, _ = _cycle(live, (Submission.BOARD, BoardSpec(B, Policy.BEST_SCORE, shards=3, review_above=5)),
                        (Submission.SCORES, _scores(*[_ev(f"e{i}", f"p{i % 7}", i) for i in range(40)])))
    _fold(live, records)
    more, _ = _cycle(live, (Submission.DECISION, QuarantineDecision(B, "e6", "apply", "ok", "mod")),
                     (Submission.INVALIDATION, Invalidation(B, "e1", "cheat", "mod")),
                     (Submission.STATE, (B, BoardState.FROZEN)),
                     (Submission.SCORES, _scores(_ev("late"))))
    _fold(live, more, len(records))
    for i, (rec, _memo) in enumerate(records + more):
        replay.apply(i, list(rec))  # as the log hands records back, with no memo
    a, b = live.ctl(B), replay.ctl(B)
    assert a.admission.to_state() == b.admission.to_state()
    frozen_at = [r.kind for r, _ in records + more].index(R.STATE)
    assert (a.corrections, a.admission.freeze_position) == (b.corrections, b.admission.freeze_position) == (1, frozen_at)
    assert "late" in a.admission.held and "e6" in a.admission.decided


def test_a_cycle_sees_its_own_board_state_decision_and_correction():
    reg = BoardRegistry(1)
    spec = BoardSpec(B, Policy.CUMULATIVE, shards=1, review_above=10)
    records, got = _cycle(reg, (Submission.BOARD, spec), (Submission.BOARD, spec),
                          (Submission.SCORES, _scores(_ev("h", "p", 50))))
    assert isinstance(got[1], BoardExists)  # created earlier in the same cycle
    _fold(reg, records)
    records, got = _cycle(reg, (Submission.DECISION, QuarantineDecision(B, "h", "reject", "no", "mod")),
                          (Submission.DECISION, QuarantineDecision(B, "h", "apply", "yes", "mod")),
                          (Submission.INVALIDATION, Invalidation(B, "x", None, "mod")),
                          (Submission.INVALIDATION, Invalidation(B, "y", None, "mod")),
                          (Submission.STATE, (B, BoardState.FROZEN)),
                          (Submission.STATE, (B, BoardState.FROZEN)),
                          (Submission.SCORES, _scores(_ev("after"))),
                          (Submission.STATE, (B, BoardState.FINALIZED)),
                          (Submission.STATE, (B, BoardState.ARCHIVED)),
                          (Submission.INVALIDATION, Invalidation(B, "z", None, "mod")))
    assert isinstance(got[1], AlreadyDecided)
    assert [r.correction_id for r, _ in records if r.kind == R.INVALIDATE] == [R.correction_id("x", 1),
                                                                              R.correction_id("y", 2)]
    assert isinstance(got[5], InvalidTransition)  # FROZEN -> FROZEN, judged against the cycle's own freeze
    assert [int(v) for v in got[6].memos[0].verdicts] == [R.CODE[Outcome.HELD_FOR_CORRECTION]]
    assert isinstance(got[9], InvalidTransition)  # ARCHIVED earlier in the cycle: no more corrections
    assert reg.ctl(B).admission.state is BoardState.OPEN  # still nothing applied


def test_unknown_boards():
    reg = BoardRegistry(1)
    records, got = _cycle(reg, (Submission.SCORES, _scores(_ev("e1"))),
                          (Submission.STATE, (B, BoardState.FROZEN)))
    assert records == [] and got[0].places == [None]
    assert isinstance(got[1], BoardNotFound)
    with pytest.raises(ValueError):
        decide(Overlay(reg), "nonsense", None)  # type: ignore[arg-type]


# ------------------------------------------------------------------ series routing (docs/api.md §15)


ZONES = ["Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "Asia/Kathmandu", "Pacific/Apia", "UTC"]


@settings(max_examples=60, deadline=None)
@given(every=st.sampled_from(["day", "week", "month"]), zone=st.sampled_from(ZONES),
       at=st.integers(0, 1439), now=st.integers(ms(2011, 1, 1), ms(2030, 1, 1)),
       back=st.lists(st.integers(0, 120 * DAY), min_size=1, max_size=40), shards=st.sampled_from([1, 3]))
def test_decide_routes_every_event_to_the_reference_window(every, zone, at, now, back, shards):
    """decide's routing (one windows_of per batch) equals the walk-back reference event by event; instances
    it creates come first, each once, each frozen exactly when its window has ended; nothing changes."""
    rec = Recurrence(every, zone, at, 1000)
    series = "g:m:s:x"
    reg = BoardRegistry(3)
    reg.apply(0, R.board_record(BoardSpec(series, Policy.BEST_SCORE, shards=shards, recurrence=rec)))
    times = [now - b for b in back]
    batch = ScoreBatch.from_events([ScoreEvent(series, f"e{i}", f"p{i}", 1, t, t) for i, t in enumerate(times)])
    got = decide(Overlay(reg), Submission.SCORES, batch, now)
    expect = [instance(series, ref_window_date(every, zone, at, t)) for t in times]
    assert got.routed is not None and got.routed.board_ids() == expect
    made = [r for r in got.records if r[0] == R.INSTANCE]
    assert [r[1] for r in made] == list(dict.fromkeys(expect))  # in order of first event, each once
    for r in made:
        moves = [x[2] for x in got.records if x[0] == R.STATE and x[1] == r[1]]
        due = [m for m, at_ms in (("FROZEN", r.ends_at), ("FINALIZED", r.ends_at + r.finalize_after_s * 1000))
               if at_ms <= now]
        assert moves == due, r
        assert r.closes_at == r.ends_at == ref_window_end(every, zone, at, r.starts_at)
    assert set(reg.boards) == {series}  # pure: the registry is unchanged

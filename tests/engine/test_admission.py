"""Admission: ``decide_columns`` is pure and one pass; ``apply_*`` fold logged
records in. Checked against a brute-force reference that admits event by event."""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.core import records as R
from engine.core.admission import Admission
from engine.core.columns import ScoreColumns
from engine.core.dedup import DedupTable
from engine.core.errors import AlreadyDecided, EventNotFound
from engine.core.model import BoardSpec, BoardState, Outcome, Policy, ScoreEvent

BOARD = "b"
C = R.CODE


class Reference:
    """Admission as the API states it, one event at a time, with dicts."""

    def __init__(self, retention: int, review: int | None, frozen: bool):
        self.retention, self.review, self.frozen = retention, review, frozen
        self.window: OrderedDict[str, tuple] = OrderedDict()  # the newest ``retention`` remembered ids
        self.ever_held: dict[str, tuple] = {}
        self.held: list[str] = []

    def admit(self, ev: ScoreEvent) -> int:
        content = (ev.player_id, ev.value, ev.achieved_at, ev.submitted_at, ev.metadata)
        known = self.window.get(ev.event_id, self.ever_held.get(ev.event_id))
        if known is not None:
            return C[Outcome.DUPLICATE_IGNORED] if known == content else C[Outcome.REJECTED_EVENT_ID_CONFLICT]
        self.window[ev.event_id] = content
        if self.frozen or (self.review is not None and ev.value > self.review):
            self.ever_held[ev.event_id] = content
            self.held.append(ev.event_id)
            return C[Outcome.HELD_FOR_CORRECTION] if self.frozen else C[Outcome.HELD_FOR_REVIEW]
        return R.APPLY

    def end_of_batch(self) -> None:
        """The window keeps at least the newest ``retention`` ids (a batch is judged whole first)."""
        while len(self.window) > self.retention:
            self.window.popitem(last=False)


@st.composite
def batches(draw):
    events = [ScoreEvent(BOARD, draw(st.sampled_from(["e1", "e2", "e3", "é4", "e5", "e6", "e7"])),
                         draw(st.sampled_from(["p", "q"])), draw(st.integers(0, 4)), 1, 1,
                         draw(st.sampled_from([b"", b"", b'{"a":1}', b'{"a":2}'])))
              for _ in range(draw(st.integers(0, 25)))]
    cuts = sorted(draw(st.lists(st.integers(0, len(events)), max_size=4)))
    return [events[a:b] for a, b in zip([0, *cuts], [*cuts, len(events)])]


@settings(deadline=None, max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(batches(), st.sampled_from([None, 2]), st.booleans(), st.integers(1, 4))
def test_decide_then_apply_equals_the_reference(parts, review, frozen, retention):
    spec = BoardSpec(BOARD, Policy.BEST_SCORE, review_above=review)
    ref, a = Reference(retention, review, frozen), Admission(spec, retention)
    if frozen:
        a.apply_state(BoardState.FROZEN, 0)
    logged = []
    for events in parts:
        expected = [ref.admit(ev) for ev in events]
        ref.end_of_batch()
        cols = ScoreColumns.from_events(events, BOARD)
        before = a.to_state()
        got = a.decide_columns(cols)
        assert a.to_state() == before  # deciding changes nothing
        assert got.verdicts.tolist() == expected
        a.apply_scores(cols, got.verdicts, got.words, got.fps)
        logged.append((cols, got.verdicts))
        assert list(a.held) == ref.held
        a._check()
    # replay: the same fold over the logged verdicts, without the decision's words, builds the same state
    b = Admission(spec, retention)
    if frozen:
        b.apply_state(BoardState.FROZEN, 0)
    for cols, verdicts in logged:
        b.apply_scores(cols, verdicts)
    assert b.to_state() == a.to_state()


@settings(deadline=None, max_examples=100, suppress_health_check=[HealthCheck.too_slow])
@given(batches(), st.sampled_from([None, 2]), st.integers(1, 4))
def test_a_cycle_decided_against_its_overlay_equals_the_reference(parts, review, retention):
    """Deciding batch k with the ids that batches 1..k-1 of the same cycle
    remembered (``earlier``: the sequencer's overlay), before any of them is
    applied, gives the reference's verdicts for the whole cycle judged in
    order; folding the records in afterwards (with the decisions' words, as
    live does) builds the state replay builds from the log (without them)."""
    spec = BoardSpec(BOARD, Policy.BEST_SCORE, review_above=review)
    ref, cycle, replay = Reference(retention, review, False), Admission(spec, retention), Admission(spec, retention)
    earlier = DedupTable(1 << 62, BOARD)
    decided = []
    for events in parts:
        cols = ScoreColumns.from_events(events, BOARD)
        got = cycle.decide_columns(cols, earlier=earlier)
        assert got.verdicts.tolist() == [ref.admit(ev) for ev in events]
        keep = got.remembered()
        earlier.remember_words(got.words[keep], got.fps[keep])
        decided.append((cols, got))
    assert len(cycle.dedup) == 0  # nothing applied before the append
    for cols, got in decided:  # the append succeeded: fold each record in, in log order
        cycle.apply_scores(cols, got.verdicts, got.words, got.fps)
        replay.apply_scores(cols, got.verdicts)
    assert cycle.to_state() == replay.to_state()
    cycle._check()


def test_a_board_with_a_quarantine_decides_in_one_columnar_pass(monkeypatch):
    """Holding or deciding events does not send a board to an event-by-event path."""
    spec = BoardSpec(BOARD, Policy.BEST_SCORE, review_above=10)
    a = Admission(spec, 3)
    held = ScoreColumns.from_events([ScoreEvent(BOARD, "big", "p", 50, 1, 1)], BOARD)
    got = a.decide_columns(held)
    a.apply_scores(held, got.verdicts, got.words, got.fps)
    a.check_decision("big")
    a.apply_decision("big", "reject")
    a.apply_scores(*_logged([ScoreEvent(BOARD, "big2", "q", 60, 1, 1)], C[Outcome.HELD_FOR_REVIEW]))
    monkeypatch.setattr(ScoreColumns, "events", lambda self: pytest.fail("event-by-event admission"))
    for i in range(5):  # push "big" out of the dedup window
        a.apply_scores(*_logged([ScoreEvent(BOARD, f"n{i}", "p", 1, 1, 1)], R.APPLY))
    assert "big" not in a.dedup
    cols = ScoreColumns.from_events([ScoreEvent(BOARD, "big", "p", 50, 1, 1), ScoreEvent(BOARD, "big", "p", 51, 1, 1),
                                     ScoreEvent(BOARD, "big2", "q", 60, 1, 1), ScoreEvent(BOARD, "x", "q", 5, 1, 1)])
    assert a.decide_columns(cols).verdicts.tolist() == [
        C[Outcome.DUPLICATE_IGNORED], C[Outcome.REJECTED_EVENT_ID_CONFLICT], C[Outcome.DUPLICATE_IGNORED], R.APPLY]


def _logged(events, code):
    return ScoreColumns.from_events(events, BOARD), np.full(len(events), code, np.uint8)


def test_decisions_are_checked_purely_and_applied_once():
    a = Admission(BoardSpec(BOARD, Policy.BEST_SCORE, review_above=1), 10)
    a.apply_scores(*_logged([ScoreEvent(BOARD, "h", "p", 5, 1, 1)], C[Outcome.HELD_FOR_REVIEW]))
    assert a.check_decision("h").event_id == "h" and "h" in a.held  # checking takes nothing
    with pytest.raises(AlreadyDecided):
        a.check_decision("h", taken={"h"})  # decided earlier in the same cycle
    with pytest.raises(EventNotFound):
        a.check_decision("nope")
    a.apply_decision("h", "apply")
    assert a.held == {} and a.decided["h"][0] == "apply"
    with pytest.raises(AlreadyDecided):
        a.check_decision("h")
    a._check()


def test_metadata_is_content_and_held_events_keep_it():
    spec = BoardSpec(BOARD, Policy.BEST_SCORE, review_above=10)
    a = Admission(spec, 100)
    ev = ScoreEvent(BOARD, "e1", "p", 5, 1, 1, b'{"a":1}')
    cols = ScoreColumns.from_events([ev, ev, ev._replace(metadata=b'{"a":2}'), ev._replace(metadata=b"")], BOARD)
    codes = a.decide_columns(cols).verdicts.tolist()
    assert codes == [0, C[Outcome.DUPLICATE_IGNORED]] + [C[Outcome.REJECTED_EVENT_ID_CONFLICT]] * 2
    big = ScoreEvent(BOARD, "e2", "p", 50, 1, 1, b'{"why":"review"}')
    cols = ScoreColumns.from_events([big], BOARD)
    got = a.decide_columns(cols)
    assert got.verdicts.tolist() == [C[Outcome.HELD_FOR_REVIEW]]
    a.apply_scores(cols, got.verdicts)  # the replay fold: words computed here
    assert a.held["e2"].metadata == b'{"why":"review"}'
    b = Admission.from_state(spec, 1, a.to_state())  # a tiny window: the quarantine still knows e2
    b._check()
    assert b.held["e2"].metadata == b'{"why":"review"}'
    again = ScoreColumns.from_events([big._replace(metadata=b""), big], BOARD)
    assert b.decide_columns(again).verdicts.tolist() == [C[Outcome.REJECTED_EVENT_ID_CONFLICT], C[Outcome.DUPLICATE_IGNORED]]

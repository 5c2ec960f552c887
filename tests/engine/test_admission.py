"""Batch admission (``decide_columns``) against event-by-event ``admit``."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine import records as R
from engine.admission import Admission
from engine.columns import ScoreColumns
from engine.model import BoardSpec, BoardState, Outcome, Policy, ScoreEvent

BOARD = "b"


@st.composite
def batches(draw):
    events = [ScoreEvent(BOARD, draw(st.sampled_from(["e1", "e2", "e3", "é4", "e5"])),
                         draw(st.sampled_from(["p", "q"])), draw(st.integers(0, 4)), 1, 1,
                         draw(st.sampled_from([b"", b"", b'{"a":1}', b'{"a":2}'])))
              for _ in range(draw(st.integers(0, 25)))]
    cuts = sorted(draw(st.lists(st.integers(0, len(events)), max_size=4)))
    return [events[a:b] for a, b in zip([0, *cuts], [*cuts, len(events)])]


@settings(deadline=None, max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(batches(), st.sampled_from([None, 2]), st.booleans(), st.integers(1, 4))
def test_decide_columns_equals_admit_one_by_one(parts, review, frozen, retention):
    spec = BoardSpec(BOARD, Policy.BEST_SCORE, review_above=review)
    one, many = Admission(spec, retention), Admission(spec, retention)
    if frozen:
        one.set_state(BoardState.FROZEN)
        many.set_state(BoardState.FROZEN)
    for events in parts:
        expected = [0 if v is None else R.CODE[v] for v in map(one.admit, events)]
        one.commit()
        got = many.decide_columns(ScoreColumns.from_events(events, BOARD)).tolist()
        many.commit()
        assert got == expected
        assert one.to_state() == many.to_state()
        many._check()


def test_rollback_forgets_a_batch():
    a = Admission(BoardSpec(BOARD, Policy.BEST_SCORE), 10)
    cols = ScoreColumns.from_events([ScoreEvent(BOARD, "e1", "p", 1, 1, 1), ScoreEvent(BOARD, "e2", "p", 2, 1, 1)])
    assert a.decide_columns(cols).tolist() == [0, 0]
    a.rollback()
    assert len(a.dedup) == 0
    assert a.decide_columns(cols).tolist() == [0, 0]


def test_metadata_is_content_and_held_events_keep_it():
    spec = BoardSpec(BOARD, Policy.BEST_SCORE, review_above=10)
    a = Admission(spec, 100)
    ev = ScoreEvent(BOARD, "e1", "p", 5, 1, 1, b'{"a":1}')
    codes = a.decide_columns(ScoreColumns.from_events([ev, ev, ev._replace(metadata=b'{"a":2}'),
                                                       ev._replace(metadata=b"")], BOARD)).tolist()
    assert codes == [0, R.CODE[Outcome.DUPLICATE_IGNORED]] + [R.CODE[Outcome.REJECTED_EVENT_ID_CONFLICT]] * 2
    big = ScoreEvent(BOARD, "e2", "p", 50, 1, 1, b'{"why":"review"}')
    assert a.decide_columns(ScoreColumns.from_events([big], BOARD)).tolist() == [R.CODE[Outcome.HELD_FOR_REVIEW]]
    assert a.held["e2"].metadata == b'{"why":"review"}'
    b = Admission.from_state(spec, 100, a.to_state())
    assert b.held["e2"].metadata == b'{"why":"review"}'
    assert b.admit(big._replace(metadata=b"")) is Outcome.REJECTED_EVENT_ID_CONFLICT
    assert b.admit(big) is Outcome.DUPLICATE_IGNORED

"""engine.router.registry: BoardRegistry.apply, the one fold of the router's state.

The sequencer calls it for each record once durable (with the memo its
decision left) and recovery for each record of the log (without): every
record kind here, as the log hands records back (lists)."""

from __future__ import annotations

import numpy as np

from engine.core import records as R
from engine.core.columns import ScoreColumns
from engine.core.model import BoardSpec, BoardState, HeldEvent, Outcome, Policy, ScoreEvent
from engine.router.registry import BoardRegistry

B = "g:m:s:reg"
HELD = R.CODE[Outcome.HELD_FOR_REVIEW]


def _scores(events, verdicts, partition=0):
    return R.scores_record(ScoreColumns.from_events(events, B), partition, np.array(verdicts, np.uint8))


def _log():
    ev = [ScoreEvent(B, f"e{i}", f"p{i % 3}", i, i, i) for i in range(6)]
    return [
        R.board_record(BoardSpec(B, Policy.BEST_SCORE, shards=2, review_above=3)),
        _scores(ev[:4], [R.APPLY, R.APPLY, R.CODE[Outcome.DUPLICATE_IGNORED], R.APPLY]),
        _scores(ev[4:], [HELD, HELD], partition=1),
        R.decide_record(B, "e5", "reject", "no", "mod", HeldEvent("e5", "p2", 5, 5, 5, Outcome.HELD_FOR_REVIEW)),
        R.InvalidationRecord(R.INVALIDATE, B, "e1", R.correction_id("e1", 1), None, "mod"),
        R.StateRecord(R.STATE, B, BoardState.FROZEN.value),
        R.dead_letter_record(R.DeadLetter(B, 2, 1, "e4", "boom")),
        R.StateRecord(R.STATE, "g:m:s:unknown", BoardState.FROZEN.value),
    ]


def test_every_record_kind_folds_in():
    reg = BoardRegistry(3)
    for offset, rec in enumerate(_log()):
        reg.apply(offset, list(rec))
        assert reg.log_offset == offset
    ctl = reg.ctl(B)
    a = ctl.admission
    assert ctl.spec.shards == 2 and ctl.part_actor and ctl.actors == sorted(set(ctl.part_actor))
    assert len(a.dedup) == 5  # the duplicate is not remembered again; held ids are
    assert list(a.held) == ["e4"] and a.decided["e5"][0] == "reject"
    assert ctl.corrections == 1
    assert (a.state, a.freeze_position) == (BoardState.FROZEN, 5)
    assert reg.dead_logged == {(2, 1)}
    assert set(reg.boards) == {B}  # a record of an unknown board moves only the offset
    a._check()


def test_a_board_record_twice_keeps_the_first():
    reg = BoardRegistry(1)
    reg.apply(0, R.board_record(BoardSpec(B, Policy.BEST_SCORE, shards=1)))
    first = reg.ctl(B)
    reg.apply(1, R.board_record(BoardSpec(B, Policy.CUMULATIVE, shards=1)))
    assert reg.ctl(B) is first and first.spec.policy is Policy.BEST_SCORE


def test_old_one_event_records_fold_like_columnar_ones():
    events = [ScoreEvent(B, f"e{i}", "p", i, i, i) for i in range(4)]
    verdicts = [R.APPLY, HELD, R.APPLY, HELD]
    old, new = BoardRegistry(1), BoardRegistry(1)
    spec = R.board_record(BoardSpec(B, Policy.BEST_SCORE, shards=1, review_above=0))
    old.apply(0, spec)
    new.apply(0, spec)
    for i, (ev, v) in enumerate(zip(events, verdicts), 1):
        old.apply(i, list(R.score_record(ev, None if v == R.APPLY else R.outcome_of(v))))
    new.apply(1, list(_scores(events, verdicts)))
    assert old.ctl(B).admission.to_state() == new.ctl(B).admission.to_state()
    assert list(old.ctl(B).admission.held) == ["e1", "e3"]

"""Logs written before the columnar score record (one ``S`` record per event)
still replay, into the same state as the same events logged as columns."""

from __future__ import annotations

import random
from types import SimpleNamespace

import numpy as np

from engine.core import records as R
from engine.core.columns import ScoreColumns
from engine.core.model import BoardSpec, Policy, ScoreEvent
from engine.router.router import Router
from engine.runtime.shard import ShardCore

SPEC = BoardSpec("b", Policy.CUMULATIVE)


def logs():
    rnd = random.Random(3)
    events = [ScoreEvent("b", f"e{rnd.randrange(40)}", f"p{rnd.randrange(9)}", rnd.randrange(-5, 9), i, i)
              for i in range(120)]
    verdicts = np.array([R.CODE[R.Outcome.DUPLICATE_IGNORED] if i % 17 == 5 else 0 for i in range(len(events))],
                        np.uint8)
    old = [R.board_record(SPEC)] + [
        R.score_record(ev, None if v == 0 else R.outcome_of(int(v))) for ev, v in zip(events, verdicts)]
    new = [R.board_record(SPEC), R.scores_record(ScoreColumns.from_events(events), 0, verdicts)]
    return list(enumerate(old)), list(enumerate(new)), events


def test_old_score_records_replay_like_columnar_ones():
    old, new, events = logs()
    a, b = ShardCore(0, 1), ShardCore(0, 1)
    assert a.replay(old) == len(old) and b.replay(new) == len(new)
    a._check()
    assert a.checksum_of_state() == b.checksum_of_state() != 0
    pa, pb = a.parts["b"][0], b.parts["b"][0]
    for pid in {e.player_id for e in events}:
        assert pa.player_history(pid) == pb.player_history(pid)
    assert [r.key for r in pa.top(0, 20)] == [r.key for r in pb.top(0, 20)]


def test_router_folds_old_score_records_like_columnar_ones():
    old, new, _ = logs()
    one_shard = SimpleNamespace(n=1)  # fold reads only the shard count
    ra, rb = Router(one_shard, None), Router(one_shard, None)
    for offset, rec in old:
        ra.fold(offset, rec)
    for offset, rec in new:
        rb.fold(offset, rec)
    assert ra.boards["b"].admission.to_state() == rb.boards["b"].admission.to_state()
    assert len(ra.boards["b"].admission.dedup) > 0

"""engine.core.wire: the one vocabulary the read fan-out and the shard actors share.
Requests and replies are named tuples that cross Ray as msgpack arrays; named
again on receipt they equal what the shard actor answered in process."""

from __future__ import annotations

import msgpack
import numpy as np

from engine.core.archive import rows_from_wire
from engine.core import records as R
from engine.core import wire as W
from engine.core.columns import ScoreColumns
from engine.core.model import BoardSpec, Policy, ScoreEvent
from engine.runtime.shard import ShardCore

OPS = {"top", "mget", "size", "get", "count", "nbrs", "sample", "hist", "sum", "rows", "hcols", "rcols", "spill", "spill_read",
       "spill_drop", "spill_wait", "drop", "efps", "scrub"}


def _over_msgpack(obj):
    return msgpack.unpackb(msgpack.packb(obj, use_bin_type=True), raw=False, strict_map_key=False)


def _core() -> ShardCore:
    core = ShardCore(0, 1)
    events = [ScoreEvent("b", f"e{i}", f"p{i}", 10 * i, i, i, b'{"k":1}' if i == 3 else b"") for i in range(6)]
    core.apply(1, [[0, R.board_record(BoardSpec("b", Policy.BEST_SCORE, 2))],
                   [1, R.scores_record(ScoreColumns.from_events(events), 0, np.zeros(6, np.uint8))]])
    return core


def test_every_op_has_one_request_type_with_op_and_board_first():
    assert set(W.REQUESTS) == set(W.REPLIES) == OPS
    for op, kind in W.REQUESTS.items():
        assert kind._fields[:2] == ("op", "board_id"), op
        assert getattr(W, op.upper()) == op
    assert W.CHANGES_STATE == {W.DROP}
    assert {op for op, kind in W.REPLIES.items() if kind is not W.Reply} == {W.GET, W.NBRS, W.SAMPLE}


def test_replies_read_back_from_msgpack_equal_the_in_process_ones():
    """What a Ray shard actor sends (msgpack arrays) names back to exactly what
    an in-process one returns, for every read the router makes of a live board."""
    core = _core()
    key = list(core.parts["b"][0].get_many(["p3"])[0].key)
    reqs = [W.Top(W.TOP, "b", 4), W.MGet(W.MGET, "b", ["p1", "p3", "zz"]), W.Size(W.SIZE, "b"),
            W.Get(W.GET, "b", "p3"), W.Get(W.GET, "b", "zz"), W.Count(W.COUNT, "b", key),
            W.Nbrs(W.NBRS, "b", key, 1, 1), W.Sample(W.SAMPLE, "b", 2), W.Hist(W.HIST, "b", "p3"),
            W.Sum(W.SUM, "b")]
    local = core.read(reqs)
    remote = W.ReadAnswer._make(_over_msgpack(core.read(_over_msgpack(reqs))))
    assert remote.offset == local.offset == 1
    for req, got, want in zip(reqs, remote.replies, local.replies):
        named = W.reply(req.op, got)  # named at the top; nested rows and entries stay as sent (lists)
        assert type(named) is type(want) and _over_msgpack(named) == _over_msgpack(want), req.op
        assert named.version == want.version == 6, req.op
    row = W.RowWire(*W.reply(W.GET, remote.replies[3]).row)
    assert row.player_id == "p3" and row.ranked and row.key == key and row.metadata == b'{"k":1}'
    top = [W.Entry(*e) for e in W.reply(W.TOP, remote.replies[0]).value]
    assert [e.player_id for e in top] == ["p5", "p4", "p3", "p2"] and top[2].metadata == b'{"k":1}'
    assert top[0].metadata is None  # no metadata: the field is there, None
    hist = [W.HistoryItem._make(h) for h in local.replies[8].value]
    assert [(h.event_id, h.value) for h in hist] == [("e3", 30)]


def test_a_row_that_is_not_ranked_has_no_key():
    row = W.RowWire("p", 5, 1, 2, False, 3, None, None)
    assert row.key is None and row.metadata is None
    assert W.RowWire(*_over_msgpack(row)) == row


def test_apply_results_are_named_and_survive_msgpack():
    core = ShardCore(0, 1)
    spec = BoardSpec("b", Policy.BEST_SCORE, 1)
    ev = ScoreEvent("b", "e1", "p1", 7, 1, 1)
    answer = core.apply(1, [[0, R.board_record(spec)],
                            [1, R.scores_record(ScoreColumns.from_events([ev]), 0, np.zeros(1, np.uint8))]])
    got = W.ApplyAnswer._make(_over_msgpack(answer))
    assert got.unlogged == [] and got.results[0] is None
    applied = W.ScoresApplied._make(got.results[1])
    assert np.frombuffer(applied.rows, "<i4").tolist() == [0]
    assert np.frombuffer(applied.values, "<i8").tolist() == [7]
    inv = core.apply(2, [[2, R.InvalidationRecord(R.INVALIDATE, "b", "e1", "c1", None, None)]]).results[0]
    assert type(inv) is W.Invalidated and (inv.player_id, inv.ranked, inv.refused) == ("p1", False, False)
    change = W.ChangeWire(*_over_msgpack(inv.change))
    assert change == inv.change and (change.player_id, change.status, change.metadata) == ("p1", "INVALIDATED", None)


def test_row_chunks_together_are_every_row():
    """RCOLS: a partition's rows in chunks (awards and archives of boards that no longer change)."""
    core = _core()
    every = rows_from_wire(core.read([W.Rows(W.ROWS, "b")]).replies[0].value)
    parts, totals = [], {}
    for p in (0, 1):
        for start in (0, 2, 4, 6):
            got = W.Reply._make(_over_msgpack(core.read([W.RCols(W.RCOLS, "b", p, start, 2)]))[1][0]).value
            totals[p], cols = got
            assert len(np.frombuffer(cols[1], "<i8")) - 1 == max(0, min(2, totals[p] - start))
            parts.append(cols)
    assert sum(totals.values()) == every.n == 6
    rows = rows_from_wire(parts)
    assert sorted(rows.raw_id(i) for i in range(rows.n)) == sorted(every.raw_id(i) for i in range(every.n))
    assert core.read([W.RCols(W.RCOLS, "b", 7, 0, 2)]).replies[0].value is None

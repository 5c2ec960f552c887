"""engine.shard.ShardCore: the cache of answers kept for retried batches is
bounded by records and by bytes, and a retried batch answers from it unchanged."""

from __future__ import annotations

import numpy as np

from engine import records as R
from engine import shard as S
from engine.columns import ScoreColumns
from engine.model import BoardSpec, Policy, ScoreEvent
from engine.shard import ShardCore


def batch(offset: int, n: int) -> list:
    events = [ScoreEvent("b", f"e{offset}-{i}", f"p{i}", offset * 10_000 + i, i, i) for i in range(n)]  # all improve
    return R.scores_record(ScoreColumns.from_events(events), 0, np.zeros(n, np.uint8))


def test_result_cache_is_bounded_by_bytes_and_a_retry_answers_the_same(monkeypatch):
    monkeypatch.setattr(S, "RESULT_CACHE_BYTES", 200_000)
    core = ShardCore(0, 1)
    core.apply(0, [[0, R.board_record(BoardSpec("b", Policy.BEST_SCORE, 1))]])
    first = core.apply(1, [[1, batch(1, 2000)]])
    for off in range(2, 40):
        core.apply(off, [[off, batch(off, 2000)]])
        assert core.result_cache_bytes <= 200_000
        assert core.result_cache_bytes == sum(S._result_nbytes(r) for r in core._results.values())
    assert 1 not in core._results and 39 in core._results  # the oldest went first
    last = core.apply(39, [[39, batch(39, 2000)]])  # a retried batch: answered from the cache, not applied again
    assert last == [core._results[39]]
    assert len(first[0][1]) == 4 * 2000  # every row of the first batch changed


def test_result_cache_keeps_at_most_result_cache_records(monkeypatch):
    monkeypatch.setattr(S, "RESULT_CACHE", 5)
    core = ShardCore(0, 1)
    core.apply(0, [[0, R.board_record(BoardSpec("b", Policy.CUMULATIVE, 1))]])
    for off in range(1, 20):
        core.apply(off, [[off, batch(off, 3)]])
    assert list(core._results) == [15, 16, 17, 18, 19]


def test_an_archived_boards_partitions_stop_changing_and_its_history_reads_in_chunks():
    """After the ARCHIVED state record a score batch is only held, as after the
    drop: the journal an archive copies is the same whenever it is built, on a
    live shard, after a snapshot and after a replay of the records."""
    from engine.journal import JournalColumns

    records = [R.board_record(BoardSpec("b", Policy.BEST_SCORE, 2)), batch(1, 30), batch(2, 30),
               [R.STATE, "b", "ARCHIVED"]]
    held = R.scores_record(ScoreColumns.from_events([ScoreEvent("b", "late", "p1", 10**9, 1, 1)]), 0,
                           np.full(1, R.CODE[S.Outcome.HELD_FOR_CORRECTION], np.uint8))
    core = ShardCore(0, 1)
    core.apply(len(records) - 1, [[i, r] for i, r in enumerate(records)])
    assert core.archived == {"b"}
    sizes = {n: len(p.journal) for n, p in core.parts["b"].items()}
    version = core.read([["size", "b"]])[1][0][0]
    for off in range(4, 6):
        out = core.apply(off, [[off, held]])
        assert out[0][1:] == [b"", b"", b""]  # nothing changed
    assert {n: len(p.journal) for n, p in core.parts["b"].items()} == sizes
    assert core.read([["size", "b"]])[1][0][0] == version
    again = ShardCore.from_state(core.to_state())
    assert again.archived == {"b"}
    replayed = ShardCore(0, 1)
    replayed.replay(enumerate(records + [held]))
    assert replayed.archived == {"b"} and {n: len(p.journal) for n, p in replayed.parts["b"].items()} == sizes
    for n, p in core.parts["b"].items():  # hcols: [total, columns, ids (first chunk only)]
        total, wire, ids = core.read([["hcols", "b", n, 0, 7]])[1][0][1]
        assert total == sizes[n] and JournalColumns.from_wire(wire).n == min(7, total)
        assert np.frombuffer(ids[1], "<i8")[-1] == len(ids[0])
        assert core.read([["hcols", "b", n, 7, 7]])[1][0][1][2] is None
    assert core.read([["hcols", "b", 9, 0, 7]])[1][0][1] is None

"""engine.runtime.shard.ShardCore: the cache of answers kept for retried batches is
bounded by records and by bytes, and a retried batch answers from it unchanged.
Dead letters: reported until the log holds their record; a replay given the
log's dead letters skips what they name."""

from __future__ import annotations

import os

import numpy as np

from engine.core import records as R
from engine.runtime import shard as S
from engine.core import wire as W
from engine.core.columns import ScoreColumns
from engine.core.model import BoardSpec, Outcome, Policy, ScoreEvent
from engine.core.partition import Partition
from engine.core.placement import part_of
from engine.runtime.shard import ShardCore


def batch(offset: int, n: int) -> list:
    events = [ScoreEvent("b", f"e{offset}-{i}", f"p{i}", offset * 10_000 + i, i, i) for i in range(n)]  # all improve
    return R.scores_record(ScoreColumns.from_events(events), 0, np.zeros(n, np.uint8))


def test_result_cache_is_bounded_by_bytes_and_a_retry_answers_the_same(monkeypatch):
    monkeypatch.setattr(S, "RESULT_CACHE_BYTES", 200_000)
    core = ShardCore(0, 1)
    core.apply(0, [[0, R.board_record(BoardSpec("b", Policy.BEST_SCORE, 1))]])
    first, unlogged = core.apply(1, [[1, batch(1, 2000)]])
    assert unlogged == []  # no dead letter to report
    for off in range(2, 40):
        core.apply(off, [[off, batch(off, 2000)]])
        assert core.result_cache_bytes <= 200_000
        assert core.result_cache_bytes == sum(S._result_nbytes(r) for r in core._results.values())
    assert 1 not in core._results and 39 in core._results  # the oldest went first
    last, _ = core.apply(39, [[39, batch(39, 2000)]])  # a retried batch: answered from the cache, not applied again
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
    from engine.core.journal import JournalColumns

    records = [R.board_record(BoardSpec("b", Policy.BEST_SCORE, 2)), batch(1, 30), batch(2, 30),
               [R.STATE, "b", "ARCHIVED"]]
    held = R.scores_record(ScoreColumns.from_events([ScoreEvent("b", "late", "p1", 10**9, 1, 1)]), 0,
                           np.full(1, R.CODE[S.Outcome.HELD_FOR_CORRECTION], np.uint8))
    core = ShardCore(0, 1)
    core.apply(len(records) - 1, [[i, r] for i, r in enumerate(records)])
    assert core.archived == {"b"}
    sizes = {n: len(p.journal) for n, p in core.parts["b"].items()}
    version = core.read([W.Size(W.SIZE, "b")]).replies[0].version
    for off in range(4, 6):
        out, _ = core.apply(off, [[off, held]])
        assert out[0] == W.ScoresApplied(bytes([R.CODE[S.Outcome.HELD_FOR_CORRECTION]]), b"", b"", b"")  # no change
    assert {n: len(p.journal) for n, p in core.parts["b"].items()} == sizes
    assert core.read([W.Size(W.SIZE, "b")]).replies[0].version == version
    again = ShardCore.from_state(core.to_state())
    assert again.archived == {"b"}
    replayed = ShardCore(0, 1)
    replayed.replay(enumerate(records + [held]))
    assert replayed.archived == {"b"} and {n: len(p.journal) for n, p in replayed.parts["b"].items()} == sizes
    for n, p in core.parts["b"].items():  # hcols: total, columns, ids (first chunk only)
        chunk = core.read([W.HCols(W.HCOLS, "b", n, 0, 7)]).replies[0].value
        assert chunk.total == sizes[n] and JournalColumns.from_wire(chunk.columns).n == min(7, chunk.total)
        assert np.frombuffer(chunk.ids[1], "<i8")[-1] == len(chunk.ids[0])
        assert core.read([["hcols", "b", n, 7, 7]]).replies[0].value.ids is None  # as a list, as msgpack gives it
    assert core.read([W.HCols(W.HCOLS, "b", 9, 0, 7)]).replies[0].value is None
# ---------------------------------------------------------------- reads batched per call

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from tests.engine.test_partition import TRICKY_IDS, values  # noqa: E402


@st.composite
def board_and_reads(draw):
    policy = draw(st.sampled_from(list(Policy)))
    parts = draw(st.integers(1, 3))
    n = draw(st.integers(0, 30))
    events = [ScoreEvent("b", f"e{i}", draw(st.sampled_from(TRICKY_IDS)), draw(values), draw(st.integers(0, 2)),
                         draw(st.integers(0, 2))) for i in range(n)]
    keys = st.tuples(values, st.integers(-1, 3), st.sampled_from(TRICKY_IDS))
    req = st.one_of(
        st.builds(lambda p: W.Get(W.GET, "b", p), st.sampled_from(TRICKY_IDS + ["absent"])),
        st.builds(lambda k: W.Count(W.COUNT, "b", list(k)), keys),
        st.builds(lambda p, a, b: W.Nbrs(W.NBRS, "b", p, a, b), st.sampled_from(TRICKY_IDS), st.integers(0, 4),
                  st.integers(0, 4)),
        st.builds(lambda: W.Size(W.SIZE, "b")),
    )
    return policy, parts, events, draw(st.lists(req, max_size=12))


@settings(deadline=None, max_examples=150)
@given(board_and_reads())
def test_a_batch_of_reads_answers_each_as_a_brute_force_oracle_would(case):
    """Concurrent reads coalesced into one call are answered per partition in
    one lookup / count / gather; each answer must still be exactly that
    request's own: checked against sorted() over every row of the board."""
    policy, parts, events, reqs = case
    core = ShardCore(0, 1)
    core.apply(0, [[0, R.board_record(BoardSpec("b", policy, parts))]])
    if events:
        core.apply(1, [[1, R.scores_record(ScoreColumns.from_events(events), 0, np.zeros(len(events), np.uint8))]])
    rows = [r for p in core.parts["b"].values() for r in p.all_rows()]
    by_id = {r.player_id: r for r in rows}
    ranked = sorted((r for r in rows if r.key is not None), key=lambda r: r.key)
    keys = [tuple(r.key) for r in ranked]
    version = sum(p.changes for p in core.parts["b"].values())

    def below(key) -> int:
        return sum(1 for k in keys if k < tuple(key))

    expected, asked = [], []
    for req in reqs:
        if req.op == W.NBRS:  # the router asks with the key of a ranked player's row (here: the id in its place)
            row = by_id.get(req.key)
            if row is None or row.key is None:
                continue
            req = req._replace(key=list(row.key))
        if req.op == W.COUNT:  # a wire key: the value negated on descending boards
            primary, tie, pid = req.key
            req = req._replace(key=[primary if policy is Policy.FASTEST_TIME else -primary, tie, pid])
        asked.append(req)
        if req.op == W.GET:
            row = by_id.get(req.player_id)
            expected.append(W.RowReply(version, None, None) if row is None else
                            W.RowReply(version, S.row_wire(row), below(row.key) if row.key is not None else None))
        elif req.op == W.COUNT:
            expected.append(W.Reply(version, below(req.key)))
        elif req.op == W.SIZE:
            expected.append(W.Reply(version, len(ranked)))
        else:
            lo, a, b = below(req.key), req.above, req.below
            hi = lo + 1 if lo < len(keys) and keys[lo] == tuple(req.key) else lo
            expected.append(W.WindowReply(version, [S.entry(r) for r in ranked[max(0, lo - a):lo]] if a else [],
                                          [S.entry(r) for r in ranked[hi:hi + b]], lo))
    offset, answers = core.read(asked)
    assert answers == expected
    assert [core.read([r]).replies[0] for r in asked] == expected  # alone or batched: the same answer
    assert [core.read([list(r)]).replies[0] for r in asked] == expected  # as msgpack delivers them: lists


def test_reads_batched_in_one_call_keep_their_order_around_a_drop():
    """Reads of one call are answered together, but never across a control
    request: a get before a drop sees the row, one after it does not."""
    core = ShardCore(0, 1)
    core.apply(0, [[0, R.board_record(BoardSpec("b", Policy.BEST_SCORE, 2))]])
    core.apply(1, [[1, batch(1, 10)]])
    get, count = W.Get(W.GET, "b", "p3"), W.Count(W.COUNT, "b", [0, 0, "p"])
    _, (before, count_before, dropped, after, count_after) = core.read([get, count, W.Drop(W.DROP, "b"), get, count])
    assert before.row is not None and before.row.player_id == "p3" and count_before.value == 10
    assert dropped.value == 2
    assert (after.row, after.local) == (None, None) and count_after.value == 0




# ------------------------------------------------------------ dead letters


def _poisoned(monkeypatch, event_id: str) -> None:
    real = Partition.apply_columns

    def apply_columns(self, cols, verdicts=None, *a, **kw):
        if any(e == event_id and (verdicts is None or verdicts[i] == 0) for i, e in enumerate(cols.event_ids)):
            raise RuntimeError("boom")
        return real(self, cols, verdicts, *a, **kw)

    monkeypatch.setattr(Partition, "apply_columns", apply_columns)


def _log() -> list:
    """A board and three score batches; e1-3 (row 3 of offset 2) is the poison below."""
    return [[0, R.board_record(BoardSpec("b", Policy.BEST_SCORE, 1))]] + [[o, batch(o, 5)] for o in (1, 2, 3)]


def test_a_dead_letter_is_reported_until_its_record_comes_back(monkeypatch):
    _poisoned(monkeypatch, "e2-3")
    core = ShardCore(0, 1)
    items = _log()
    results, unlogged = core.apply(2, items[:3])
    assert results[2][0][3] == S.DEAD and [S.DEAD] != list(results[2][0])  # only that row
    assert unlogged == [[2, "b", "e2-3", "RuntimeError: boom", 3]]
    assert core.apply(3, [items[3]])[1] == unlogged  # reported again: not logged yet
    rec = R.dead_letter_record(R.DeadLetter("b", 2, 3, "e2-3", "RuntimeError: boom"))
    assert core.apply(4, [[4, rec]])[1] == []  # the router's record came back: no longer reported
    state = core.to_state()
    assert state["dead_logged"] == [[2, 3]]
    assert ShardCore.from_state(state).apply(4, [])[1] == []
    state.pop("dead_logged")  # a snapshot from before log format 4: its dead letters are not logged
    assert ShardCore.from_state(state).apply(4, [])[1] == unlogged


def test_replay_skips_what_the_logs_dead_letters_name_without_trying_it(monkeypatch):
    """With the bug fixed, a replay given the log's dead letters skips the row
    (never calling the apply that failed) and reaches the state of the live
    shard that dead-lettered it."""
    items = _log()
    rec = R.dead_letter_record(R.DeadLetter("b", 2, 3, "e2-3", "RuntimeError: boom"))
    with monkeypatch.context() as m:
        _poisoned(m, "e2-3")
        live = ShardCore(0, 1)
        live.apply(4, items + [[4, rec]])
    fixed = ShardCore(0, 1)
    log = [tuple(i) for i in items] + [(4, rec)]
    assert fixed.replay(log, R.dead_letters_in(log)) == 5
    assert fixed.checksum_of_state() == live.checksum_of_state()
    assert fixed.dead_letters == live.dead_letters == [[2, "b", "e2-3", "RuntimeError: boom", 3]]
    assert fixed.apply(4, [])[1] == []  # logged: nothing to report
    hist = fixed.read([W.Hist(W.HIST, "b", "p3")]).replies[0].value
    assert [h.outcome for h in hist if h.event_id == "e2-3"] == [Outcome.DEAD_LETTERED.value]
    naive = ShardCore(0, 1)  # without the skip set the fixed code applies it: another state
    naive.replay(log)
    assert naive.checksum_of_state() != live.checksum_of_state()


def test_a_whole_record_dead_letter_is_skipped_only_where_it_applies():
    """An invalidation named by a dead letter (no row) is skipped on the shard
    whose partition owns the event; another shard of the board did nothing live and does nothing."""
    spec = BoardSpec("b", Policy.BEST_SCORE, 2)
    events = [ScoreEvent("b", f"e{i}", f"p{i}", 10 + i, i, i) for i in range(12)]
    log = [(0, R.board_record(spec))]
    for p in range(2):
        mine = [e for e in events if part_of(e.player_id, 2) == p]
        log.append((1 + p, R.scores_record(ScoreColumns.from_events(mine), p, np.zeros(len(mine), np.uint8))))
    log.append((3, [R.INVALIDATE, "b", "e0", "c1", None, None]))
    dead = R.dead_letters_in([(4, R.dead_letter_record(R.DeadLetter("b", 3, None, "e0", "KeyError: x")))])
    cores = [ShardCore(i, 2) for i in range(2)]
    for core in cores:
        core.replay(log, dead)
    owner = [i for i, c in enumerate(cores) if any(p.owns_event("e0") for p in c.parts.get("b", {}).values())]
    assert len(owner) == 1
    assert cores[owner[0]].dead_letters == [[3, "b", "e0", "KeyError: x"]]
    assert cores[1 - owner[0]].dead_letters == []
    row = cores[owner[0]].read([W.Get(W.GET, "b", "p0")]).replies[0].row
    assert row.player_id == "p0" and row.ranked  # still ranked: the invalidation was skipped, not applied


# ----------------------------------------------------------------- background snapshots (issue 29 item 2)


def _journaled(root, tail_rows: int = 64) -> tuple[ShardCore, list]:
    """A shard whose journals are files under ``root`` with a small tail (flushes and run merges happen),
    and the log it applied: a board of 2 partitions, then 12 score batches."""
    from engine.core.journal import JournalPlace

    records = [R.board_record(BoardSpec("b", Policy.BEST_SCORE, 2))] + [batch(off, 50) for off in range(1, 13)]
    core = ShardCore(0, 1, JournalPlace(str(root), tail_rows))
    core.apply(len(records) - 1, [[i, r] for i, r in enumerate(records)])
    assert any(p.journal.runs for p in core.parts["b"].values())  # flushed: runs on disk
    return core, records


def test_a_snapshot_cut_equals_the_synchronous_state_and_its_syncs_find_every_file(tmp_path):
    """The background cut holds exactly what the old synchronous snapshot held (the pack of both is
    byte-equal); its callables fsync each journal's files by name, a file merged away meanwhile skipped."""
    import msgpack

    from engine.log.framing import pack_in_pieces, pack_payload as pack
    from engine.log.journal_files import fsync_paths

    core, _ = _journaled(tmp_path / "j")
    offset, state, syncs = core.snapshot_cut()
    assert offset == core.applied_offset == 12
    assert pack(state) == pack(core.to_state())
    assert pack_in_pieces(state) == pack(state)  # the snapshot thread's pack: the same bytes
    assert len(syncs) == len(core.parts["b"]) == 2
    for sync in syncs:
        sync()
    paths = syncs[0].args[0]
    assert fsync_paths(paths) == len(paths)  # every file named exists now
    assert fsync_paths([*paths, tmp_path / "gone"]) == len(paths)  # a missing one is skipped
    assert msgpack.unpackb(pack(state), raw=False, strict_map_key=False)["applied_offset"] == 12


def test_a_snapshot_cut_is_a_consistent_cut_while_batches_go_on(tmp_path):
    """Batches applied after the cut (flushes and merges included) change nothing in it: the shard
    restored from it plus the log tail equals the live one, journal files and all."""
    import msgpack

    core, records = _journaled(tmp_path / "j")
    offset, state, syncs = core.snapshot_cut()
    frozen = msgpack.packb(state, use_bin_type=True)
    more = [batch(off, 50) for off in range(13, 30)]
    core.apply(12 + len(more), [[13 + i, r] for i, r in enumerate(more)])
    for sync in syncs:  # the snapshot thread's fsyncs, after the shard went on (some runs merged away)
        sync()
    assert msgpack.packb(state, use_bin_type=True) == frozen  # the cut did not move
    live = core.checksum_of_state()
    core.close()
    from engine.core.journal import JournalPlace

    again = ShardCore.from_state(msgpack.unpackb(frozen, raw=False, strict_map_key=False),
                                 JournalPlace(str(tmp_path / "j"), 64))
    assert again.applied_offset == offset
    assert again.replay((13 + i, r) for i, r in enumerate(more)) == len(more)
    assert again.checksum_of_state() == live
    for p in again.parts["b"].values():
        p.journal._check()
    again.close()


def test_run_merges_on_the_merge_thread_answer_the_same_and_swap_in_between_calls(tmp_path):
    """With merges in the background, a flush leaves its merge to the merge thread; every lookup
    (a redelivered old event is still recognised as a duplicate) and read answers as with merges
    inline, the merged runs swap in between calls, and the journals end as the inline ones."""
    from engine.core.journal import JournalPlace

    records = [R.board_record(BoardSpec("b", Policy.BEST_SCORE, 2))] + [batch(off, 50) for off in range(1, 40)]
    inline = ShardCore(0, 1, JournalPlace(str(tmp_path / "inline"), 64))
    bg = ShardCore(0, 1, JournalPlace(str(tmp_path / "bg"), 64))
    bg.merge_in_background()
    started = 0
    for off, rec in enumerate(records):
        a, b = inline.apply(off, [[off, rec]]), bg.apply(off, [[off, rec]])
        assert a == b
        started += len(bg._merging)
        redelivered = records[1 + off // 2] if off > 1 else None  # an event stored long ago, sent again
        if redelivered is not None:
            probe = [[off, redelivered]]  # already applied at that offset: the cached answer, as inline
            assert inline.apply(off, probe) == bg.apply(off, probe)
        for n, p in bg.parts.get("b", {}).items():
            p.journal._check()  # consistent at every step, a merge due or in flight
            for k in range(0, len(p.journal), 211):  # stored ids found through the runs, merging or not
                eid = p.journal.event_id(k)
                assert p.journal.find(eid) == inline.parts["b"][n].journal.find(eid) == k
    assert started > 0  # merges did go to the merge thread
    bg.settle_merges()
    assert bg.checksum_of_state() == inline.checksum_of_state()
    for n, p in bg.parts["b"].items():
        q = inline.parts["b"][n]
        for older, newer in zip(p.journal.runs, p.journal.runs[1:]):  # settled: merged by size again
            assert len(older) > 2 * len(newer)

        def entries(j):  # the runs' (hash, row) pairs: merged in another order, the same set
            return sorted(zip(np.concatenate([np.zeros(0, np.uint64), *(r.hashes for r in j.runs)]).tolist(),
                              np.concatenate([np.zeros(0, np.int64), *(r.rows for r in j.runs)]).tolist()))

        assert entries(p.journal) == entries(q.journal)
        for k in range(0, len(p.journal), 97):  # every owned id still found, through the merged runs
            eid = p.journal.event_id(k)
            assert p.journal.find(eid) == q.journal.find(eid)
    bg.close()
    inline.close()


def test_a_merge_whose_runs_a_scrub_rewrote_is_discarded(tmp_path):
    """A scrub that rewrites a run while its merge is being built: the merged run is not swapped
    in, its file goes, and the scrubbed id is gone from every run."""
    from engine.core.journal import JournalPlace

    records = [R.board_record(BoardSpec("b", Policy.BEST_SCORE, 1))] + [batch(off, 50) for off in range(1, 40)]
    core = ShardCore(0, 1, JournalPlace(str(tmp_path / "j"), 64))
    core.merge_in_background()
    for off, rec in enumerate(records):
        core.apply(off, [[off, rec]])
        if core._merging:
            break
    (journal, (plan, fut)), = core._merging.items()
    fut.result()  # built, not yet swapped in
    row = int(plan.b.rows[0])
    eid = journal.event_id(row)
    journal.scrub(np.array([row]))  # rewrites run b (and merges by size through the hook)
    core.tend_merges()
    assert all(r is not plan.b for r in journal.runs)
    merged = tmp_path / "j" / next(iter(os.listdir(tmp_path / "j"))) / f"run-{plan.seq:08d}"
    assert not merged.exists()  # the discarded merge's file went
    core.settle_merges()
    journal._check()
    assert journal.find(eid) == -1
    core.close()


def test_a_dead_letter_made_after_a_snapshot_cut_stays_out_of_it(monkeypatch):
    """The cut copies the dead letters too: one made by a batch applied after it (while the snapshot
    thread has not packed the state yet) is not in the snapshot, whose replay then makes it again once."""
    import msgpack

    _poisoned(monkeypatch, "e2-3")
    items = _log()
    core = ShardCore(0, 1)
    core.apply(1, items[:2])
    _offset, state, _syncs = core.snapshot_cut()
    core.apply(3, items[2:])  # dead-letters row 3 of offset 2
    assert core.dead_letters and state["dead_letters"] == []
    again = ShardCore.from_state(msgpack.unpackb(msgpack.packb(state, use_bin_type=True), raw=False,
                                                 strict_map_key=False))
    again.replay([tuple(i) for i in items[2:]])
    assert again.dead_letters == core.dead_letters and again.checksum_of_state() == core.checksum_of_state()

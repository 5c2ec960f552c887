"""Recovery exactness of a file-backed LocalService: clean close, crash
(no close), snapshot + tail, corrupt newest snapshot; poison events; disk
faults through the service. Every comparison is over everything a reader
sees: checksums, versions, full top lists, player views, histories and the
quarantine (``helpers.state_of``)."""

from __future__ import annotations

import errno
import gc
import logging
import os
import shutil

import pytest

from engine.core import records as R
from engine.core.errors import StorageUnavailable
from engine.log import InMemoryLog, SegmentedFileLog
from engine.core.model import BoardSpec, BoardState, Invalidation, Outcome, Policy, QuarantineDecision, RowStatus, ScoreEvent
from engine.core.partition import Partition
from engine.runtime.recovery import DeadLetterIndex
from tests.open_files import open_paths
from tests.service.helpers import (
    APPLIED,
    Workload,
    copy_dir,
    crash,
    drop_snapshots,
    open_service,
    run,
    state_of,
)


def test_a_series_keeps_its_recurrence_through_the_log_and_the_snapshots(tmp_path):
    """A board created with a recurrence (docs/api.md §15) is logged as an ``R`` record and comes back
    with it from the snapshots (close and reopen) and from the log alone; other boards stay ``K``."""
    from engine.core.model import BoardSpec, Policy
    from engine.core.windows import Recurrence

    series = BoardSpec("g:daily:s1:x", Policy.BEST_SCORE, shards=3,
                       recurrence=Recurrence("week", "America/New_York", 90, 4))
    plain = BoardSpec("g:plain:s1:x", Policy.CUMULATIVE, shards=2)

    async def specs(svc):
        return {b: ctl.spec for b, ctl in svc.router.boards.items()}, [dict(c.specs) for c in svc.cores]

    async def go():
        svc = await open_service(tmp_path, 2)
        for spec in (series, plain):
            await svc.create_board(spec)
        live = await specs(svc)
        (current,) = svc.router.registry.instances_of(series.board_id)  # created with the series (§15)
        assert live[0] == {series.board_id: series, plain.board_id: plain, current: live[0][current]}
        assert live[0][current].series == series.board_id
        await svc.close()
        with SegmentedFileLog.open(tmp_path / "log") as log:
            kinds = {rec[1]: rec[0] for _, rec in log.read_from(0)}
        assert kinds == {series.board_id: R.SERIES, plain.board_id: R.BOARD2, current: R.INSTANCE}
        for reopen in ("snapshots", "log only"):
            if reopen == "log only":
                drop_snapshots(tmp_path)
            svc = await open_service(tmp_path, 2)
            assert await specs(svc) == live, reopen
            await svc.close()

    run(go())


@pytest.mark.parametrize("n_shards", [2, 3])
def test_close_and_reopen_is_identical(tmp_path, n_shards):
    async def go():
        svc = await open_service(tmp_path, n_shards)
        w = Workload(seed=n_shards)
        await w.full(svc)
        live = await state_of(svc)
        outcomes = dict(svc.stats()["outcomes"])
        # the workload really exercised every path
        for o in (Outcome.DUPLICATE_IGNORED, Outcome.REJECTED_EVENT_ID_CONFLICT, Outcome.HELD_FOR_CORRECTION,
                  Outcome.HELD_FOR_REVIEW, Outcome.APPLIED, Outcome.APPLIED_NEW_BEST_TIME, Outcome.APPLIED_LATEST,
                  Outcome.REJECTED_NOT_LATEST):
            assert outcomes.get(o.value), o
        assert any(e.kind == "invalidation" for s in live.values() for h in s["history"].values() for e in h)
        assert any(e.kind == "decision" for s in live.values() for h in s["history"].values() for e in h)
        assert live["g:best1:s1"]["info"].state is BoardState.FROZEN
        await svc.close()

        svc = await open_service(tmp_path, n_shards)
        assert await state_of(svc) == live
        # admission state came back too: a redelivery is still a duplicate, a reuse a conflict
        ev = w.sent["g:best:s1"][0]
        other = ScoreEvent(ev.board_id, ev.event_id, ev.player_id, ev.value + 7, ev.achieved_at, ev.submitted_at)
        res = await svc.submit([ev, other])
        assert [r.outcome for r in res] == [Outcome.DUPLICATE_IGNORED, Outcome.REJECTED_EVENT_ID_CONFLICT]
        await svc.close()

    run(go())


def test_crash_without_close_is_identical(tmp_path):
    async def go():
        svc = await open_service(tmp_path, 3)
        await Workload(seed=11).full(svc)
        live = await state_of(svc)
        await crash(svc)  # no drain, no final snapshot: recovery replays the whole log
        assert not os.listdir(tmp_path / "snapshots")

        svc2 = await open_service(tmp_path, 3)
        assert await state_of(svc2) == live
        await svc2.close()

    run(go())


def test_snapshot_midway_then_tail_equals_full_replay(tmp_path):
    async def go():
        svc = await open_service(tmp_path, 3)
        w = Workload(seed=5)
        await w.create(svc)
        for r in range(3):
            await w.round(svc, r)
        await svc.snapshot()
        for r in range(3, 7):
            await w.round(svc, r)
        await svc.snapshot()
        for r in range(7, 9):
            await w.round(svc, r)
        live = await state_of(svc)
        await crash(svc)

        svc = await open_service(tmp_path, 3)  # newest snapshot + log tail
        assert await state_of(svc) == live
        await crash(svc)

        drop_snapshots(tmp_path)  # reference: replay of the whole log
        svc = await open_service(tmp_path, 3)
        assert await state_of(svc) == live
        await svc.close()

    run(go())


def test_latest_board_replays_to_the_same_checksum(tmp_path):
    """A latest board (docs/api.md §14) over 3 partitions: full timestamp ties
    decided on the event id, invalidations of row events falling back to
    older (rejected) events and to INVALIDATED, an old event ranking an
    invalidated player again, with a snapshot part way. Replaying the log
    alone, and the snapshot plus its tail, give the live checksum and rows."""
    board = "g:ladder:s1:global"

    async def go():
        svc = await open_service(tmp_path, 3)
        await svc.create_board(BoardSpec(board, Policy.LATEST, shards=3))
        first = [ScoreEvent(board, f"e{i:02d}", f"p{i % 5}", 100 + 7 * i % 13, i // 5, i // 5) for i in range(15)]
        tied = [ScoreEvent(board, f"e{i:02d}x", f"p{i % 5}", 50 + i, 2, 2) for i in range(10, 15)]  # ties e10..e14
        res = await svc.submit(first + tied)
        assert [r.outcome for r in res[15:]] == [Outcome.APPLIED_LATEST] * 5  # "e10x" > "e10"
        await svc.snapshot()
        res = await svc.submit([ScoreEvent(board, "e00y", "p0", 1, 0, 0)])  # older than p0's row
        assert res[0].outcome is Outcome.REJECTED_NOT_LATEST
        fell = await svc.invalidate(Invalidation(board, "e10x"))  # p0 falls back to e10
        assert (fell.status, fell.value) == (RowStatus.ACTIVE, first[10].value)
        for eid in ("e01", "e06", "e11", "e11x"):  # every event of p1
            last = await svc.invalidate(Invalidation(board, eid))
        assert last.status is RowStatus.INVALIDATED
        res = await svc.submit([ScoreEvent(board, "old-p1", "p1", 3, -5, -5)])
        assert res[0].outcome is Outcome.APPLIED_LATEST
        live = await state_of(svc, [board])
        assert (await svc.player(board, "p1")).value == 3
        await crash(svc)

        svc = await open_service(tmp_path, 3)  # snapshot + tail
        assert await state_of(svc, [board]) == live
        await crash(svc)
        drop_snapshots(tmp_path)
        svc = await open_service(tmp_path, 2)  # the log alone, on another shard count
        assert await state_of(svc, [board]) == live
        await svc.close()

    run(go())


@pytest.mark.parametrize("which", ["router", "shard-1", "all"])
def test_corrupt_newest_snapshot_falls_back(tmp_path, caplog, which):
    async def go():
        svc = await open_service(tmp_path, 3)
        w = Workload(seed=7)
        await w.create(svc)
        for r in range(4):
            await w.round(svc, r)
            await svc.snapshot()
        live = await state_of(svc)
        await svc.close()  # a final snapshot: the newest one, corrupted below

        snaps = tmp_path / "snapshots"
        names = ["router", "shard-0", "shard-1", "shard-2"] if which == "all" else [which]
        for name in names:
            newest = sorted(p for p in os.listdir(snaps) if p.startswith(name + "."))[-1]
            path = snaps / newest
            data = bytearray(path.read_bytes())
            data[len(data) // 2] ^= 0xFF
            path.write_bytes(bytes(data))
            if which == "all":  # every snapshot bad: full replay
                for p in os.listdir(snaps):
                    if p.startswith(name + "."):
                        (snaps / p).write_bytes(b"garbage")

        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="flowrank.log"):
            svc = await open_service(tmp_path, 3)
        assert any("skipping bad snapshot" in r.getMessage() for r in caplog.records)
        assert await state_of(svc) == live
        await svc.close()

    run(go())


# ------------------------------------------------------------ dead letters


def _poison(monkeypatch, event_id: str = "poison"):
    """Make applying the event ``event_id`` raise (a bug), until ``monkeypatch.undo()`` (the fix)."""
    real_apply = Partition.apply_columns

    def poisoned(self, cols, verdicts=None, *a, **kw):
        # only when it would reach the comparator: a duplicate or dead verdict is journalled
        if any(e == event_id and (verdicts is None or verdicts[i] == 0) for i, e in enumerate(cols.event_ids)):
            raise RuntimeError("boom on poison")
        return real_apply(self, cols, verdicts, *a, **kw)

    monkeypatch.setattr(Partition, "apply_columns", poisoned)


def _logged_dead_letters(data_dir) -> list:
    """Every dead-letter record of the data directory's log, as ``(record offset, DeadLetter)``."""
    with SegmentedFileLog.open(data_dir / "log") as event_log:
        return [(o, R.dead_letter_of(rec)) for o, rec in event_log.read_where(0, R.DEAD_LETTER_HEAD)]


def test_poison_event_is_dead_lettered_logged_and_replays_the_same_after_the_fix(tmp_path, monkeypatch):
    """A dead letter is a log record: once the bug is fixed, a restart from a
    snapshot taken before the poison (+ tail), from the close snapshot, and a
    full replay all skip the event and reach the live state; none logs it again."""
    _poison(monkeypatch)
    before_dir, crash_dir = tmp_path.parent / (tmp_path.name + "-before"), tmp_path.parent / (tmp_path.name + "-replay")

    async def go():
        svc = await open_service(tmp_path, 3)
        w = Workload(seed=3)
        await w.create(svc)
        await w.round(svc, 0)
        await svc.snapshot()  # a snapshot from before the poison: its tail holds it (kept alone in before_dir)
        poison = ScoreEvent("g:best:s1", "poison", "p1", 99, 1, 1)
        _before, results, after = await w.batch(svc, 20), await svc.submit([poison]), await w.batch(svc, 20)
        assert results[0].outcome is Outcome.DEAD_LETTERED
        assert any(r.outcome in APPLIED for r in after[1])  # kept ingesting
        dead = svc.stats()["dead_letters"]
        assert len(dead) == 1
        offset, board_id, event_id, error, row = dead[0]  # the row of a columnar record
        assert (board_id, event_id) == ("g:best:s1", "poison")
        assert "boom on poison" in error and "RuntimeError" in error
        hist = await svc.history("g:best:s1", "p1")
        assert [h.outcome for h in hist if h.event_id == "poison"] == [Outcome.DEAD_LETTERED.value]
        # a redelivery of the poison id is a duplicate (admission remembered it), not a second failure
        assert (await svc.submit([poison]))[0].outcome is Outcome.DUPLICATE_IGNORED
        await w.round(svc, 1)
        live = await state_of(svc)
        await svc.snapshot()
        copy_dir(tmp_path, crash_dir)
        await svc.close()
        copy_dir(tmp_path, before_dir)
        snaps = sorted(os.listdir(before_dir / "snapshots"))
        for name in snaps:  # keep only the oldest snapshot of each owner: taken before the poison
            if any(o.split(".")[0] == name.split(".")[0] and o < name for o in snaps):
                os.remove(before_dir / "snapshots" / name)
        assert len(os.listdir(before_dir / "snapshots")) == 4

        # the log holds one dead-letter record, after the record it names
        logged = _logged_dead_letters(tmp_path)
        assert [d for _, d in logged] == [R.DeadLetter("g:best:s1", offset, row, "poison", error)]
        assert logged[0][0] > offset
        with SegmentedFileLog.open(tmp_path / "log") as event_log:
            poison_rec = next(rec for o, rec in event_log.read_from(offset) if o == offset)
        assert R.columns_of(poison_rec)[0].event_ids[row] == "poison"

        monkeypatch.undo()  # the bug is fixed
        drop_snapshots(crash_dir)
        for where in (tmp_path, before_dir, crash_dir):  # close snapshot; before the poison + tail; whole log
            svc = await open_service(where, 3)
            assert await state_of(svc) == live, where
            assert svc.stats()["dead_letters"] == dead, where
            assert (await svc.submit([poison]))[0].outcome is Outcome.DUPLICATE_IGNORED
            await svc.close()
            assert [d for _, d in _logged_dead_letters(where)] == [logged[0][1]], where  # never logged twice

    run(go())


def test_a_dead_letter_replayed_before_it_was_logged_is_logged_once(tmp_path, monkeypatch):
    """A crash can come between the poison record and its dead-letter record:
    the replay (same bug) dead-letters it again and the next cycle logs it,
    once; a later restart with the same bug logs nothing more, and one with
    the fix reaches the same state."""
    from engine.router.ingest import Sequencer

    _poison(monkeypatch)
    real_log_dead_letters = Sequencer._log_dead_letters
    monkeypatch.setattr(Sequencer, "_log_dead_letters", lambda self, unlogged: None)  # the crash: never logged

    async def go():
        svc = await open_service(tmp_path, 3)
        w = Workload(seed=4)
        await w.create(svc)
        await w.round(svc, 0)
        results = await svc.submit([ScoreEvent("g:cum:s1", "poison", "p2", 5, 1, 1)])
        assert results[0].outcome is Outcome.DEAD_LETTERED
        await crash(svc)
        assert _logged_dead_letters(tmp_path) == []

        monkeypatch.setattr(Sequencer, "_log_dead_letters", real_log_dead_letters)
        svc = await open_service(tmp_path, 3)  # full replay, same bug: dead-lettered again, not logged yet
        dead = svc.stats()["dead_letters"]
        assert [d[2] for d in dead] == ["poison"]
        await w.round(svc, 1)  # the first cycle logs it
        await crash(svc)
        assert [d.event_id for _, d in _logged_dead_letters(tmp_path)] == ["poison"]

        svc = await open_service(tmp_path, 3)  # same bug again: skipped by the log's record, nothing new
        await w.round(svc, 2)
        live = await state_of(svc)
        await svc.close()
        assert len(_logged_dead_letters(tmp_path)) == 1

        monkeypatch.undo()
        drop_snapshots(tmp_path)
        svc = await open_service(tmp_path, 3)  # the fix, the whole log: the live state
        assert await state_of(svc) == live
        assert svc.stats()["dead_letters"] == dead
        await svc.close()

    run(go())


def test_dead_letter_index_scans_once_then_only_what_was_appended():
    """engine.runtime.recovery.DeadLetterIndex: the dead-letter records from any offset,
    the log read once from the lowest offset asked and then from where it stopped."""
    log = InMemoryLog()
    scans = []
    real = log.read_where
    log.read_where = lambda offset, head: scans.append(offset) or real(offset, head)  # type: ignore[method-assign]

    def dl(offset):
        return R.dead_letter_record(R.DeadLetter("b", offset, None, None, "x"))

    log.append_batch([[R.STATE, "b", "OPEN"], dl(0), [R.STATE, "b", "OPEN"], dl(2), dl(2)])
    index = DeadLetterIndex(log)
    assert [o for o, _ in index.since(2)] == [3, 4]
    assert [o for o, _ in index.since(4)] == [4] and scans == [2]  # nothing new: no read
    log.append_batch([[R.STATE, "b", "OPEN"], dl(5)])
    assert [o for o, _ in index.since(3)] == [3, 4, 6] and scans == [2, 5]  # only the appended part
    assert [o for o, _ in index.since(0)] == [1, 3, 4, 6] and scans == [2, 5, 0]  # lower: read again
    assert list(R.dead_letters_in(index.since(0))) == [(0, None), (2, None), (5, None)]


# ------------------------------------------------------------- disk faults


class DiskFault:
    """Fault hook: while ``on``, every log write fails with ENOSPC."""

    def __init__(self):
        self.on = False
        self.hits = 0

    def __call__(self, op, path):
        if self.on and op == "write":
            self.hits += 1
            raise OSError(errno.ENOSPC, "No space left on device")


def test_enospc_through_the_service(tmp_path):
    fault = DiskFault()

    async def go():
        svc = await open_service(tmp_path, 3, fault_hook=fault)
        w = Workload(seed=9)
        await w.create(svc)
        await w.round(svc, 0)
        await svc.set_state("g:best1:s1", BoardState.FROZEN)
        await w.batch(svc, 30)
        held = (await svc.quarantine("g:best1:s1"))[0]
        before = await state_of(svc)
        end = svc.stats()["log_end_offset"]

        fault.on = True
        fresh = [ScoreEvent("g:best:s1", f"new{i}", f"p{i % 5}", 50 + i, 1, 1) for i in range(10)]
        with pytest.raises(StorageUnavailable) as err:
            await svc.submit(fresh)
        assert err.value.status == 503 and err.value.code == "OVERLOADED"
        with pytest.raises(StorageUnavailable):
            await svc.decide(QuarantineDecision("g:best1:s1", held.event_id, "apply"))
        with pytest.raises(StorageUnavailable):
            await svc.set_state("g:best1:s1", BoardState.FINALIZED)
        assert fault.hits >= 3
        # nothing applied, nothing remembered; reads keep working during the fault
        assert await state_of(svc) == before
        assert svc.stats()["log_end_offset"] == end
        assert svc.stats()["storage_errors"] >= 3

        fault.on = False  # ingestion recovers by itself
        res = await svc.submit(fresh)
        assert all(r.outcome in APPLIED for r in res), res
        d = await svc.decide(QuarantineDecision("g:best1:s1", held.event_id, "apply"))
        assert d.decision == "apply"
        info = await svc.set_state("g:best1:s1", BoardState.FINALIZED)
        assert info.state is BoardState.FINALIZED
        await w.batch(svc, 30)
        live = await state_of(svc)
        await crash(svc)

        svc = await open_service(tmp_path, 3)
        assert await state_of(svc) == live
        await svc.close()

    run(go())


def test_lost_journal_files_replay_the_whole_log(tmp_path, caplog):
    """The journals are derived from the log: a snapshot whose journal files
    are gone (another machine, a wiped directory) is set aside for a replay
    of the whole log, which writes them again."""
    async def go():
        svc = await open_service(tmp_path, 3)
        await Workload(seed=21).full(svc)
        live = await state_of(svc)
        await svc.close()  # a final snapshot that names the journal files
        shutil.rmtree(tmp_path / "journal")
        with caplog.at_level(logging.WARNING, logger="flowrank.recovery"):
            svc = await open_service(tmp_path, 3)
        assert "journal is lost" in caplog.text
        assert await state_of(svc) == live
        await svc.close()
        svc = await open_service(tmp_path, 3)  # and the next start uses them again
        assert await state_of(svc) == live
        await svc.close()

    caplog.clear()
    run(go())


def test_dead_lettered_is_answered_only_once_its_record_is_durable(tmp_path, monkeypatch):
    """The dead-letter record's append fails (ENOSPC): the poison's submitter
    gets StorageUnavailable, not DEAD_LETTERED; the next cycle after the fault
    logs the dead letter once, and a replay with the fix reaches the live state."""
    _poison(monkeypatch)
    fault = DiskFault()

    async def go():
        svc = await open_service(tmp_path, 3, fault_hook=fault)
        w = Workload(seed=8)
        await w.create(svc)
        await w.round(svc, 0)

        def after_append(first, records):  # the poison is durable: the disk fills before its dead letter
            if any(r[0] in R.SCORE_BATCHES and "poison" in r[3] for r in records):
                fault.on = True

        svc.router.hooks["after_append"] = after_append
        poison = ScoreEvent("g:fast:s1", "poison", "p3", 5, 1, 1)
        with pytest.raises(StorageUnavailable):
            await svc.submit([poison])
        assert fault.hits >= 1 and _logged_dead_letters_open(svc) == []
        fault.on = False
        del svc.router.hooks["after_append"]
        assert (await svc.submit([poison]))[0].outcome is Outcome.DUPLICATE_IGNORED  # this cycle logs it
        await w.round(svc, 1)
        live = await state_of(svc)
        dead = svc.stats()["dead_letters"]
        await svc.close()
        assert [d.event_id for _, d in _logged_dead_letters(tmp_path)] == ["poison"]

        monkeypatch.undo()
        drop_snapshots(tmp_path)
        svc = await open_service(tmp_path, 3)
        assert await state_of(svc) == live
        assert svc.stats()["dead_letters"] == dead
        await svc.close()

    run(go())


def _logged_dead_letters_open(svc) -> list:
    """The dead-letter records of an open service's log."""
    return svc.event_log.read_where(0, R.DEAD_LETTER_HEAD)


def test_close_lets_go_of_every_file_under_the_data_dir(tmp_path):
    """Journal files, log segments and the lock: an in-process service that
    closed holds no descriptor of its data directory (each closed service
    used to keep its shards' journal files open: ~8,400 by the end of this
    folder's tests)."""

    def ours() -> list[str]:
        return [t for t in open_paths() if t.startswith(str(tmp_path))]

    async def go():
        svc = await open_service(tmp_path, 3)
        await Workload(seed=5).full(svc)
        assert ours()  # open while it runs
        await svc.close()
        again = await open_service(tmp_path, 3)  # and after a reopen from its snapshot
        await again.close()

    run(go())
    gc.collect()  # a mapped journal run holds a descriptor until its arrays are collected
    assert ours() == []

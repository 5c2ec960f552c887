"""Recovery exactness of a file-backed LocalService: clean close, crash
(no close), snapshot + tail, corrupt newest snapshot; poison events; disk
faults through the service. Every comparison is over everything a reader
sees: checksums, versions, full top lists, player views, histories and the
quarantine (``helpers.state_of``)."""

from __future__ import annotations

import errno
import logging
import os
import shutil

import pytest

from engine.errors import StorageUnavailable
from engine.model import BoardState, Outcome, QuarantineDecision, ScoreEvent
from engine.partition import Partition
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
                  Outcome.HELD_FOR_REVIEW, Outcome.APPLIED, Outcome.APPLIED_NEW_BEST_TIME):
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


def test_poison_event_is_dead_lettered_and_replays_the_same(tmp_path, monkeypatch):
    real_apply = Partition.apply_columns

    def poisoned(self, cols, verdicts=None, *a, **kw):
        # only when it would reach the comparator: a duplicate verdict is journalled
        if any(e == "poison" and (verdicts is None or verdicts[i] == 0) for i, e in enumerate(cols.event_ids)):
            raise RuntimeError("boom on poison")
        return real_apply(self, cols, verdicts, *a, **kw)

    monkeypatch.setattr(Partition, "apply_columns", poisoned)

    async def go():
        svc = await open_service(tmp_path, 3)
        w = Workload(seed=3)
        await w.create(svc)
        await w.round(svc, 0)
        poison = ScoreEvent("g:best:s1", "poison", "p1", 99, 1, 1)
        _before, results, after = await w.batch(svc, 20), await svc.submit([poison]), await w.batch(svc, 20)
        assert results[0].outcome is Outcome.DEAD_LETTERED
        assert any(r.outcome in APPLIED for r in after[1])  # kept ingesting
        dead = svc.stats()["dead_letters"]
        assert len(dead) == 1
        offset, board_id, event_id, error = dead[0][:4]  # + the row of a columnar record
        assert (board_id, event_id) == ("g:best:s1", "poison")
        assert "boom on poison" in error and "RuntimeError" in error
        hist = await svc.history("g:best:s1", "p1")
        assert all(h.event_id != "poison" or h.outcome == Outcome.DEAD_LETTERED.value for h in hist)
        # a redelivery of the poison id is a duplicate (admission remembered it), not a second failure
        assert (await svc.submit([poison]))[0].outcome is Outcome.DUPLICATE_IGNORED
        await w.round(svc, 1)
        live = await state_of(svc)
        copy_dir(tmp_path, tmp_path.parent / (tmp_path.name + "-replay"))
        await svc.close()

        svc = await open_service(tmp_path, 3)  # from the close snapshot
        assert await state_of(svc) == live
        assert [d[:3] for d in svc.stats()["dead_letters"]] == [[offset, "g:best:s1", "poison"]]
        await svc.close()

        replay_dir = tmp_path.parent / (tmp_path.name + "-replay")
        drop_snapshots(replay_dir)
        svc = await open_service(replay_dir, 3)  # full replay: dead-lettered again, same state
        assert await state_of(svc) == live
        assert [d[:3] for d in svc.stats()["dead_letters"]] == [[offset, "g:best:s1", "poison"]]
        await svc.close()

    run(go())


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

"""Router.export (docs/api.md §13): every ranked row at the version of its first
chunk, best first, whatever writes arrive and whatever the view cache evicts
meanwhile; checked against the brute-force oracle for every policy, 1 and 3
partitions, ties, non-ASCII ids and metadata. The version is pinned by spill
files on the shards (engine.core.export, engine.log.spill): they are gone once the
export ends, however it ends."""

from __future__ import annotations

import asyncio
import os
import random
import threading

import numpy as np
import pytest

from engine.core import export as export_mod
from engine.core import records as R
from engine.core import wire as W
from engine.core.columns import ScoreColumns
from engine.core.errors import BoardNotFound, StorageUnavailable, ValidationFailed
from engine.core.model import BoardSpec, BoardState, Invalidation, Policy, ScoreEvent
from engine.runtime import shard as shard_mod
from engine.runtime.local import LocalService
from engine.runtime.shard import ShardCore
from tests.open_files import open_paths
from tests import snapshot_paging as sp
from tests.engine import oracle

BOARD = "g:m:s:export"


@pytest.fixture
def loop():
    lp = asyncio.new_event_loop()
    yield lp
    lp.close()


def _spill_files(svc) -> list[str]:
    """Spill files still named in the shards' directories, and spill files this
    process still holds open (unlinked but not closed)."""
    named = [n for c in svc.cores if c.spill_dir and os.path.isdir(c.spill_dir) for n in os.listdir(c.spill_dir)]
    return named + [t for t in open_paths() if ".spill" in t]


def _entries(chunks) -> tuple[int, list]:
    versions = {c.version for c in chunks}
    assert len(versions) == 1, versions
    entries = [e for c in chunks for e in c.entries()]
    assert [e.rank for e in entries] == list(range(1, len(entries) + 1))
    return versions.pop(), entries


def test_export_chunks_stay_at_the_first_version_while_writes_arrive_and_the_cache_empties(loop):
    async def go():
        svc = await LocalService.open(data_dir=None, n_shards=3, delta_retention=50)
        try:
            await sp.open_board(svc, BOARD, shards=3)
            writer = sp.Writer(svc, BOARD, seed=13)
            await writer.load(20_000)
            chunks = svc.export(BOARD, 3_000)
            first = await chunks.__anext__()
            got, n = [first], 1
            async for chunk in chunks:
                await writer.step()  # rows move across chunks, new players arrive, one invalidation
                svc.router.views.clear()
                assert chunk.version == first.version and 0 < len(chunk) <= 3_000
                got.append(chunk)
                n += 1
            assert n >= 7 and len(first) == 3_000
            version, entries = _entries(got)
            sp.check_snapshot(writer, version, entries)
            assert (await svc.board(BOARD)).version > first.version
            assert _spill_files(svc) == []
        finally:
            await svc.close()

    loop.run_until_complete(go())


def _events(policy: Policy, board: str, seed: int, players: int, n: int) -> list[ScoreEvent]:
    """Few distinct values and times (long runs of equal keys: ties decided by id
    bytes across partitions), non-ASCII ids, metadata on some events."""
    rnd = random.Random(seed)
    names = [f"p{i}" for i in range(players // 2)] + [f"ü-{i}-✓" for i in range(players // 4)]
    names += [f"😀{i}" for i in range(players - len(names))]
    out = []
    for i in range(n):
        t = 1_000 + rnd.randrange(3)
        value = rnd.randrange(1, 6) * (1_000 if policy is Policy.FASTEST_TIME else 1)
        meta = rnd.choice([b"", b'{"k":1}', '{"n":"é✓"}'.encode()])
        out.append(ScoreEvent(board, f"e{i}", rnd.choice(names), value, t, t + rnd.randrange(2), meta))
    return out


@pytest.mark.parametrize("policy", list(Policy))
@pytest.mark.parametrize("parts", [1, 3])
def test_export_equals_the_oracle(loop, policy, parts):
    async def go():
        svc = await LocalService.open(data_dir=None, n_shards=2)
        try:
            board = f"g:m:s:{policy.value}{parts}"
            await svc.create_board(BoardSpec(board, policy, shards=parts))
            events = _events(policy, board, seed=parts, players=900, n=2_500)
            for a in range(0, len(events), 700):
                await svc.submit(events[a:a + 700])
            invalid = {events[5].event_id, events[77].event_id}
            for eid in invalid:
                await svc.invalidate(Invalidation(board, eid))
            rows = oracle.final_rows(policy, events, invalid)
            metas = oracle.final_metadata(policy, events, invalid)
            order = oracle.ranking(policy, rows)
            better = {pid: 1 + sum(1 for q in order if (rows[q][0] > rows[pid][0] if policy is not Policy.FASTEST_TIME
                                                       else rows[q][0] < rows[pid][0])) for pid in order}
            for ties in (False, True):
                version, entries = _entries([c async for c in svc.export(board, 97, ties=ties)])
                assert version == (await svc.board(board)).version
                assert [(e.player_id, e.value, e.achieved_at, e.metadata or b"") for e in entries] == [
                    (pid, rows[pid][0], rows[pid][1], metas[pid]) for pid in order]
                assert [e.tied_rank for e in entries] == ([better[pid] for pid in order] if ties else
                                                          [None] * len(order))
                assert any(e.tied_rank != e.rank for e in entries) or not ties
            assert _spill_files(svc) == []
        finally:
            await svc.close()

    loop.run_until_complete(go())


def test_export_of_an_empty_or_unknown_board(loop):
    async def go():
        svc = await LocalService.open(data_dir=None, n_shards=2)
        try:
            await sp.open_board(svc, BOARD, shards=2)
            got = [p async for p in svc.export(BOARD)]
            assert len(got) == 1 and got[0].version == 0 and len(got[0]) == 0 and got[0].entries() == []
            got = [p async for p in svc.export(BOARD, ties=True)]
            assert len(got) == 1 and got[0].tied_rank is not None and len(got[0].tied_rank) == 0
            with pytest.raises(BoardNotFound):
                await svc.export("g:m:s:none").__anext__()
            with pytest.raises(ValidationFailed):
                await svc.export(BOARD, 0).__anext__()
            assert _spill_files(svc) == []
        finally:
            await svc.close()

    loop.run_until_complete(go())


async def _loaded(n_shards: int = 3, data_dir=None, **kw) -> tuple[LocalService, sp.Writer]:
    svc = await LocalService.open(data_dir=data_dir, n_shards=n_shards, **kw)
    await sp.open_board(svc, BOARD, shards=3)
    writer = sp.Writer(svc, BOARD, seed=5)
    await writer.load(6_000)
    return svc, writer


def test_spill_files_are_gone_when_the_reader_stops_midway_or_the_export_fails(loop, monkeypatch):
    async def go():
        svc, _ = await _loaded()
        try:
            chunks = svc.export(BOARD, 500)
            await chunks.__anext__()
            assert _spill_files(svc) != []  # held open (names already removed) while the export runs
            await chunks.aclose()  # a client that went away
            assert _spill_files(svc) == []

            calls = {"n": 0}
            real = export_mod.Merge.take

            def failing(self):
                calls["n"] += 1
                if calls["n"] == 3:
                    raise OSError("disk gone")
                return real(self)

            monkeypatch.setattr(export_mod.Merge, "take", failing)
            with pytest.raises(OSError):
                async for _ in svc.export(BOARD, 500):
                    pass
            assert calls["n"] == 3 and _spill_files(svc) == []
        finally:
            await svc.close()

    loop.run_until_complete(go())


def test_frames_asked_of_the_shards_when_the_files_cannot_be_opened(loop):
    """A gateway on another node than a shard reads its spill file through the
    shard (one read per block); the export is the same and the files go."""
    async def go():
        svc, writer = await _loaded()
        try:
            local = [c async for c in svc.export(BOARD, 700, ties=True)]
            svc.router.cfg.export_read_files = False
            chunks = svc.export(BOARD, 700, ties=True)
            first = await chunks.__anext__()
            await writer.step()
            remote = [first] + [c async for c in chunks]
            assert _entries(remote) == _entries(local)
            assert _spill_files(svc) == []
            chunks = svc.export(BOARD, 700)
            await chunks.__anext__()
            assert _spill_files(svc) != []  # still on the shards
            await chunks.aclose()
            assert _spill_files(svc) == []
        finally:
            await svc.close()

    loop.run_until_complete(go())


def test_spill_directory_under_the_data_dir_and_stale_files_go_at_start(loop, tmp_path):
    async def go():
        svc, writer = await _loaded(data_dir=str(tmp_path))
        chunks = svc.export(BOARD, 1_000)
        await chunks.__anext__()
        assert svc.cores[0].spill_dir == str(tmp_path / "spill" / "shard-0")
        await chunks.aclose()
        await svc.close()
        stale = tmp_path / "spill" / "shard-1" / "deadbeef-0.spill"
        stale.write_bytes(b"left by a crash")
        svc = await LocalService.open(data_dir=str(tmp_path), n_shards=3)
        try:
            assert not stale.exists()
            version, entries = _entries([c async for c in svc.export(BOARD, 1_000)])
            sp.check_snapshot(writer, version, entries)
        finally:
            await svc.close()

    loop.run_until_complete(go())


def test_an_archived_board_exports_from_its_archive(loop, tmp_path):
    async def go():
        svc, writer = await _loaded(data_dir=str(tmp_path))
        try:
            before = _entries([c async for c in svc.export(BOARD, 999, ties=True)])
            for s in (BoardState.FROZEN, BoardState.FINALIZED, BoardState.ARCHIVED):
                await svc.set_state(BOARD, s)
            after = _entries([c async for c in svc.export(BOARD, 999, ties=True)])
            assert after == before and all(not os.listdir(c.spill_dir) for c in svc.cores)
        finally:
            await svc.close()

    loop.run_until_complete(go())


def _held_spill_writes(monkeypatch):
    """Spill writes that wait on the shards' spill threads until released: ``(entered, release)``."""
    entered, release = threading.Event(), threading.Event()
    real = shard_mod.write_spill

    def held(path, token, rows, blocks):
        entered.set()
        assert release.wait(30), "the test never released the spill write"
        return real(path, token, rows, blocks)

    monkeypatch.setattr(shard_mod, "write_spill", held)
    return entered, release


def test_spill_files_are_written_on_the_shards_spill_threads_while_batches_and_reads_go_on(loop, monkeypatch):
    """Issue 29 item 2: the cut is a copy on the request thread; the file is
    written on the spill thread. While every write is held there, batches are
    acknowledged and reads answered, and the export still holds the rows of
    its cut, not of the batches applied after it."""
    async def go():
        svc, writer = await _loaded()
        try:
            entered, release = _held_spill_writes(monkeypatch)
            chunks = svc.export(BOARD, 700)
            first = asyncio.ensure_future(chunks.__anext__())
            while not entered.is_set():
                await asyncio.sleep(0.005)
            for _ in range(3):
                await asyncio.wait_for(writer.step(), 10)  # applied while the spill is written
                await asyncio.wait_for(svc.top(BOARD, 0, 10), 10)
            assert not first.done()  # the export waits for its files, not the shards for the export
            release.set()
            got = [await first] + [c async for c in chunks]
            version, entries = _entries(got)
            sp.check_snapshot(writer, version, entries)
            assert (await svc.board(BOARD)).version > version
            assert _spill_files(svc) == [] and not any(c._spills for c in svc.cores)
        finally:
            await svc.close()

    loop.run_until_complete(go())


def test_a_spill_that_fails_on_the_spill_thread_fails_the_export_and_leaves_no_file(loop, monkeypatch):
    async def go():
        svc, _ = await _loaded()
        try:
            real = shard_mod.write_spill
            calls = {"n": 0}

            def failing(path, token, rows, blocks):
                calls["n"] += 1
                if calls["n"] == 2:
                    def broken(given):
                        yield next(iter(given))
                        raise OSError("disk full")
                    blocks = broken(blocks)
                return real(path, token, rows, blocks)

            monkeypatch.setattr(shard_mod, "write_spill", failing)
            with pytest.raises(StorageUnavailable, match="disk full"):
                async for _ in svc.export(BOARD, 500):
                    pass
            assert calls["n"] >= 2 and _spill_files(svc) == [] and not any(c._spills for c in svc.cores)
            monkeypatch.setattr(shard_mod, "write_spill", real)
            got = [c async for c in svc.export(BOARD, 2_000)]  # the next export is whole
            assert sum(len(c) for c in got) == (await svc.board(BOARD)).size
        finally:
            await svc.close()

    loop.run_until_complete(go())


def test_a_spill_dropped_while_its_write_runs_leaves_no_file(monkeypatch, tmp_path):
    """A router that gives up on a cut (its shards answered from different
    offsets, or the client went) drops the token while the spill thread writes."""
    core = ShardCore(0, 1)
    core.use_spill_dir(str(tmp_path))
    events = [ScoreEvent("b", f"e{i}", f"p{i}", i, i, i) for i in range(500)]
    core.apply(1, [[0, R.board_record(BoardSpec("b", Policy.BEST_SCORE, 2))],
                   [1, R.scores_record(ScoreColumns.from_events(events), 0, np.zeros(500, np.uint8))]])
    entered, release = _held_spill_writes(monkeypatch)
    got = core.read([list(W.Spill(W.SPILL, "b", "tok", 64))])
    files = [W.SpillFile._make(f) for f in got.replies[0].value]
    assert sorted(f.partition for f in files) == [0, 1] and sum(f.rows for f in files) == 500
    assert entered.wait(10) and core.read([list(W.SpillDrop(W.SPILL_WAIT, "b", "tok"))]).replies[0].value is None
    core.read([list(W.SpillDrop(W.SPILL_DROP, "b", "tok"))])
    release.set()
    core.close_spills()  # waits for the spill thread
    assert os.listdir(tmp_path) == []
    assert "unknown" in core.read([list(W.SpillDrop(W.SPILL_WAIT, "b", "tok"))]).replies[0].value


def test_reads_are_answered_between_the_chunks_of_an_export(loop):
    """Reading a spill file never suspends: the export lets the event loop in
    between chunks, so a read that arrives while an export streams is not
    queued behind the whole export (issue 29 item 2)."""
    async def go():
        svc, _ = await _loaded()
        try:
            chunks = svc.export(BOARD, 100)
            await chunks.__anext__()
            seen = {"chunks": 1, "read_after": None}

            async def read():
                await svc.top(BOARD, 0, 10)
                seen["read_after"] = seen["chunks"]

            task = asyncio.ensure_future(read())
            async for _ in chunks:
                seen["chunks"] += 1
            await task
            assert seen["chunks"] >= 60 and seen["read_after"] < seen["chunks"] // 2
        finally:
            await svc.close()

    loop.run_until_complete(go())

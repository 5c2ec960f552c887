"""ARCHIVED boards through the service (docs/api.md §13, archive): every read
answers the same before and after archiving, each player's event history
included (invalidation marks and metadata too), after a restart from
snapshots and after a replay of the whole log; the shards no longer hold the
board's partitions (nor their journal files, nor in their snapshots); a crash
in the middle of archiving is finished at the next start; writes stay
refused, and events held after the move to ARCHIVED stay out of the history
whether or not the archive is written yet."""

from __future__ import annotations

import os

import pytest

from engine.core.errors import FlowRankError, InvalidTransition, PlayerNotFound, PlayerNotRanked
from engine.core.model import BoardState, Invalidation, Outcome, ScoreEvent
from tests.service.helpers import SPECS, Workload, copy_dir, crash, drop_snapshots, open_service, run

BOARDS = [s.board_id for s in SPECS]
PLAYERS = [f"p{i}" for i in range(14)] + ["nobody"]


async def reads_of(svc, board_id: str) -> dict:
    """Every read a client can make of a board, as comparable data."""
    out: dict = {"info": await svc.board(board_id), "checksum": await svc.checksum(board_id),
                 "quarantine": await svc.quarantine(board_id)}
    for ties in (False, True):
        out[("top", ties)] = [await svc.top(board_id, off, 3, ties=ties) for off in range(0, 15, 3)]
        out[("subset", ties)] = await svc.ranked_subset(board_id, PLAYERS[::2] + ["p1", "nobody"], ties=ties)
        for pid in PLAYERS:
            for what, call in (("player", lambda: svc.player(board_id, pid, ties=ties)),
                               ("around", lambda: svc.around(board_id, pid, 2, ties=ties))):
                try:
                    out[(what, pid, ties)] = await call()
                except (PlayerNotFound, PlayerNotRanked) as exc:
                    out[(what, pid, ties)] = exc.code
        pages, cursor = [], None
        while True:
            ch = await svc.changes(board_id, 0 if cursor is None else None, limit=4, cursor=cursor, ties=ties)
            pages.append(ch if ch.kind == "snapshot" else ("deltas", ch.version))
            cursor = ch.next_cursor if ch.kind == "snapshot" else None
            if cursor is None:
                break
        out[("changes", ties)] = pages
        chunks = [c async for c in svc.export(board_id, page_rows=5, ties=ties)]
        out[("export", ties)] = ({c.version for c in chunks}, [e for c in chunks for e in c.entries()])
    for pid in PLAYERS:
        out[("history", pid)] = await svc.history(board_id, pid)
    for pid in PLAYERS:
        try:
            approx = await svc.approximate_player(board_id, pid)
            out[("approx", pid)] = (approx.rank is None, approx.version, approx.value)
        except PlayerNotFound as exc:
            out[("approx", pid)] = exc.code
    return out


async def archive_all(svc) -> None:
    for b in BOARDS:
        state = (await svc.board(b)).state
        for s in (BoardState.FROZEN, BoardState.FINALIZED, BoardState.ARCHIVED):
            if [BoardState.OPEN, BoardState.FROZEN, BoardState.FINALIZED, BoardState.ARCHIVED].index(s) > \
                    [BoardState.OPEN, BoardState.FROZEN, BoardState.FINALIZED, BoardState.ARCHIVED].index(state):
                await svc.set_state(b, s)


def assert_dropped(svc, results: bool = True) -> None:
    for core in svc.cores:
        for b in BOARDS:
            assert b not in core.parts, (core.index, b)
            if results:  # nor cached batch results (a held event after the drop caches its own)
                assert b not in core._result_board.values(), (core.index, b)
    journal = os.path.join(svc.cfg.data_dir, "journal")
    left = [d for _, dirs, _ in os.walk(journal) for d in dirs if not d.startswith("shard-")]
    assert left == [], left


async def written(tmp_path, seed=7):
    data = tmp_path / "data"
    svc = await open_service(data, delta_retention=5)
    w = Workload(seed)
    await w.full(svc, rounds=5)
    before = {b: await reads_of(svc, b) for b in BOARDS}
    return data, svc, w, before


def test_every_read_answers_the_same_after_archiving_and_after_restarts(tmp_path):
    async def go():
        data, svc, w, before = await written(tmp_path)
        rows_before = sum(len(p) for c in svc.cores for ps in c.parts.values() for p in ps.values())
        assert rows_before > 0
        await archive_all(svc)
        assert_dropped(svc)
        after = {b: await reads_of(svc, b) for b in BOARDS}
        for b in BOARDS:
            assert after[b].pop("info").state is BoardState.ARCHIVED
            before[b].pop("info")
            assert after[b] == before[b], b
        # rows with metadata (docs/api.md §13) answer it from the archive too
        assert any(e.metadata for b in BOARDS for page in after[b][("top", False)] for e in page.entries)
        # so does the history: events with metadata, invalidated ones, audits, held events, conflicts
        hist = [h for b in BOARDS for k, v in after[b].items() if k[0] == "history" for h in v]
        assert len(hist) > 100 and any(h.metadata for h in hist) and any(h.invalidated for h in hist)
        assert {h.kind for h in hist} == {"score", "invalidation", "decision"}
        assert {"DUPLICATE_IGNORED", "REJECTED_EVENT_ID_CONFLICT", "HELD_FOR_CORRECTION"} <= {h.outcome for h in hist}
        assert any(getattr(v, "metadata", None) for b in BOARDS for k, v in after[b].items() if k[0] == "player")
        await svc.snapshot()
        for core_state in (svc.store.load_latest(f"shard-{i}")[1] for i in range(len(svc.cores))):
            assert [p for p in core_state["parts"] if p[0] in BOARDS] == []  # no rows in the snapshots
        await svc.close()
        copy_dir(data, tmp_path / "replay")
        drop_snapshots(tmp_path / "replay")
        for where in (data, tmp_path / "replay"):  # snapshot + tail, then the whole log
            svc = await open_service(where, delta_retention=5)
            try:
                assert_dropped(svc)
                again = {b: await reads_of(svc, b) for b in BOARDS}
                for b in BOARDS:
                    assert again[b].pop("info").state is BoardState.ARCHIVED
                    assert again[b] == before[b], (where, b)
            finally:
                await svc.close()

    run(go())


def test_writes_stay_refused_and_the_history_stops_at_the_move_to_archived(tmp_path):
    async def go():
        data, svc, w, before = await written(tmp_path, seed=3)
        try:
            await archive_all(svc)
            b = BOARDS[0]
            history = {pid: await svc.history(b, pid) for pid in PLAYERS}
            version = (await svc.board(b)).version
            res = await svc.submit([ScoreEvent(b, "late-1", "p1", 10**6, 5, 5)])
            assert res[0].outcome is Outcome.HELD_FOR_CORRECTION and res[0].version == version
            assert [h.event_id for h in await svc.quarantine(b)][-1] == "late-1"
            with pytest.raises(InvalidTransition):
                await svc.invalidate(Invalidation(b, w.applied[b][0], "cheat", "mod"))
            with pytest.raises(InvalidTransition):
                await svc.set_state(b, BoardState.OPEN)
            assert {pid: await svc.history(b, pid) for pid in PLAYERS} == history  # the held event is not in it
            assert (await svc.board(b)).version == version
            assert svc.stats()["dead_letters"] == []
            assert_dropped(svc, results=False)
        finally:
            await svc.close()

    run(go())


@pytest.mark.parametrize("stage", ["archive.write", "archive.fsync", "archive.rename", "archive.dirsync"])
def test_a_crash_while_archiving_is_finished_at_the_next_start(tmp_path, stage):
    failing = {"on": False}

    def hook(where: str, path: str) -> None:
        if failing["on"] and where == stage:
            raise OSError(f"injected at {where}")

    async def go():
        data = tmp_path / "data"
        svc = await open_service(data, delta_retention=5, fault_hook=hook)
        w = Workload(11)
        await w.full(svc, rounds=4)
        b = BOARDS[0]
        before = await reads_of(svc, b)
        for s in (BoardState.FROZEN, BoardState.FINALIZED):
            if (await svc.board(b)).state is not s:
                await svc.set_state(b, s)
        failing["on"] = True
        info = await svc.set_state(b, BoardState.ARCHIVED)  # durable; the archive failed
        assert info.state is BoardState.ARCHIVED
        assert any(b in c.parts for c in svc.cores)  # nothing dropped: reads still come from the shards
        now = await reads_of(svc, b)
        now.pop("info")
        assert now == {k: v for k, v in before.items() if k != "info"}
        # held after the move to ARCHIVED: in the quarantine, not in the history (nor after the restart)
        res = await svc.submit([ScoreEvent(b, "late-x", "p1", 10**6, 5, 5, b'{"late":1}')])
        assert res[0].outcome is Outcome.HELD_FOR_CORRECTION
        assert await svc.history(b, "p1") == before[("history", "p1")]
        before["quarantine"] = await svc.quarantine(b)
        assert before["quarantine"][-1].event_id == "late-x"
        await crash(svc)
        failing["on"] = False
        svc = await open_service(data, delta_retention=5, fault_hook=hook)
        try:
            assert all(b not in c.parts for c in svc.cores)
            assert svc.router.boards[b].archive is not None
            again = await reads_of(svc, b)
            assert again.pop("info").state is BoardState.ARCHIVED
            assert again == {k: v for k, v in before.items() if k != "info"}
            assert not list((data / "archives").glob("*.tmp"))
        finally:
            await svc.close()

    run(go())


def test_in_memory_service_archives_too():
    async def go():
        from engine.runtime.local import LocalService

        svc = await LocalService.open(n_shards=3)
        try:
            w = Workload(5)
            await w.full(svc, rounds=3)
            before = {b: await reads_of(svc, b) for b in BOARDS}
            await archive_all(svc)
            for b in BOARDS:
                after = await reads_of(svc, b)
                after.pop("info"), before[b].pop("info")
                assert after == before[b]
                assert all(b not in c.parts for c in svc.cores)
        finally:
            await svc.close()

    run(go())


def test_a_lost_archive_after_the_drop_refuses_to_invent_an_empty_board(tmp_path):
    async def go():
        data, svc, w, before = await written(tmp_path, seed=9)
        await archive_all(svc)
        await svc.close()  # the closing snapshot holds no rows for the archived boards
        for f in (data / "archives").iterdir():
            f.unlink()
        with pytest.raises(FlowRankError):
            svc = await open_service(data, delta_retention=5)
            await svc.close()

    run(go())


def test_an_archive_without_history_answers_every_other_read_and_history_410(monkeypatch):
    """A board archived by a FlowRank from before the history sections (archive
    format 1, rows only): every other read still answers from it; the
    history is 410 BOARD_ARCHIVED, as it was then."""
    import engine.router.control as control_mod
    from engine.core.errors import BoardArchived
    from engine.runtime.local import LocalService

    real = control_mod.encode
    monkeypatch.setattr(control_mod, "encode", lambda b, p, v, rows, history=None: real(b, p, v, rows))

    async def go():
        svc = await LocalService.open(n_shards=2)
        try:
            w = Workload(4)
            await w.full(svc, rounds=2)
            b = BOARDS[0]
            top = await svc.top(b, 0, 5)
            await archive_all(svc)
            assert svc.router.boards[b].archive.hist is None
            assert await svc.top(b, 0, 5) == top
            with pytest.raises(BoardArchived) as exc:
                await svc.history(b, "p1")
            assert exc.value.status == 410
        finally:
            await svc.close()

    run(go())

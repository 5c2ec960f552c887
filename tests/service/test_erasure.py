"""Erasure (docs/api.md §17) through a file-backed LocalService at 1 and 3 partitions.

From the erasure on, every read excludes the player (ranks close up, one version step and an ERASED
delta per board where they were ranked); a redelivery of their events is still a duplicate; once the
job reports the erasure complete no file under the data directory holds the player id or their events'
ids; and a restart (snapshot + tail, then the log alone) reproduces the live checksums. A crash before
each step of the job is finished by the next start.
"""

from __future__ import annotations

import asyncio
import os

import pytest

from engine.core.errors import ErasureNotFound, PlayerNotFound
from engine.core.model import BoardState, Invalidation, Outcome, RowStatus, ScoreEvent
from engine.runtime.erasure import STEPS
from tests.service.helpers import SPECS, Workload, crash, drop_snapshots, open_service, run

VICTIM = "victim-Zq9x"
ARCHIVED = "g:best1:s1"
OTHER = "other-Wk4y"


def _victim_events(board_ids: list[str], who: str, tag: str) -> list[ScoreEvent]:
    out = []
    for k, b in enumerate(board_ids):
        for j in range(3):
            meta = b'{"nick":"%s-%d"}' % (who.encode(), j) if j != 1 else b""
            out.append(ScoreEvent(b, f"{tag}-{k}-{j}", who, 3 + j, 1 + j, 2 + j, meta))
    return out


async def _scenario(svc, seed: int = 5) -> tuple[Workload, list[ScoreEvent]]:
    w = Workload(seed)
    await w.create(svc)
    boards = [s.board_id for s in SPECS]
    mine = _victim_events(boards, VICTIM, "vev-Hq2") + _victim_events(boards, OTHER, "oev-Jr5")
    for r in range(4):
        await w.batch(svc, 30)
        if r == 1:
            got = await svc.submit(mine)
            assert all(g.outcome is not Outcome.REJECTED_EVENT_ID_CONFLICT for g in got)
        if r == 2:
            await svc.invalidate(Invalidation("g:best:s1", "vev-Hq2-0-2", "cheat", "mod"))
    for state in (BoardState.FROZEN, BoardState.FINALIZED, BoardState.ARCHIVED):  # its archive holds the player
        await svc.set_state(ARCHIVED, state)
    assert svc.router.boards[ARCHIVED].archive is not None
    return w, mine


async def _all_views(svc, players) -> dict:
    out = {}
    for b in sorted(svc.router.boards):
        out[b] = ((await svc.checksum(b)), (await svc.top(b, 0, 1000)).entries)
    return out


def _files_holding(root, needles: list[bytes]) -> list[str]:
    bad = []
    for dirpath, _, names in os.walk(root):
        for name in names:
            path = os.path.join(dirpath, name)
            with open(path, "rb") as f:
                data = f.read()
            for n in needles:
                if n in data:
                    bad.append(f"{path}: {n!r}")
    return bad


async def _complete(svc, erasure_id: str, timeout: float = 30.0) -> None:
    for _ in range(int(timeout / 0.05)):
        if (await svc.erasure(erasure_id)).status == "complete":
            return
        await asyncio.sleep(0.05)
    raise AssertionError("erasure not complete")


@pytest.mark.parametrize("n_shards", [1, 3])
def test_erasure_forgets_everywhere_and_replays(tmp_path, n_shards):
    async def go():
        d = tmp_path / "d"
        svc = await open_service(d, n_shards)
        svc.erasure_job.delay_s = 0.0
        _, mine = await _scenario(svc)
        await svc.snapshot()  # a snapshot holding the player, which the job must delete
        boards = sorted(svc.router.boards)
        before = {b: await svc.board(b) for b in boards}
        tops = {b: (await svc.top(b, 0, 1000)).entries for b in boards}
        ranked = {b for b in boards if any(e.player_id == VICTIM for e in tops[b])}
        assert ranked

        got = await svc.erase_player(VICTIM)
        assert got.player_id == VICTIM and set(got.boards) == set(boards)
        for b in boards:
            info = await svc.board(b)
            assert info.version == before[b].version + (b in ranked)
            with pytest.raises(PlayerNotFound):
                await svc.player(b, VICTIM)
            assert await svc.history(b, VICTIM) == []
            expect = [e.player_id for e in tops[b] if e.player_id != VICTIM]
            page = (await svc.top(b, 0, 1000)).entries
            assert [e.player_id for e in page] == expect
            assert [e.rank for e in page] == list(range(1, len(page) + 1))
            if b in ranked and b != ARCHIVED:  # an archived board serves no deltas
                ch = await svc.changes(b, info.version - 1)
                assert ch.kind == "deltas" and ch.deltas[-1].changes[0].status is RowStatus.ERASED
                assert ch.deltas[-1].changes[0].player_id == VICTIM
                assert (await svc.changes(b, before[b].version - 1)).kind == "snapshot"
        # a redelivery is still a duplicate, other content a conflict, and nothing comes back
        again = await svc.submit([mine[0], ScoreEvent(mine[1].board_id, mine[1].event_id, VICTIM, 99, 1, 2)])
        assert [a.outcome for a in again] == [Outcome.DUPLICATE_IGNORED, Outcome.REJECTED_EVENT_ID_CONFLICT]
        with pytest.raises(PlayerNotFound):
            await svc.player_data(VICTIM)
        with pytest.raises(PlayerNotFound):
            await svc.erase_player(VICTIM)
        with pytest.raises(ErasureNotFound):
            await svc.erasure("nope")

        await _complete(svc, got.erasure_id)
        status = await svc.erasure(got.erasure_id)
        assert status.completed_at is not None and status.completed_at >= status.requested_at
        for b in ranked - {ARCHIVED}:  # the ERASED delta no longer names the player
            info = await svc.board(b)
            assert (await svc.changes(b, info.version - 1)).kind == "snapshot"
        live = await _all_views(svc, None)
        await svc.close()
        needles = [VICTIM.encode()] + [e.event_id.encode() for e in mine if e.player_id == VICTIM]
        assert _files_holding(d, needles) == []
        assert _files_holding(d, [OTHER.encode()])  # the other player is still there

        svc = await open_service(d, n_shards)  # snapshot + tail
        assert await _all_views(svc, None) == live
        assert (await svc.erasure(got.erasure_id)).status == "complete"
        await crash(svc)
        drop_snapshots(d)
        svc = await open_service(d, n_shards)  # the log alone, from its first segment
        assert await _all_views(svc, None) == live
        again = await svc.submit([mine[0]])
        assert again[0].outcome is Outcome.DUPLICATE_IGNORED
        await svc.close()

    run(go())


@pytest.mark.parametrize("step", STEPS)
def test_a_crash_at_any_step_is_finished_by_the_next_start(tmp_path, step):
    async def go():
        d = tmp_path / "d"
        svc = await open_service(d, 3)
        svc.erasure_job.delay_s = 0.0
        _, mine = await _scenario(svc)
        await svc.snapshot()

        def fault(name: str) -> None:
            if name == step:
                raise RuntimeError(f"crash before {name}")

        svc.erasure_job.fault = fault
        got = await svc.erase_player(VICTIM)
        live = await _all_views(svc, None)
        for _ in range(100):  # the job ran into the fault (it retries: stop it there)
            if svc.erasure_job.runs == 0 and not svc.erasure_job.running:
                await asyncio.sleep(0.02)
            break
        await asyncio.sleep(0.3)
        await svc.erasure_job.stop()
        assert (await svc.erasure(got.erasure_id)).status == "pending"
        await crash(svc)
        needles = [VICTIM.encode()] + [e.event_id.encode() for e in mine if e.player_id == VICTIM]
        if STEPS.index(step) <= STEPS.index("log"):  # the log still names the player: the start must finish
            assert _files_holding(d / "log", needles)
        svc = await open_service(d, 3)
        svc.erasure_job.delay_s = 0.0
        assert await _all_views(svc, None) == live
        await _complete(svc, got.erasure_id)
        assert await _all_views(svc, None) == live
        await svc.close()
        assert _files_holding(d, needles) == []
        drop_snapshots(d)
        svc = await open_service(d, 3)
        assert await _all_views(svc, None) == live
        await svc.close()

    run(go())


def test_a_big_archive_is_rewritten_in_the_helper_process(tmp_path):
    """An archive of at least ``awards_process_rows`` rows is rewritten in the router's helper process (its
    CPU and GIL out of the serving one): the same answers as in-process."""
    async def go():
        d = tmp_path / "d"
        svc = await open_service(d, 3)
        svc.erasure_job.delay_s = 0.0
        await _scenario(svc)
        svc.router.cfg.awards_process_rows = 1
        before = (await svc.top(ARCHIVED, 0, 1000)).entries
        info = await svc.board(ARCHIVED)
        await svc.erase_player(VICTIM)
        assert svc.router.control._helper is not None  # the helper did it
        page = (await svc.top(ARCHIVED, 0, 1000)).entries
        assert [e.player_id for e in page] == [e.player_id for e in before if e.player_id != VICTIM]
        assert (await svc.board(ARCHIVED)).version == info.version + 1
        live = await svc.checksum(ARCHIVED)
        await svc.close()
        svc = await open_service(d, 3)
        assert await svc.checksum(ARCHIVED) == live
        with pytest.raises(PlayerNotFound):
            await svc.player(ARCHIVED, VICTIM)
        await svc.close()

    run(go())

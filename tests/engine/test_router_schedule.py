"""Scheduled season close through the router (docs/api.md §13), with a fake
wall clock: the close lands at one log position, exactly like an admin's
FROZEN; it survives restarts, and a server that was down when it fell due
performs it at start, at the log position it has then."""

from __future__ import annotations

import asyncio

import pytest

from engine.core import records as R
from engine.core.errors import BoardExists, BoardNotFound, ValidationFailed
from engine.core.model import BoardSpec, BoardState, Outcome, Policy, ScoreEvent
from engine.runtime.local import LocalService
from tests.service.helpers import crash

BOARD = "arena-clash:solo:S7:global"
T = 1_793_527_500_000  # closes_at: 2026-11-01T10:05:00Z
AFTER_S = 60


class FakeClock:
    def __init__(self, now: int):
        self.now = now

    def __call__(self) -> int:
        return self.now


def run(coro):
    return asyncio.run(coro)


def ev(i: int, player: str = "p-a", value: int | None = None) -> ScoreEvent:
    return ScoreEvent(BOARD, f"e{i}", player, i if value is None else value, T - 1000, T - 1000)


def spec(**kw) -> BoardSpec:
    kw.setdefault("closes_at", T)
    kw.setdefault("finalize_after_s", AFTER_S)
    return BoardSpec(BOARD, Policy.BEST_SCORE, shards=kw.pop("shards", 2), **kw)


async def open_svc(clock: FakeClock, data_dir=None) -> LocalService:
    return await LocalService.open(data_dir=None if data_dir is None else str(data_dir), n_shards=2,
                                   wall_clock=clock, snapshot_every_events=10**9, snapshot_every_seconds=10**9)


def state_records(svc: LocalService) -> list[tuple[int, str]]:
    """(offset, state) of every STATE record of BOARD in the log."""
    return [(o, rec[2]) for o, rec in svc.event_log.read_from(0) if rec[0] == R.STATE and rec[1] == BOARD]


def score_offsets(svc: LocalService) -> dict[str, int]:
    """event id -> offset of the record that logged it."""
    return {e.event_id: o for o, rec in svc.event_log.read_from(0) for e, _ in R.logged_events(rec)}


def test_the_close_lands_at_one_log_position_between_two_batches():
    """Batches queued before the scheduled close apply, batches after it are
    held for correction, as around an admin's freeze; one STATE record."""
    async def go():
        clock = FakeClock(T - 5_000)
        svc = await open_svc(clock)
        try:
            info = await svc.create_board(spec())
            assert (info.state, info.closes_at, info.finalize_after_s) == (BoardState.OPEN, T, AFTER_S)
            assert (await svc.submit([ev(1)]))[0].outcome is Outcome.APPLIED_FIRST_SCORE
            assert await svc.router.close_due() == T  # not yet: the next wake-up is closes_at
            assert state_records(svc) == []
            clock.now = T
            # one event-loop turn: batch A, the schedule, batch B queue in that order
            a = asyncio.ensure_future(svc.submit([ev(2, "p-b"), ev(3, "p-c")]))
            due = asyncio.ensure_future(svc.router.close_due())
            b = asyncio.ensure_future(svc.submit([ev(4, "p-d"), ev(5, "p-a", 99)]))
            ra, wake, rb = await asyncio.gather(a, due, b)
            assert [r.outcome for r in ra] == [Outcome.APPLIED_FIRST_SCORE] * 2
            assert [r.outcome for r in rb] == [Outcome.HELD_FOR_CORRECTION] * 2
            assert wake == T + AFTER_S * 1000
            [(freeze_at, frozen)] = state_records(svc)
            assert frozen == "FROZEN"
            offsets = score_offsets(svc)
            assert max(offsets[e] for e in ("e1", "e2", "e3")) < freeze_at < min(offsets[e] for e in ("e4", "e5"))
            assert svc.router.boards[BOARD].admission.freeze_position == freeze_at
            info = await svc.board(BOARD)
            assert (info.state, info.size) == (BoardState.FROZEN, 3)
            assert {h.event_id for h in await svc.quarantine(BOARD)} == {"e4", "e5"}
            # idempotent: asking again (and concurrently) logs nothing more
            await asyncio.gather(svc.router.close_due(), svc.router.close_due())
            assert len(state_records(svc)) == 1
            clock.now = T + AFTER_S * 1000 - 1
            await svc.router.close_due()
            assert (await svc.board(BOARD)).state is BoardState.FROZEN
            clock.now = T + AFTER_S * 1000
            assert await svc.router.close_due() is None
            assert [s for _, s in state_records(svc)] == ["FROZEN", "FINALIZED"]
            await svc.router.close_due()
            assert [s for _, s in state_records(svc)] == ["FROZEN", "FINALIZED"]
            assert (await svc.board(BOARD)).state is BoardState.FINALIZED
        finally:
            await svc.close()

    run(go())


def test_the_timer_task_makes_the_close_without_being_asked():
    async def go():
        clock = FakeClock(T - 5_000)
        svc = await open_svc(clock)
        try:
            await svc.create_board(spec(finalize_after_s=0))
            clock.now = T + 1
            svc.router.wake_season_timer()
            for _ in range(1000):  # the timer runs on its own; give it up to ~10 s of turns
                if len(state_records(svc)) == 2:  # durable (the board shows its state from the sequencing on)
                    break
                await asyncio.sleep(0.01)
            assert (await svc.board(BOARD)).state is BoardState.FINALIZED
            assert [s for _, s in state_records(svc)] == ["FROZEN", "FINALIZED"]
            assert (await svc.submit([ev(1)]))[0].outcome is Outcome.HELD_FOR_CORRECTION
        finally:
            await svc.close()

    run(go())


def test_an_admin_who_froze_first_leaves_the_schedule_only_the_finalize():
    async def go():
        clock = FakeClock(T - 5_000)
        svc = await open_svc(clock)
        try:
            await svc.create_board(spec())
            await svc.set_state(BOARD, BoardState.FROZEN)
            clock.now = T
            await svc.router.close_due()
            assert [s for _, s in state_records(svc)] == ["FROZEN"]
            clock.now = T + AFTER_S * 1000
            await svc.router.close_due()
            assert [s for _, s in state_records(svc)] == ["FROZEN", "FINALIZED"]
            await svc.set_state(BOARD, BoardState.ARCHIVED)  # the admin may go on by hand
            clock.now += 10**9
            await svc.router.close_due()
            assert [s for _, s in state_records(svc)] == ["FROZEN", "FINALIZED", "ARCHIVED"]
        finally:
            await svc.close()

    run(go())


def test_a_board_created_after_its_closes_at_is_frozen_before_the_answer():
    async def go():
        clock = FakeClock(T + 1_000)
        svc = await open_svc(clock)
        try:
            info = await svc.create_board(spec())
            assert info.state is BoardState.FROZEN
            info = await svc.create_board(BoardSpec("g:m:s:other", Policy.CUMULATIVE, closes_at=T - 10**6,
                                                    finalize_after_s=AFTER_S))
            assert info.state is BoardState.FINALIZED
            assert (await svc.submit([ev(1)]))[0].outcome is Outcome.HELD_FOR_CORRECTION
        finally:
            await svc.close()

    run(go())


def test_a_bad_schedule_is_refused_and_changes_nothing():
    async def go():
        svc = await open_svc(FakeClock(T))
        try:
            for bad, field in [(spec(closes_at=1.5), "closes_at"), (spec(finalize_after_s=-1), "finalize_after_s")]:
                with pytest.raises(ValidationFailed) as err:
                    await svc.create_board(bad)
                assert err.value.field == field
            assert await svc.list_boards() == []
            assert svc.event_log.end_offset() == 0
        finally:
            await svc.close()

    run(go())


@pytest.mark.parametrize("how", ["close", "crash"])
def test_a_server_down_when_the_close_fell_due_makes_it_at_start(tmp_path, how):
    """Down at closes_at: the restart freezes at the log position it has then
    (after everything logged before), before any new write; down again until
    past the finalize: the next restart finalizes. Snapshot or log replay alike."""
    async def stop(svc):
        if how == "close":
            await svc.close()
        else:
            await crash(svc)

    async def go():
        clock = FakeClock(T - 5_000)
        svc = await open_svc(clock, tmp_path)
        await svc.create_board(spec())
        await svc.submit([ev(1), ev(2, "p-b")])
        await stop(svc)
        end_before = svc.event_log.end_offset()

        clock.now = T + 10  # the close fell due while it was down
        svc = await open_svc(clock, tmp_path)
        [(freeze_at, frozen)] = state_records(svc)
        assert frozen == "FROZEN"
        assert freeze_at >= end_before and svc.router.boards[BOARD].admission.freeze_position == freeze_at
        assert (await svc.board(BOARD)).state is BoardState.FROZEN
        assert (await svc.submit([ev(3, "p-c")]))[0].outcome is Outcome.HELD_FOR_CORRECTION
        assert score_offsets(svc)["e3"] > freeze_at
        await stop(svc)

        clock.now = T + 20  # between freeze and finalize: nothing more
        svc = await open_svc(clock, tmp_path)
        info = await svc.board(BOARD)
        assert (info.state, info.closes_at, info.finalize_after_s) == (BoardState.FROZEN, T, AFTER_S)
        assert [s for _, s in state_records(svc)] == ["FROZEN"]
        assert [h.event_id for h in await svc.quarantine(BOARD)] == ["e3"]
        await stop(svc)

        clock.now = T + AFTER_S * 1000 + 5  # down through the finalize
        svc = await open_svc(clock, tmp_path)
        assert [s for _, s in state_records(svc)] == ["FROZEN", "FINALIZED"]
        assert (await svc.board(BOARD)).state is BoardState.FINALIZED
        await svc.close()

    run(go())


def test_down_through_both_transitions_makes_both_at_start(tmp_path):
    async def go():
        clock = FakeClock(T - 5_000)
        svc = await open_svc(clock, tmp_path)
        await svc.create_board(spec())
        await svc.submit([ev(1)])
        await svc.close()
        clock.now = T + 10**8
        svc = await open_svc(clock, tmp_path)
        try:
            assert [s for _, s in state_records(svc)] == ["FROZEN", "FINALIZED"]
            assert (await svc.board(BOARD)).size == 1
        finally:
            await svc.close()

    run(go())


def test_next_season_copies_the_board_and_refuses_a_taken_id():
    async def go():
        clock = FakeClock(T - 5_000)
        svc = await open_svc(clock)
        try:
            await svc.create_board(BoardSpec(BOARD, Policy.FASTEST_TIME, shards=3, max_plausible_time_ms=60_000,
                                             review_above=900, closes_at=T, finalize_after_s=120))
            info = await svc.next_season(BOARD, "S8", T + 10**9)
            assert (info.board_id, info.policy, info.shards, info.max_plausible_time_ms, info.review_above,
                    info.closes_at, info.finalize_after_s, info.state) == (
                "arena-clash:solo:S8:global", Policy.FASTEST_TIME, 3, 60_000, 900, T + 10**9, 120, BoardState.OPEN)
            with pytest.raises(BoardExists):
                await svc.next_season(BOARD, "S8", None)
            with pytest.raises(BoardNotFound):
                await svc.next_season("g:m:S1:x", "S8", None)
            with pytest.raises(ValidationFailed):
                await svc.next_season(BOARD, "S 9", None)
            clock.now = T  # each board keeps its own schedule
            await svc.router.close_due()
            assert (await svc.board(BOARD)).state is BoardState.FROZEN
            assert (await svc.board("arena-clash:solo:S8:global")).state is BoardState.OPEN
        finally:
            await svc.close()

    run(go())


def test_a_full_ingest_queue_does_not_hold_back_the_close():
    async def go():
        clock = FakeClock(T - 5_000)
        svc = await open_svc(clock)
        try:
            await svc.create_board(spec())
            svc.router.cfg.max_queued_events = 0  # every write is now refused as OVERLOADED
            clock.now = T
            await svc.router.close_due()
            assert [s for _, s in state_records(svc)] == ["FROZEN"]
        finally:
            svc.router.cfg.max_queued_events = 200_000
            await svc.close()

    run(go())

"""The router's rank mirrors (engine.core.rank_mirror) against the shard actors' path.

Two services take the same operations (score batches, invalidations,
quarantine decisions, erasures): one answers exact ranks from a mirror, the
other (``rank_mirror_rows=0``) from the shard actors. After every operation
every player's read is the same on both, at 1 and k partitions.
"""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.core.errors import EventNotFound, FlowRankError, PlayerNotFound
from engine.core.model import BoardSpec, Invalidation, Policy, QuarantineDecision, ScoreEvent
from engine.runtime.local import LocalService

BOARD = "g:m:s:mirror"
IDS = ["p-a", "p-b", "p-c", "p-d", "é", "𝔘", "x" * 30]


@st.composite
def scripts(draw):
    policy = draw(st.sampled_from([Policy.BEST_SCORE, Policy.CUMULATIVE, Policy.LATEST]))
    ops, n = [], 0
    for _ in range(draw(st.integers(2, 10))):
        kind = draw(st.sampled_from(["events", "events", "events", "invalidate", "decide", "erase"]))
        if kind == "events" or n == 0:
            batch = []
            for _ in range(draw(st.integers(1, 5))):
                batch.append(ScoreEvent(BOARD, f"e{n}", draw(st.sampled_from(IDS)), draw(st.integers(-2, 12)),
                                        draw(st.integers(0, 3)), draw(st.integers(0, 3)),
                                        draw(st.sampled_from([b"", b'{"m":1}']))))
                n += 1
            ops.append(("events", batch))
        elif kind == "erase":
            ops.append(("erase", draw(st.sampled_from(IDS))))
        else:
            ops.append((kind, f"e{draw(st.integers(0, n - 1))}", draw(st.sampled_from(["apply", "reject"]))))
    return policy, ops, draw(st.sampled_from([1, 3]))


async def _do(svc, op) -> None:
    try:
        if op[0] == "events":
            await svc.submit(op[1])
        elif op[0] == "invalidate":
            await svc.invalidate(Invalidation(BOARD, op[1]))
        elif op[0] == "decide":
            await svc.decide(QuarantineDecision(BOARD, op[1], op[2], "", "mod"))
        else:
            await svc.erase_player(op[1])
    except EventNotFound:
        pass
    except FlowRankError as exc:  # an event not held, decided twice: the same on both services
        return type(exc).__name__


async def _reads(svc, ties: bool) -> list:
    out = []
    for pid in IDS:
        try:
            out.append(await svc.player(BOARD, pid, ties=ties))
        except PlayerNotFound:
            out.append(None)
    return out


async def _script(policy, ops, shards):
    mirrored = await LocalService.open(data_dir=None, n_shards=2)
    plain = await LocalService.open(data_dir=None, n_shards=2, rank_mirror_rows=0)
    try:
        for svc in (mirrored, plain):
            await svc.create_board(BoardSpec(BOARD, policy, shards=shards, max_plausible_time_ms=3, review_above=10))
        fan = mirrored.router.fanout
        assert await fan.build_mirror(BOARD)
        for i, op in enumerate(ops):
            assert await _do(mirrored, op) == await _do(plain, op)
            if BOARD not in fan.mirrors:  # lost (an erasure resets the ring): built again, as a read would
                assert await fan.build_mirror(BOARD)
            ties = bool(i % 2)
            before = fan.mirror_stats["reads"]
            assert await _reads(mirrored, ties) == await _reads(plain, ties), op
            assert fan.mirror_stats["reads"] == before + len(IDS)  # every read came from the mirror
            assert plain.router.fanout.mirror_stats["reads"] == 0
        m = fan.mirrors[BOARD][1]
        m._check()
    finally:
        await mirrored.close()
        await plain.close()


@settings(max_examples=40, deadline=None)
@given(scripts())
def test_mirror_reads_equal_the_shard_actors_after_every_operation(script):
    asyncio.run(_script(*script))


async def _board_of(players: int, **options) -> LocalService:
    """A service with a 2-partition best_score board of ``players`` rows (player ``pi`` scored ``i``)."""
    svc = await LocalService.open(data_dir=None, n_shards=2, **options)
    await svc.create_board(BoardSpec(BOARD, Policy.BEST_SCORE, shards=2))
    await svc.submit([ScoreEvent(BOARD, f"e{i}", f"p{i}", i, 0, 0) for i in range(players)])
    return svc


def test_a_first_exact_rank_read_builds_the_mirror_and_writes_keep_it_at_the_board_version():
    async def go():
        svc = await _board_of(50, delta_retention=4)
        try:
            fan = svc.router.fanout
            assert (await svc.player(BOARD, "p7")).rank == 43  # from the shard actors; a build starts
            assert BOARD in fan._mirror_builds
            await fan._mirror_builds[BOARD]
            assert fan.mirror_stats["builds"] == 1
            for k in range(5):  # more changes per cycle than the ring retains: the mirror follows each cycle
                await svc.submit([ScoreEvent(BOARD, f"f{k}-{i}", f"q{k}-{i}", 100 + i, 0, 0) for i in range(10)])
            got = await svc.player(BOARD, "p7")
            assert (got.rank, got.version) == (93, (await svc.board(BOARD)).version)
            assert fan.mirror_stats["reads"] == 1 and fan.mirror_stats["lost"] == 0
            summary = fan.mirror_summary()
            assert summary["boards"] == 1 and summary["rows"] == 100 and summary["bytes"] > 0
        finally:
            await svc.close()

    asyncio.run(go())


@pytest.mark.parametrize("policy,subscores", [(Policy.FASTEST_TIME, ()), (Policy.BEST_SCORE, ("desc",))])
def test_boards_without_a_mirror_read_from_the_shard_actors(policy, subscores):
    async def go():
        svc = await LocalService.open(data_dir=None, n_shards=2)
        try:
            await svc.create_board(BoardSpec(BOARD, policy, shards=2, subscores=subscores))
            event = ScoreEvent(BOARD, "e1", "p1", 5, 0, 0, subscores=(1,) if subscores else ())
            await svc.submit([event])
            assert (await svc.player(BOARD, "p1")).rank == 1
            assert not svc.router.fanout._mirror_builds and not svc.router.fanout.mirrors
        finally:
            await svc.close()

    asyncio.run(go())


def test_a_board_over_the_row_limit_keeps_the_shard_actors_path():
    async def go():
        svc = await _board_of(11, rank_mirror_rows=10)
        try:
            fan = svc.router.fanout
            assert not await fan.build_mirror(BOARD)
            assert fan.mirror_stats["too_big"] == 1 and (await svc.player(BOARD, "p0")).rank == 11
            assert not fan._mirror_builds  # no new build before the retry time
        finally:
            await svc.close()

    asyncio.run(go())


def test_an_unread_mirror_is_dropped_and_writes_do_not_keep_it():
    async def go():
        now = [0.0]
        svc = await LocalService.open(data_dir=None, n_shards=2)
        try:
            fan = svc.router.fanout
            fan.clock = lambda: now[0]
            fan.cfg.rank_mirror_idle_s = 100.0
            await svc.create_board(BoardSpec(BOARD, Policy.BEST_SCORE, shards=2))
            await svc.submit([ScoreEvent(BOARD, "e0", "p0", 1, 0, 0)])
            assert await fan.build_mirror(BOARD)
            for k in range(1, 4):  # writes follow the mirror but do not count as its use
                now[0] = 60.0 * k
                await svc.submit([ScoreEvent(BOARD, f"e{k}", f"p{k}", k, 0, 0)])
            assert BOARD in fan.mirrors
            assert (await svc.player(BOARD, "p0")).rank == 3  # past the idle time: swept, from the shard actors
            assert BOARD not in fan.mirrors and fan.mirror_stats["idle"] == 1 and fan.mirror_stats["reads"] == 0
        finally:
            await svc.close()

    asyncio.run(go())


def test_a_ring_reset_during_a_build_fails_it():
    """An erasure resets the ring (an erased unranked row leaves without a delta): a cut taken
    before the reset cannot be trusted after it, even at the same version."""
    async def go():
        svc = await _board_of(20)
        try:
            fan = svc.router.fanout
            ctl = svc.router.boards[BOARD]
            consistent = fan.consistent

            async def reset_after_the_cut(attempt, c=None):
                got = await consistent(attempt, c)
                if isinstance(got, tuple):  # the ROWS cut (the size round answers a number)
                    ctl.ring.reset(ctl.ring.version)
                return got

            fan.consistent = reset_after_the_cut
            assert not await fan.build_mirror(BOARD)
            assert BOARD not in fan.mirrors and fan.mirror_stats["failed"] == 1
            fan.consistent = consistent
            fan._mirror_after.clear()
            assert await fan.build_mirror(BOARD)  # a cut after the reset is fine
        finally:
            await svc.close()

    asyncio.run(go())

"""The router over in-process shards: seed scenarios and shard equivalence."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.board import Board
from engine.errors import EventNotFound, PlayerNotFound, PlayerNotRanked, ViewExpired
from engine.model import BoardSpec, Invalidation, Policy, ScoreEvent
from engine.service import LocalService
from tests import seed_scenarios as seeds
from tests.client_driver import ClientDriver
from tests.engine import oracle

DATA = seeds.load()


@pytest.fixture
def loop():
    lp = asyncio.new_event_loop()
    yield lp
    lp.close()


@pytest.mark.parametrize("n_shards,board_shards", [(1, 1), (3, 1), (3, 3), (2, 4)])
@pytest.mark.parametrize("test_id", seeds.scenario_ids())
def test_seed_scenarios_through_router(loop, test_id, n_shards, board_shards):
    scenario = next(s for s in DATA["scenarios"] if s["test"] == test_id)
    svc = loop.run_until_complete(LocalService.open(data_dir=None, n_shards=n_shards))
    try:
        driver = ClientDriver(loop, svc, scenario.get("friends", {}), board_shards=board_shards)
        seeds.load_initial(driver, DATA)
        assert seeds.run_scenario(driver, scenario) == len(scenario["steps"])
    finally:
        loop.run_until_complete(svc.close())


BOARD = "g:m:s:eq"
players = st.sampled_from(["p-a", "p-b", "p-c", "p-d", "p-e", "p-f", "é", "𝔘"])


@st.composite
def workloads(draw):
    policy = draw(st.sampled_from(list(Policy)))
    n = draw(st.integers(1, 40))
    events = [
        ScoreEvent(BOARD, f"e{i}", draw(players), draw(st.integers(-2, 4)), draw(st.integers(0, 3)), draw(st.integers(0, 3)))
        for i in range(n)
    ]
    events += draw(st.lists(st.sampled_from(events), max_size=6))
    invalid = draw(st.lists(st.sampled_from([e.event_id for e in events]), max_size=3, unique=True))
    return policy, events, invalid


async def _run(policy, events, invalid, n_shards, board_shards):
    svc = await LocalService.open(data_dir=None, n_shards=n_shards)
    try:
        await svc.create_board(BoardSpec(BOARD, policy, shards=board_shards, max_plausible_time_ms=3))
        half = len(events) // 2
        results = await svc.submit(events[:half]) + await svc.submit(events[half:])
        inv = []
        for eid in invalid:
            try:
                r = await svc.invalidate(Invalidation(BOARD, eid))
                inv.append((r.player_id, r.status.value, r.value))
            except EventNotFound:
                inv.append(None)
        info = await svc.board(BOARD)
        top = await svc.top(BOARD, 0, 1000)
        everyone = sorted({e.player_id for e in events})
        views, windows = [], []
        for pid in everyone:
            try:
                v = await svc.player(BOARD, pid)
                views.append((pid, v.rank, v.value, v.status.value, v.row_version))
            except PlayerNotFound:
                views.append((pid, None))
            try:
                windows.append([(e.rank, e.player_id) for e in (await svc.around(BOARD, pid, 2)).entries])
            except (PlayerNotRanked, PlayerNotFound):
                windows.append(None)
        friends = (await svc.ranked_subset(BOARD, everyone[::2])).entries
        checksum = await svc.checksum(BOARD)
        for core in svc.cores:
            core._check()
        return {
            "outcomes": [(r.outcome.value, r.version) for r in results], "invalidations": inv,
            "version": info.version, "size": info.size,
            "top": [(e.rank, e.player_id, e.value, e.achieved_at) for e in top.entries],
            "views": views, "windows": windows, "friends": [(e.rank, e.player_id) for e in friends],
            "checksum": checksum.checksum,
        }
    finally:
        await svc.close()


@settings(max_examples=40, deadline=None)
@given(workloads())
def test_k_shards_equal_one_shard_and_the_oracle(work):
    policy, events, invalid = work
    loop = asyncio.new_event_loop()
    try:
        runs = [loop.run_until_complete(_run(policy, events, invalid, n, k)) for n, k in [(1, 1), (2, 2), (3, 3), (2, 4)]]
    finally:
        loop.close()
    for other in runs[1:]:
        assert other == runs[0]
    # And the single-partition reference facade agrees with the router.
    ref = Board(BoardSpec(BOARD, policy, max_plausible_time_ms=3))
    ref_results = ref.apply_batch(events)
    assert [(r.outcome.value, r.version) for r in ref_results] == runs[0]["outcomes"]
    for eid in invalid:
        try:
            ref.invalidate(eid)
        except EventNotFound:
            pass
    assert ref.checksum().checksum == runs[0]["checksum"]
    assert [(e.rank, e.player_id) for e in ref.top(0, 1000).entries] == [t[:2] for t in runs[0]["top"]]
    rows = oracle.final_rows(policy, events, invalid={e for e in invalid if ref.partition.owns_event(e)} |
                             {e.event_id for e in events if not ref.partition.owns_event(e.event_id)}, max_time=3)
    assert [t[1] for t in runs[0]["top"]] == oracle.ranking(policy, rows)


def test_pinned_pages_survive_later_writes_then_expire(loop):
    async def go():
        svc = await LocalService.open(data_dir=None, n_shards=2)
        svc.router.cfg.max_views = 1
        await svc.create_board(BoardSpec(BOARD, Policy.BEST_SCORE, shards=2))
        await svc.submit([ScoreEvent(BOARD, f"e{i}", f"p{i:02d}", i, 0, 0) for i in range(30)])
        page1 = await svc.top(BOARD, 0, 10)
        await svc.submit([ScoreEvent(BOARD, "late", "p-new", 1000, 0, 0)])
        page2 = await svc.top(BOARD, 10, 10, at_version=page1.version)
        assert page2.version == page1.version
        assert [e.rank for e in page2.entries] == list(range(11, 21))
        assert {e.player_id for e in page1.entries}.isdisjoint(e.player_id for e in page2.entries)
        await svc.top("g:m:s:eq", 0, 5)  # evicts the only retained view (max_views=1)
        with pytest.raises(ViewExpired):
            await svc.top(BOARD, 10, 10, at_version=page1.version)
        await svc.close()

    loop.run_until_complete(go())


def test_approximate_rank_bound_is_honest(loop):
    async def go():
        svc = await LocalService.open(data_dir=None, n_shards=4)
        svc.router.cfg.approx_sample_points = 8
        await svc.create_board(BoardSpec(BOARD, Policy.BEST_SCORE, shards=4))
        import random

        rnd = random.Random(7)
        events = [ScoreEvent(BOARD, f"e{i}", f"p{rnd.randrange(400)}", rnd.randrange(100), rnd.randrange(50), 0)
                  for i in range(2000)]
        for i in range(0, len(events), 250):
            await svc.submit(events[i:i + 250])
            for pid in ("p1", "p17", "p300", "p399"):
                try:
                    exact = (await svc.player(BOARD, pid)).rank
                except PlayerNotFound:
                    continue
                approx = await svc.approximate_player(BOARD, pid)
                assert approx.approximate and approx.rank_error_bound is not None
                assert abs(approx.rank - exact) <= approx.rank_error_bound, (pid, approx, exact)
        await svc.close()

    loop.run_until_complete(go())


def test_backpressure_answers_overloaded(loop):
    from engine.errors import Overloaded

    async def go():
        svc = await LocalService.open(data_dir=None, n_shards=1, max_queued_events=10)
        await svc.create_board(BoardSpec(BOARD, Policy.BEST_SCORE))
        with pytest.raises(Overloaded):
            await svc.submit([ScoreEvent(BOARD, f"e{i}", "p", i, 0, 0) for i in range(11)])
        assert (await svc.board(BOARD)).version == 0
        await svc.close()

    loop.run_until_complete(go())


def test_one_hot_board_cannot_fill_the_whole_queue(loop):
    from engine.errors import Overloaded

    async def go():
        svc = await LocalService.open(data_dir=None, n_shards=1)
        svc.router.cfg.max_board_queued_events = 5
        await svc.create_board(BoardSpec(BOARD, Policy.BEST_SCORE))
        await svc.create_board(BoardSpec("g:m:s:other", Policy.BEST_SCORE))
        with pytest.raises(Overloaded, match="too much work queued"):
            await svc.submit([ScoreEvent(BOARD, f"e{i}", "p", i, 0, 0) for i in range(6)])
        ok = await svc.submit([ScoreEvent("g:m:s:other", f"e{i}", "p", i, 0, 0) for i in range(5)])
        assert ok[-1].version == 5
        assert svc.router._board_queued[BOARD] == 0 and svc.router._board_queued["g:m:s:other"] == 0
        await svc.close()

    loop.run_until_complete(go())


def test_event_for_an_unknown_board_is_answered_unknown_and_never_logged(loop):
    async def go():
        svc = await LocalService.open(data_dir=None, n_shards=2)
        router = svc.router
        results = await svc.submit([ScoreEvent("g:m:s:late", "e1", "p", 1, 0, 0)])
        assert results[0].outcome.value == "REJECTED_UNKNOWN_SEASON" and results[0].version == 0
        assert router.log_offset == -1  # nothing reached the log: creating the board later cannot revive it
        info = await svc.create_board(BoardSpec("g:m:s:late", Policy.BEST_SCORE))
        assert info.version == 0
        later = await svc.submit([ScoreEvent("g:m:s:late", "e1", "p", 1, 0, 0)])
        assert later[0].outcome.value == "APPLIED_FIRST_SCORE"
        await svc.close()

    loop.run_until_complete(go())

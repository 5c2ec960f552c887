"""The router over in-process shards: seed scenarios and shard equivalence."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.core import wire as W
from engine.core.board import Board
from engine.core.errors import EventNotFound, PlayerNotFound, PlayerNotRanked, ViewExpired
from engine.core.model import BoardSpec, Invalidation, Policy, ScoreEvent
from engine.runtime.local import LocalService
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
    from engine.core.errors import Overloaded

    async def go():
        svc = await LocalService.open(data_dir=None, n_shards=1, max_queued_events=10)
        await svc.create_board(BoardSpec(BOARD, Policy.BEST_SCORE))
        with pytest.raises(Overloaded):
            await svc.submit([ScoreEvent(BOARD, f"e{i}", "p", i, 0, 0) for i in range(11)])
        assert (await svc.board(BOARD)).version == 0
        await svc.close()

    loop.run_until_complete(go())


def test_one_hot_board_cannot_fill_the_whole_queue(loop):
    from engine.core.errors import Overloaded

    async def go():
        svc = await LocalService.open(data_dir=None, n_shards=1)
        svc.router.cfg.max_board_queued_events = 5
        await svc.create_board(BoardSpec(BOARD, Policy.BEST_SCORE))
        await svc.create_board(BoardSpec("g:m:s:other", Policy.BEST_SCORE))
        with pytest.raises(Overloaded, match="too much work queued"):
            await svc.submit([ScoreEvent(BOARD, f"e{i}", "p", i, 0, 0) for i in range(6)])
        ok = await svc.submit([ScoreEvent("g:m:s:other", f"e{i}", "p", i, 0, 0) for i in range(5)])
        assert ok[-1].version == 5
        assert svc.router.sequencer._board_queued[BOARD] == 0 and svc.router.sequencer._board_queued["g:m:s:other"] == 0
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


# ---------------------------------------------------------------- exact rank in one round

@settings(max_examples=30, deadline=None)
@given(workloads(), st.sampled_from([(1, 1), (2, 3), (3, 4)]), st.integers(1, 6))
def test_reads_between_writes_equal_the_full_ranking_whether_the_key_guess_holds_or_not(work, layout, step):
    """player() and around() send the rank key a player had when last read with
    their one round; writes in between move some keys (the guess then misses
    and a second round counts with the row's key). After every batch each
    player's rank, tied rank and window must equal the board's full ranking."""
    policy, events, invalid = work
    n_shards, board_shards = layout

    async def go():
        svc = await LocalService.open(data_dir=None, n_shards=n_shards)
        try:
            await svc.create_board(BoardSpec(BOARD, policy, shards=board_shards, max_plausible_time_ms=3))
            everyone = sorted({e.player_id for e in events})
            for i in range(0, len(events), step):
                await svc.submit(events[i:i + step])
                if i // step == 1 and invalid:
                    try:
                        await svc.invalidate(Invalidation(BOARD, invalid[0]))
                    except EventNotFound:
                        pass
                top = (await svc.top(BOARD, 0, 1000)).entries
                rank_of = {e.player_id: e.rank for e in top}
                values = [e.value for e in top]
                for pid in everyone:
                    for ties in (False, True):
                        try:
                            v = await svc.player(BOARD, pid, ties=ties)
                        except PlayerNotFound:
                            assert pid not in rank_of
                            continue
                        assert v.rank == rank_of.get(pid)
                        if ties and v.rank is not None:
                            assert v.tied_rank == 1 + sum(1 for x in values if x != v.value and
                                                          values.index(x) < values.index(v.value))
                    try:
                        window = (await svc.around(BOARD, pid, 2)).entries
                    except (PlayerNotRanked, PlayerNotFound):
                        assert pid not in rank_of
                        continue
                    r = rank_of[pid]
                    assert [(e.rank, e.player_id) for e in window] == \
                        [(e.rank, e.player_id) for e in top[max(0, r - 3):r + 2]]
        finally:
            await svc.close()

    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(go())
    finally:
        loop.close()


def test_a_player_read_again_or_after_a_write_takes_one_round_and_a_stale_guess_two(loop):
    """The shard actors' path (no rank mirror: engine.core.rank_mirror has its own tests below)."""
    async def go():
        svc = await LocalService.open(data_dir=None, n_shards=3, rank_mirror_rows=0)
        try:
            await svc.create_board(BoardSpec(BOARD, Policy.BEST_SCORE, shards=3))
            await svc.submit([ScoreEvent(BOARD, f"e{i}", f"p{i}", i, 0, 0) for i in range(30)])
            router = svc.router
            calls = []
            read = router.reads.t.read
            router.reads.t.read = lambda actor, reqs: calls.append([r.op for r in reqs]) or read(actor, reqs)

            async def ops(coro):
                calls.clear()
                out = await coro
                return out, sorted(op for c in calls for op in c)

            first, ops1 = await ops(svc.player(BOARD, "p7"))
            again, ops2 = await ops(svc.player(BOARD, "p7"))
            assert first == again and first.rank == 23
            assert ops1 == [W.COUNT, W.COUNT, W.GET]  # no key known: the row first, then the counts
            assert ops2 == [W.COUNT, W.COUNT, W.GET]
            assert len(calls) == 3  # ... all in one round: one call per shard actor
            stale = router.registry.rank_keys.get(BOARD, "p7")
            await svc.submit([ScoreEvent(BOARD, "up", "p7", 100, 0, 0)])  # p7's key moves: the write leaves the new one
            moved, ops3 = await ops(svc.player(BOARD, "p7"))
            assert moved.rank == 1
            assert ops3 == [W.COUNT, W.COUNT, W.GET] and len(calls) == 3  # one round
            router.registry.rank_keys.put(BOARD, "p7", stale)  # a guess gone stale (e.g. written by another process)
            again, ops4 = await ops(svc.player(BOARD, "p7"))
            assert again == moved
            assert ops4 == [W.COUNT] * 4 + [W.GET]  # the stale guess, then the row's key
        finally:
            await svc.close()

    loop.run_until_complete(go())


def test_concurrent_first_pages_share_one_fan_out_and_never_miss_an_acknowledged_write(loop):
    """Page-1 reads that arrive while a board's view is being built wait for that
    one fan-out instead of each making their own, and use it only if it is at
    the version current when they use it: a write acknowledged before a read
    starts is always in its answer."""
    async def go():
        svc = await LocalService.open(data_dir=None, n_shards=3)
        try:
            await svc.create_board(BoardSpec(BOARD, Policy.BEST_SCORE, shards=3))
            await svc.submit([ScoreEvent(BOARD, f"e{i}", f"p{i}", i, 0, 0) for i in range(300)])
            router = svc.router
            tops = []
            read = router.reads.t.read
            router.reads.t.read = lambda actor, reqs: tops.extend(r for r in reqs if r.op == W.TOP) or read(actor, reqs)
            pages = await asyncio.gather(*[svc.top(BOARD, 0, 10) for _ in range(20)])
            assert len({p.entries for p in pages}) == 1 and pages[0].entries[0].player_id == "p299"
            assert len(tops) == 3  # one fan-out: one top request per shard actor, not 20

            def slow_top(actor, reqs):  # the cut is taken now; its answer comes 0.2 s later
                fut = asyncio.ensure_future(read(actor, reqs))
                if not any(r.op == W.TOP for r in reqs):
                    return fut

                async def later():
                    answer = await fut
                    await asyncio.sleep(0.2)
                    return answer
                return later()

            router.reads.t.read = slow_top
            for k in range(3):  # a write acknowledged while a build runs: a read after it has it
                await svc.submit([ScoreEvent(BOARD, f"v{k}", f"p{k}", 500 + k, 0, 0)])  # a version with no view
                router.views.clear()  # and none to carry forward (Router._carried_view): this read builds one
                building = asyncio.ensure_future(svc.top(BOARD, 0, 10))
                await asyncio.sleep(0.01)
                await svc.submit([ScoreEvent(BOARD, f"w{k}", f"new{k}", 1000 + k, 0, 0)])
                assert not building.done()  # (else this round proves nothing)
                after = await svc.top(BOARD, 0, 10)
                assert after.entries[0].player_id == f"new{k}" and after.version == (await svc.board(BOARD)).version
                assert (await building).entries[0].player_id != f"new{k}"
        finally:
            await svc.close()

    loop.run_until_complete(go())


@pytest.mark.parametrize("policy", [Policy.BEST_SCORE, Policy.CUMULATIVE, Policy.LATEST])
@pytest.mark.parametrize("shards", [1, 3])
def test_top_pages_carried_through_changes_equal_a_fan_out(loop, policy, shards):
    """Issue 29 item 2: a top read after writes answers from the last view carried
    through the changes since (Router._carried_view) instead of fanning out;
    every page equals the one a fan-out gives at the same version, through
    new players, rows moving both ways (negative deltas, a latest board's
    lower values), invalidations and ties, at 1 and 3 partitions."""
    import random

    from engine.core.ranking import merge_top

    async def go():
        svc = await LocalService.open(data_dir=None, n_shards=3, delta_retention=10_000)
        try:
            await svc.create_board(BoardSpec(BOARD, policy, shards=shards))
            router, rnd = svc.router, random.Random(11)
            tops: list = []
            read = router.reads.t.read
            router.reads.t.read = lambda actor, reqs: tops.extend(r for r in reqs if r.op == W.TOP) or read(actor, reqs)
            players = 600  # more than a view holds (5 pages): views are prefixes, rows enter and leave them
            await svc.submit([ScoreEvent(BOARD, f"s{i}", f"p{i}", rnd.randrange(100), 2, i) for i in range(players)])
            acked, n, carried = [], 0, 0
            for _ in range(80):
                events = []
                for _ in range(rnd.choice([1, 3, 40])):
                    low = -60 if policy is Policy.CUMULATIVE else 0
                    events.append(ScoreEvent(BOARD, f"e{n}", f"p{rnd.randrange(players)}", rnd.randrange(low, 100),
                                             rnd.randrange(4), n, b'{"n":%d}' % n if n % 7 == 0 else b""))
                    n += 1
                await svc.submit(events)
                acked += [e.event_id for e in events]
                if rnd.random() < 0.2:
                    await svc.invalidate(Invalidation(BOARD, rnd.choice(acked)))
                offset, limit = rnd.choice([(0, 10), (0, 40), (15, 10), (0, 100), (30, 10), (390, 100), (440, 80)])
                before = len(tops)
                got = await svc.top(BOARD, offset, limit)
                carried += len(tops) == before
                version, lists = await router.fanout._tops(router.registry.ctl(BOARD), offset + limit)
                assert got.version == version
                assert list(got.entries) == merge_top(lists, offset, limit)
            assert carried >= 40  # most reads took no fan-out
        finally:
            await svc.close()

    loop.run_until_complete(go())

"""ReadReplica (engine.runtime.replica): a gateway worker's hot reads straight
from the shards answer what the engine itself answers, are fresh after any
acknowledgement, page with cursors from other gateways, and stop reading an
archived board's rows before the shards drop them."""

from __future__ import annotations

import asyncio
import random

import pytest

from engine.runtime.host import EngineHost, LocalChannel
from engine.core.errors import BoardNotFound, PlayerNotFound
from engine.core.model import BoardSpec, BoardState, Policy, ScoreEvent
from engine.runtime.remote import RemoteEngine
from engine.runtime.local import LocalService

pytestmark = pytest.mark.anyio
B = "g:m:s:replica"


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.fixture(params=["version-table", "size-rounds"])
async def setup(request, tmp_path):
    """Two gateways with replicas; top versions from the host's version table
    (gateways on its machine) or from a size round (gateways elsewhere)."""
    eng = await LocalService.open(data_dir=None, n_shards=3)
    await eng.create_board(BoardSpec(B, Policy.BEST_SCORE, shards=4))
    path = str(tmp_path / "versions") if request.param == "version-table" else None
    host = EngineHost(eng, drop_wait_s=5.0, version_path=path)
    gateways = [RemoteEngine(LocalChannel(host), replica_transport=eng.router.t) for _ in range(2)]
    yield eng, host, gateways
    for g in gateways:
        await g.close()
    await host.close()
    await eng.close()


def events(rnd: random.Random, first: int, n: int, players: int = 40) -> list[ScoreEvent]:
    return [ScoreEvent(B, f"e{i}", f"p{rnd.randrange(players)}", rnd.randrange(-50, 50), 1000 + rnd.randrange(9),
                       1000 + i) for i in range(first, first + n)]


async def test_replica_reads_equal_the_engine_and_see_every_acknowledged_write(setup):
    eng, _, (a, b) = setup
    rnd = random.Random(5)
    for step in range(12):
        results = await a.submit(events(rnd, step * 10, 10))  # through the host
        newest = max(r.version for r in results)
        page = await b.top(B, 0, 100)  # through the other gateway's replica, right after the ack
        assert page.version >= newest
        assert page == await eng.top(B, 0, 100)
        for pid in sorted({e.player_id for e in page.entries})[:5]:
            assert await b.player(B, pid, ties=True) == await eng.player(B, pid, ties=True)
            assert await b.around(B, pid, 3) == await eng.around(B, pid, 3)
        ids = [f"p{i}" for i in range(0, 40, 3)]
        assert await b.ranked_subset(B, ids) == await eng.ranked_subset(B, ids)
    assert b.replica.reads > 0 and b.replica.fanout.boards.keys() == {B}
    # a replica has no delta ring to follow: its exact ranks never come from (or build) a rank mirror
    assert not b.replica.fanout.mirrors and not b.replica.fanout._mirror_builds
    assert not b.replica.fanout.mirror_stats
    # with the version table no top read asked the shards for the version
    assert (b.replica.version_rounds == 0) == (b.replica._slot != {})
    with pytest.raises(PlayerNotFound):
        await b.player(B, "nobody")


async def test_a_replica_never_builds_a_rank_mirror(setup):
    """Its board control knows no changes (no delta ring): a mirror there could never follow the board."""
    eng, _, (a, b) = setup
    await a.submit(events(random.Random(1), 0, 30))
    pid = (await eng.top(B, 0, 1)).entries[0].player_id
    assert await b.player(B, pid) == await eng.player(B, pid)  # the replica's first read of the board
    await asyncio.sleep(0.05)
    assert not b.replica.fanout.mirrors and not b.replica.fanout._mirror_builds and not b.replica.fanout.mirror_stats


async def test_concurrent_writes_never_tear_a_replica_cut(setup):
    eng, _, (a, b) = setup
    rnd = random.Random(9)
    stop = False

    async def writer():
        i = 0
        while not stop:
            await eng.submit(events(rnd, 10_000 + i * 20, 20))
            i += 1
            await asyncio.sleep(0)

    task = asyncio.ensure_future(writer())
    try:
        for _ in range(40):
            page, info = await b.top(B, 0, 1000), None
            info = await eng.board(B)
            assert page.version <= info.version
            ranks = [e.rank for e in page.entries]
            assert ranks == list(range(1, len(ranks) + 1))
            keys = [(-e.value, e.achieved_at, e.player_id) for e in page.entries]
            assert keys == sorted(keys) and len({e.player_id for e in page.entries}) == len(keys)
    finally:
        stop = True
        await task


async def test_a_cursor_from_one_gateway_pages_on_the_other(setup):
    eng, host, (a, b) = setup
    await eng.submit(events(random.Random(1), 0, 200, players=120))
    first = await a.top(B, 0, 10)  # a replica builds the page-1 view: the host has it too
    await eng.submit(events(random.Random(2), 500, 20, players=120))  # the board moves on
    second = await b.top(B, 10, 10, at_version=first.version)  # b's replica has no such view: the host answers
    assert second.version == first.version and [e.rank for e in second.entries] == list(range(11, 21))
    assert host.engine.router.fanout.view(B, first.version) is not None


async def test_boards_are_learned_and_unknown_ones_answered_by_the_host(setup):
    eng, _, (a, b) = setup
    with pytest.raises(BoardNotFound):
        await b.top("g:m:s:later", 0, 10)
    await a.create_board(BoardSpec("g:m:s:later", Policy.FASTEST_TIME))
    await a.submit([ScoreEvent("g:m:s:later", "t1", "p1", 5000, 1, 1)])
    page = await b.top("g:m:s:later", 0, 10)
    assert [e.player_id for e in page.entries] == ["p1"] and "g:m:s:later" in b.replica.fanout.boards


async def test_an_archive_waits_for_every_gateway_then_reads_go_to_the_archive(setup):
    eng, host, (a, b) = setup
    await eng.submit(events(random.Random(3), 0, 100))
    before = await b.top(B, 0, 50)
    await a.top(B, 0, 5)  # both gateways read the board from the shards
    for state in (BoardState.FROZEN, BoardState.FINALIZED, BoardState.ARCHIVED):
        await a.set_state(B, state)
    for _ in range(500):  # the archive is built in the background
        if eng.router.boards[B].archive is not None and not eng.router.cut._readers:
            break
        await asyncio.sleep(0.01)
    assert eng.router.boards[B].archive is not None
    assert all(after >= host._notices[-1].seq for after in host._polled.values())  # both polled past the notice
    assert B not in a.replica.fanout.boards and B not in b.replica.fanout.boards
    after = await b.top(B, 0, 50)  # from the archive, through the host
    assert after.entries == before.entries and after.version == before.version
    assert sum(len(p) for core in eng.cores for p in core.parts.get(B, {}).values()) == 0  # the shards dropped it


async def test_forget_waits_for_the_replicas_reads_in_flight(setup):
    eng, _, (a, _) = setup
    await a.top(B, 0, 1)
    ctl = a.replica.fanout.boards[B]
    ctl.shard_reads += 1  # a read in flight
    done = asyncio.ensure_future(a.replica.forget(B))
    await asyncio.sleep(0.05)
    assert not done.done()
    ctl.shard_reads -= 1
    await asyncio.wait_for(done, 1)
    assert not await a.replica.serves(B)


def test_version_table_is_shared_by_path_and_token(tmp_path):
    from engine.runtime.version_table import VersionTable

    table = VersionTable.create(tmp_path / "v", slots=2)
    assert table.slot("a") == 0 and table.slot("b") == 1 and table.slot("c") is None  # full: read from shards
    table.publish("b", 41)
    table.publish("c", 7)  # no slot: ignored
    reader = VersionTable.open(tmp_path / "v", table.token)
    assert reader is not None and reader.read(1) == 41
    table.publish("b", 42)
    assert reader.read(1) == 42  # the same pages
    assert VersionTable.open(tmp_path / "v", b"x" * 16) is None  # another host's table (another machine)
    assert VersionTable.open(tmp_path / "none", table.token) is None
    reader.close()
    table.close(unlink=True)
    assert not (tmp_path / "v").exists()

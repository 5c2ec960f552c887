"""RemoteEngine ↔ EngineHost over the pickled bytes a Ray actor carries
(engine.runtime.remote, engine.runtime.host): what ``--workers N`` gateways
rely on, without Ray. The HTTP suites run over the same pair too
(tests/gateway/conftest.py, the ``2-workers`` harness)."""

from __future__ import annotations

import asyncio

import pytest

from engine.runtime.host import Call, EngineHost, LocalChannel, dumps, loads
from engine.core.errors import BoardNotFound, Overloaded, PlayerNotFound
from engine.core.model import BoardSpec, Policy, ScoreEvent
from engine.runtime.remote import LOST, RemoteEngine
from engine.runtime.local import LocalService

pytestmark = pytest.mark.anyio
B = "g:m:s:remote"


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.fixture
async def pair():
    eng = await LocalService.open(data_dir=None, n_shards=2)
    await eng.create_board(BoardSpec(B, Policy.BEST_SCORE))
    host = EngineHost(eng)
    remote = RemoteEngine(LocalChannel(host))
    yield eng, host, remote
    await remote.close()
    await host.close()
    await eng.close()


def ev(i: int, value: int, board: str = B) -> ScoreEvent:
    return ScoreEvent(board, f"e{i}", f"p{i}", value, 1000 + i, 1000 + i)


async def test_answers_equal_the_engine_and_one_message_carries_a_turn(pair):
    eng, _, remote = pair
    results = await remote.submit([ev(i, 10 * i) for i in range(20)])
    assert [r.version for r in results] == list(range(1, 21))
    sent = remote.calls_sent
    pages = await asyncio.gather(*(remote.top(B, 0, 5) for _ in range(30)),
                                 *(remote.player(B, f"p{i}") for i in range(20)))
    assert remote.calls_sent - sent <= 2  # 50 calls of one turn: one message (two while one is in flight)
    assert pages[0] == await eng.top(B, 0, 5)
    assert [p.rank for p in pages[30:]] == list(range(20, 0, -1))
    assert await remote.board(B) == await eng.board(B)
    assert await remote.checksum(B) == await eng.checksum(B)
    assert await remote.ready() is True
    assert (await remote.connect()).default_shards == eng.default_shards  # boards created without shards agree


async def test_engine_errors_come_back_as_themselves(pair):
    _, _, remote = pair
    with pytest.raises(PlayerNotFound) as got:
        await remote.player(B, "nobody")
    assert got.value.code == "PLAYER_NOT_FOUND" and got.value.field == "player_id"
    with pytest.raises(BoardNotFound):
        await remote.top("g:m:s:none", 0, 10)
    # one failing call does not fail the others of its message
    ok, bad = await asyncio.gather(remote.list_boards(), remote.board("g:m:s:none"), return_exceptions=True)
    assert [b.board_id for b in ok] == [B] and isinstance(bad, BoardNotFound)


async def test_the_host_runs_only_the_engine_calls_it_names(pair):
    _, host, _ = pair
    [reply] = loads(await host.call(dumps([Call("close")])))
    assert not reply.ok and "no call 'close'" in str(reply.value)


async def test_an_unreachable_host_is_overloaded_for_every_caller():
    class Down:
        async def call(self, payload):
            raise ConnectionError("gone")

        async def feed(self, gateway, after, timeout_s):
            raise ConnectionError("gone")

    remote = RemoteEngine(Down())
    got = await asyncio.gather(remote.top(B, 0, 1), remote.board(B), return_exceptions=True)
    assert all(isinstance(g, Overloaded) and g.retry_after == 1 for g in got)
    assert await remote.ready() is False
    await remote.close()


async def test_commits_of_watched_boards_reach_the_listeners(pair):
    eng, host, remote = pair
    other = "g:m:s:other"
    await eng.create_board(BoardSpec(other, Policy.BEST_SCORE))
    seen: list[tuple[str, list]] = []
    remote.subscribe(lambda board_id, deltas: seen.append((board_id, [c.player_id for d in deltas for c in d.changes])))
    assert eng.router.listeners == []  # nobody watches: the engine builds no deltas
    remote.watch(B)
    await remote.board(B)  # the watch went out with this turn
    assert len(eng.router.listeners) == 1
    await eng.submit([ev(1, 50), ev(2, 60, board=other)])
    await eng.submit([ev(3, 70)])
    for _ in range(200):
        if len(seen) >= 2:
            break
        await asyncio.sleep(0.01)
    assert seen == [(B, ["p1"]), (B, ["p3"])]  # the other board's commit is not sent
    remote.unwatch(B)
    await remote.board(B)
    assert eng.router.listeners == []


async def test_a_poller_that_fell_behind_is_told_so(pair):
    eng, host, remote = pair
    host.max_buffered_changes = 2
    seq = host._watch("slow", [B])
    await eng.submit([ev(1, 1)])
    await eng.submit([ev(2, 2)])
    await eng.submit([ev(3, 3)])
    feed = loads(await host.feed("slow", seq, 0.01))
    assert feed.lost and feed.seq == seq + 3
    assert [c.seq for c in feed.commits] == [seq + 2, seq + 3]
    feed = loads(await host.feed("slow", feed.seq, 0.01))  # up to date: waits, then nothing
    assert not feed.lost and feed.commits == ()
    assert LOST[0].changes == ()


async def test_export_comes_in_chunks_and_an_abandoned_one_is_closed(pair):
    eng, host, remote = pair
    await eng.submit([ev(i, i) for i in range(25)])
    local = [c.entries() async for c in eng.export(B, page_rows=10)]
    remote_chunks = [c.entries() async for c in remote.export(B, page_rows=10)]
    assert remote_chunks == local and sum(map(len, local)) == 25
    agen = remote.export(B, page_rows=10)
    first = await agen.__anext__()
    assert len(first) == 10 and len(host._exports) == 1
    await agen.aclose()
    assert host._exports == {}
    with pytest.raises(BoardNotFound):
        await remote.export("g:m:s:none").__anext__()


async def test_stats_are_the_host_engines(pair):
    eng, _, remote = pair
    await remote.submit([ev(1, 5)])
    assert remote.stats() == {}
    await remote.refresh_stats()
    assert remote.stats()["outcomes"] == eng.stats()["outcomes"]


async def test_a_gateway_that_stopped_polling_is_forgotten(pair):
    eng, host, remote = pair
    host._watch("dead", [B])
    await host.feed("dead", 0, 0.001)  # it polled once, then died
    assert "dead" in host._polled and len(eng.router.listeners) == 1
    host.gone_after_s = 0.0
    await asyncio.sleep(0.01)
    await host.feed("alive", 0, 0.001)  # the next poll of anyone sweeps it
    assert "dead" not in host._polled and "dead" not in host._watching
    assert eng.router.listeners == []  # nobody watches any more: the engine builds no deltas

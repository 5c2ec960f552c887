"""Live windows: LiveHub over an in-process engine, and SSE over a real server."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from engine.core.errors import Overloaded
from engine.core.model import BoardSpec, Invalidation, Policy, ScoreEvent
from gateway.live import LiveHub
from tests.gateway.conftest import thread_server

pytestmark = pytest.mark.anyio
B = "g:m:s:live"


def parse(msg: str) -> tuple[str, int, dict]:
    fields = dict(line.split(": ", 1) for line in msg.strip().split("\n"))
    return fields["event"], int(fields["id"]), json.loads(fields["data"])


class Mirror:
    """What a client holds: apply changes, re-sort (best_score), truncate to N."""

    def __init__(self, n):
        self.n, self.rows, self.version = n, {}, None

    def apply(self, msg: str):
        kind, vid, data = parse(msg)
        if kind == "snapshot":
            self.rows = {e["player_id"]: (e["value"], e["achieved_at"]) for e in data["entries"]}
        else:
            assert data["base_version"] == self.version, (data["base_version"], self.version)
            for c in data["changes"]:
                if c["status"] == "ACTIVE":
                    self.rows[c["player_id"]] = (c["value"], c["achieved_at"])
                else:
                    self.rows.pop(c["player_id"], None)
        assert vid == data["version"]
        self.version = data["version"]
        order = sorted(self.rows.items(), key=lambda kv: (-kv[1][0], kv[1][1], kv[0]))[: self.n]
        self.rows = dict(order)
        return kind

    def ids(self):
        return list(self.rows)


@pytest.fixture(params=[1, 2], ids=["1-worker", "2-workers"])
async def gateway_side(request):
    """What a hub holds as its engine: the engine itself (one gateway), or a
    RemoteEngine to an EngineHost over it (a worker of ``--workers N``, whose
    commits come through the host's feed)."""
    from engine.runtime.host import EngineHost, LocalChannel  # noqa: PLC0415
    from engine.runtime.remote import RemoteEngine  # noqa: PLC0415

    remotes = []

    async def side(eng):
        if request.param == 1:
            return eng
        remotes.append(RemoteEngine(LocalChannel(EngineHost(eng))))
        return remotes[-1]

    yield side
    for r in remotes:
        await r.close()


async def fresh(engines, n_players=8, delta_retention=10_000):
    eng = await engines(delta_retention=delta_retention)
    await eng.create_board(BoardSpec(B, Policy.BEST_SCORE))
    await eng.submit([ScoreEvent(B, f"e{i}", f"p{i}", 100 * i, 1000 + i, 1000 + i) for i in range(n_players)])
    return eng


def ev(eid, pid, value, at=5000):
    return ScoreEvent(B, eid, pid, value, at, at)


async def top_ids(eng, n):
    return [e.player_id for e in (await eng.top(B, 0, n)).entries]


async def drain(sub) -> list[str]:
    out = []
    while not sub.queue.empty():
        out.append(sub.queue.get_nowait())
    return out


async def settle(hub):
    """Until every group has flushed what it was told of (at most 5 s: a loaded
    machine can delay the hub's flush well past its window)."""
    await asyncio.sleep(hub.window_s * 3)
    for _ in range(500):
        if all(not g.pending and g.timer is None and not g.flushing for g in hub._groups.values()):
            return
        await asyncio.sleep(0.01)


async def test_snapshot_then_coalesced_deltas_reproduce_the_window(engines, gateway_side):
    eng = await fresh(engines)
    hub = LiveHub(await gateway_side(eng), window_s=0.02)
    hub.start()
    sub = await hub.subscribe(B, 3)
    mirror = Mirror(3)
    [first] = await drain(sub)
    assert mirror.apply(first) == "snapshot" and mirror.version == 8
    assert mirror.ids() == await top_ids(eng, 3)
    # two commits inside one window -> one delta (coalesced)
    await eng.submit([ev("x1", "p1", 5000)])
    await eng.submit([ev("x2", "p2", 6000)])
    await settle(hub)
    msgs = await drain(sub)
    assert len(msgs) == 1
    kind, vid, data = parse(msgs[0])
    assert (kind, vid, data["base_version"], data["version"]) == ("delta", 10, 8, 10)
    mirror.apply(msgs[0])
    assert mirror.ids() == await top_ids(eng, 3)
    # a change below the window sends nothing
    await eng.submit([ev("x3", "p0", 1)])
    await settle(hub)
    assert await drain(sub) == []
    # an invalidation inside the window: p2 falls back to its older 200 and leaves the window
    await eng.invalidate(Invalidation(B, "x2"))
    await settle(hub)
    msgs = await drain(sub)
    assert len(msgs) == 1
    mirror.apply(msgs[0])
    assert mirror.ids() == await top_ids(eng, 3)
    assert {"player_id": "p2", "value": 200, "achieved_at": "1970-01-01T00:00:01.002Z", "status": "ACTIVE"} in \
        parse(msgs[0])[2]["changes"]
    await hub.close()


async def test_work_is_per_group_not_per_subscriber(engines, gateway_side):
    eng = await fresh(engines)
    hub = LiveHub(await gateway_side(eng), window_s=0.02)
    hub.start()
    subs = [await hub.subscribe(B, 3) for _ in range(50)] + [await hub.subscribe(B, 5)]
    assert hub.group_count == 2 and hub.subscriber_count == 51
    await eng.submit([ev("x1", "p1", 5000)])
    await settle(hub)
    assert hub.flushes == 2
    for s in subs:
        assert len(await drain(s)) == 2  # snapshot + one delta
    for s in subs:
        hub.unsubscribe(s)
    assert hub.group_count == 0 and hub.subscriber_count == 0
    await hub.close()


async def test_reconnect_contiguous_replay_or_snapshot(engines, gateway_side):
    eng = await fresh(engines, n_players=8, delta_retention=1000)
    hub = LiveHub(await gateway_side(eng), window_s=0.02)
    hub.start()
    keeper = await hub.subscribe(B, 3)  # keeps the group alive
    for i in range(6):
        await eng.submit([ev(f"y{i}", f"p{i}", 2000 + 100 * i)])
    await settle(hub)
    old = Mirror(3)
    # a client that saw version 8's window reconnects with Last-Event-ID 8
    old.rows = {p: None for p in ["p7", "p6", "p5"]}
    page8 = {"p7": (700, "x"), "p6": (600, "x"), "p5": (500, "x")}
    old.rows, old.version = page8, 8
    sub = await hub.subscribe(B, 3, since_version=8)
    [msg] = await drain(sub)
    kind, vid, data = parse(msg)
    assert kind == "delta" and data["base_version"] == 8 and vid == data["version"] == 14
    old.apply(msg)
    assert old.ids() == await top_ids(eng, 3)
    # up to date: nothing to send
    sub2 = await hub.subscribe(B, 3, since_version=14)
    assert await drain(sub2) == []
    # a version the server never had -> snapshot
    sub3 = await hub.subscribe(B, 3, since_version=999)
    assert parse((await drain(sub3))[0])[0] == "snapshot"
    for s in (keeper, sub, sub2, sub3):
        hub.unsubscribe(s)
    await hub.close()

    eng2 = await fresh(engines, n_players=8, delta_retention=2)
    for i in range(6):
        await eng2.submit([ev(f"y{i}", f"p{i}", 2000 + 100 * i)])
    hub2 = LiveHub(await gateway_side(eng2), window_s=0.02)
    hub2.start()
    sub = await hub2.subscribe(B, 3, since_version=8)  # 9.. are gone
    kind, vid, data = parse((await drain(sub))[0])
    assert kind == "snapshot" and vid == 14 and [e["player_id"] for e in data["entries"]] == await top_ids(eng2, 3)
    await hub2.close()


async def test_slow_subscriber_is_skipped_forward_to_a_snapshot(engines, gateway_side):
    eng = await fresh(engines)
    hub = LiveHub(await gateway_side(eng), window_s=0.005, queue_size=2)
    hub.start()
    sub = await hub.subscribe(B, 3)
    for i in range(6):
        await eng.submit([ev(f"z{i}", f"p{i % 3}", 10_000 + i)])
        await asyncio.sleep(0.02)
    final = (await eng.board(B)).version
    for _ in range(500):  # the hub's last flush can lag on a loaded machine: wait for it (at most 5 s)
        if all(g.version == final and not g.pending and not g.flushing for g in hub._groups.values()):
            break
        await asyncio.sleep(0.01)
    msgs = await drain(sub)
    assert len(msgs) <= 2
    mirror = Mirror(3)
    kinds = [mirror.apply(m) for m in msgs if parse(m)[0] == "snapshot" or mirror.version is not None]
    assert "snapshot" in kinds
    assert mirror.ids() == await top_ids(eng, 3) and mirror.version == (await eng.board(B)).version
    await hub.close()


async def test_caps_answer_overloaded(engines, gateway_side):
    eng = await fresh(engines)
    hub = LiveHub(await gateway_side(eng), max_total=3, max_per_board=2)
    s1, _s2 = await hub.subscribe(B, 3), await hub.subscribe(B, 4)
    with pytest.raises(Overloaded):
        await hub.subscribe(B, 3)
    with pytest.raises(Exception) as ei:
        await hub.subscribe("g:m:s:none", 3)
    assert ei.value.code == "BOARD_NOT_FOUND"
    assert hub.subscriber_count == 2
    hub.unsubscribe(s1)
    await hub.subscribe(B, 3)
    await hub.close()


# ------------------------------------------------------------------ over a real server


@pytest.fixture(params=[1, 2], ids=["1-worker", "2-workers"])
def server(request):
    with thread_server(workers=request.param) as url:
        yield url


class SSEReader:
    def __init__(self, resp):
        self._it, self._buf = resp.iter_text(), ""

    def read(self, count: int) -> list[str]:
        out = []
        while len(out) < count:
            while "\n\n" not in self._buf:
                self._buf += next(self._it)
            block, self._buf = self._buf.split("\n\n", 1)
            if not block.startswith(":"):
                out.append(block + "\n\n")
        return out


def _read_messages(reader, count: int) -> list[str]:
    return reader.read(count)


def test_sse_snapshot_delta_and_last_event_id(server):
    from tests.gateway.conftest import BOARD, SEED_EVENTS, H

    with httpx.Client(base_url=server, timeout=10) as c:
        assert c.post("/v1/boards", json={"board_id": BOARD, "policy": "best_score"}, headers=H("admin")).status_code == 201
        c.post("/v1/events", json={"events": SEED_EVENTS}, headers=H("game_server"))
        with c.stream("GET", f"/v1/boards/{BOARD}/live", params={"top": 3}, headers=H("reader")) as resp:
            assert resp.status_code == 200
            assert resp.headers["content-type"].startswith("text/event-stream")
            it = SSEReader(resp)
            [snap] = _read_messages(it, 1)
            kind, vid, data = parse(snap)
            assert (kind, vid, data["version"]) == ("snapshot", 5, 5)
            assert [e["player_id"] for e in data["entries"]] == ["p-ava", "p-ben", "p-chloe"]
            ev = {"event_id": "evt-101", "board_id": BOARD, "player_id": "p-dev", "value": 9700,
                  "achieved_at": "2026-11-01T10:05:00Z"}
            r = c.post("/v1/events", json={"events": [ev]}, headers=H("game_server"))
            version = r.json()["results"][0]["version"]
            [delta] = _read_messages(it, 1)
            kind, vid, data = parse(delta)
            assert kind == "delta" and vid == version == data["version"] == 6 and data["base_version"] == 5
            assert data["changes"] == [{"player_id": "p-dev", "value": 9700,
                                        "achieved_at": "2026-11-01T10:05:00.000Z", "status": "ACTIVE"}]
        # more changes while disconnected, then resume with Last-Event-ID
        ev2 = {"event_id": "evt-102", "board_id": BOARD, "player_id": "p-eli", "value": 9900,
               "achieved_at": "2026-11-01T10:06:00Z"}
        c.post("/v1/events", json={"events": [ev2]}, headers=H("game_server"))
        headers = {**H("reader"), "Last-Event-ID": "6"}
        with c.stream("GET", f"/v1/boards/{BOARD}/live", params={"top": 3}, headers=headers) as resp:
            [msg] = _read_messages(SSEReader(resp), 1)
            kind, vid, data = parse(msg)
            assert kind == "delta" and data["base_version"] == 6 and vid == data["version"] == 7
            mirror = Mirror(3)
            mirror.rows = {"p-ava": (9800, "2026-11-01T09:58:00.000Z"), "p-dev": (9700, "2026-11-01T10:05:00.000Z"),
                           "p-ben": (9500, "2026-11-01T10:01:00.000Z")}
            mirror.version = 6
            mirror.apply(msg)
            assert mirror.ids() == ["p-eli", "p-ava", "p-dev"]
        r = c.get(f"/v1/boards/{BOARD}/live", params={"top": 0}, headers=H("reader"))
        assert r.status_code == 422 and r.json()["error"]["field"] == "top"
        r = c.get("/v1/boards/g:m:s:none/live", headers=H("reader"))
        assert r.status_code == 404


def test_sse_on_a_series_streams_its_current_window_s_instance(server):
    """docs/api.md §15: /live on a series id is the window of the instance current at connect time."""
    import time

    from tests.gateway.conftest import H

    series = "g:m:daily:live"
    now = time.time_ns() // 1_000_000
    with httpx.Client(base_url=server, timeout=10) as c:
        r = c.post("/v1/boards", json={"board_id": series, "policy": "best_score", "recurrence": {"every": "day"}},
                   headers=H("admin"))
        assert r.status_code == 201, r.text
        current = r.json()["current"]
        events = [{"event_id": f"e{i}", "board_id": series, "player_id": f"p{i}", "value": i, "achieved_at": now}
                  for i in range(1, 4)]
        assert {x["board_id"] for x in c.post("/v1/events", json={"events": events},
                                              headers=H("game_server")).json()["results"]} == {current}
        with c.stream("GET", f"/v1/boards/{series}/live", params={"top": 2}, headers=H("reader")) as resp:
            assert resp.status_code == 200
            it = SSEReader(resp)
            kind, vid, data = parse(_read_messages(it, 1)[0])
            assert (kind, vid) == ("snapshot", 3) and [e["player_id"] for e in data["entries"]] == ["p3", "p2"]
            r = c.post("/v1/events", json={"events": [{"event_id": "e9", "board_id": series, "player_id": "p9",
                                                       "value": 9, "achieved_at": now}]}, headers=H("game_server"))
            kind, vid, data = parse(_read_messages(it, 1)[0])
            assert kind == "delta" and vid == 4 and data["changes"][0]["player_id"] == "p9"

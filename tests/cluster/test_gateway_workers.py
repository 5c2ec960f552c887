"""Two gateway processes, one engine (issue 11: gateways that scale out).

The test process opens an engine host actor on the session Ray and starts two
real ``flowrank serve --engine-host NAME --ray-address ADDR`` processes on
their own ports. Writes go through either gateway and reads through the
other: every acknowledged event is visible at once, versions agree, cursors
and live streams (with ``Last-Event-ID`` reconnects) carry over from one
gateway to the other.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
import uuid

import httpx
import pytest

from benchmarks.processes import Owned
from tests.loopback import free_port

pytestmark = pytest.mark.cluster
BOARD = "two:gw:S1:global"
KEYS = {"admin": "tg-admin", "game_server": "tg-gs", "reader": "tg-reader"}
PLAYERS = 30


def H(role: str) -> dict:
    return {"Authorization": f"Bearer {KEYS[role]}"}


@pytest.fixture
def two_gateways(ray_session, tmp_path):
    from engine.cluster.host_actor import start_host  # noqa: PLC0415

    name = f"flowrank-engine-{uuid.uuid4().hex[:8]}"
    data = tmp_path / "data"
    actor = asyncio.run(start_host(dict(data_dir=str(data), n_shards=2), name, warm_kernels=False))  # no warm round
    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps({"keys": [{"name": r, "role": r, "key": k} for r, k in KEYS.items()]}))
    address = ray_session.get_runtime_context().gcs_address
    owned, urls = [], []
    try:
        for i in range(2):
            port = free_port()
            log = open(tmp_path / f"gateway-{i}.log", "w")
            o = Owned([sys.executable, "-m", "gateway", "serve", "--engine-host", name, "--ray-address", address,
                       "--host", "127.0.0.1", "--port", port, "--data-dir", data, "--keys", keys,
                       "--write-rate", "100000", "--graceful-timeout", "2", "--live-window-ms", "10"],
                      stdout=log, stderr=log)
            o.start()
            owned.append(o)
            urls.append(f"http://127.0.0.1:{port}")
        for url, o in zip(urls, owned):
            deadline = time.monotonic() + 60
            while True:
                assert o.proc.poll() is None, (tmp_path / "gateway-0.log").read_text()[-3000:]
                try:
                    if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert time.monotonic() < deadline, "gateway not ready"
                time.sleep(0.1)
        yield urls
        for o in owned:
            assert o.stop() == 0  # SIGTERM: drains, closes its RemoteEngine, exits 0
    finally:
        for o in owned:
            o.stop()
        ray_session.get(actor.close.remote())
        ray_session.kill(actor)


def events(first: int, n: int) -> list[dict]:
    return [{"event_id": f"e{i}", "board_id": BOARD, "player_id": f"p{i % PLAYERS}", "value": (i * 7919) % 10007,
             "achieved_at": 1_793_527_200_000 + i} for i in range(first, first + n)]


async def _write_read(clients: list[httpx.AsyncClient], writer: int, first: int, batches: int, acked: dict) -> None:
    """Post batches through gateway ``writer``; after each acknowledgement read through the other."""
    w, r = clients[writer], clients[1 - writer]
    for b in range(batches):
        batch = events(first + b * 20, 20)
        resp = await w.post("/v1/events", json={"events": batch}, headers=H("game_server"))
        assert resp.status_code == 200, resp.text
        results = resp.json()["results"]
        for e in batch:
            acked[e["event_id"]] = e
        newest = max(x["version"] for x in results)
        board = (await r.get(f"/v1/boards/{BOARD}", headers=H("reader"))).json()
        assert board["version"] >= newest  # acknowledged through one gateway: visible through the other
        best = max(batch, key=lambda e: (e["value"], -e["achieved_at"]))
        row = (await r.get(f"/v1/boards/{BOARD}/players/{best['player_id']}", headers=H("reader"))).json()
        assert row["value"] >= best["value"] and row["version"] >= newest


def test_writes_through_either_gateway_reads_through_the_other(two_gateways):
    a, b = two_gateways
    r = httpx.post(f"{a}/v1/boards", json={"board_id": BOARD, "policy": "best_score", "shards": 2},
                   headers=H("admin"), timeout=30)
    assert r.status_code == 201, r.text
    acked: dict[str, dict] = {}

    async def run():
        async with httpx.AsyncClient(base_url=a, timeout=30) as ca, httpx.AsyncClient(base_url=b, timeout=30) as cb:
            await asyncio.gather(_write_read([ca, cb], 0, 0, 15, acked), _write_read([ca, cb], 1, 100_000, 15, acked))

    asyncio.run(run())
    assert len(acked) == 600
    best: dict[str, dict] = {}
    for e in acked.values():
        cur = best.get(e["player_id"])
        if cur is None or (-e["value"], e["achieved_at"]) < (-cur["value"], cur["achieved_at"]):
            best[e["player_id"]] = e
    expect = [(e["player_id"], e["value"]) for e in
              sorted(best.values(), key=lambda e: (-e["value"], e["achieved_at"], e["player_id"]))]
    tops = [httpx.get(f"{u}/v1/boards/{BOARD}/top", params={"limit": 100}, headers=H("reader")).json() for u in (a, b)]
    assert tops[0] == tops[1]
    assert [(e["player_id"], e["value"]) for e in tops[0]["entries"]] == expect
    boards = [httpx.get(f"{u}/v1/boards/{BOARD}", headers=H("reader")).json() for u in (a, b)]
    assert boards[0] == boards[1] and boards[0]["version"] == tops[0]["version"]
    # a redelivery through the other gateway is a duplicate: one dedup state behind both
    again = httpx.post(f"{b}/v1/events", json={"events": events(0, 20)}, headers=H("game_server")).json()
    assert {x["outcome"] for x in again["results"]} == {"DUPLICATE_IGNORED"}


def test_cursors_and_live_reconnects_carry_over(two_gateways):
    a, b = two_gateways
    assert httpx.post(f"{a}/v1/boards", json={"board_id": BOARD, "policy": "best_score"},
                      headers=H("admin")).status_code == 201
    httpx.post(f"{a}/v1/events", json={"events": events(0, 60)}, headers=H("game_server")).raise_for_status()
    page1 = httpx.get(f"{a}/v1/boards/{BOARD}/top", params={"limit": 10}, headers=H("reader")).json()
    httpx.post(f"{a}/v1/events", json={"events": events(60, 5)}, headers=H("game_server")).raise_for_status()
    page2 = httpx.get(f"{b}/v1/boards/{BOARD}/top", params={"limit": 10, "cursor": page1["next_cursor"]},
                      headers=H("reader")).json()
    assert page2["version"] == page1["version"]  # the pinned version, through the other gateway
    assert page2["entries"][0]["rank"] == 11
    with httpx.Client(timeout=10) as c:
        with c.stream("GET", f"{b}/v1/boards/{BOARD}/live", params={"top": 3}, headers=H("reader")) as resp:
            lines = resp.iter_lines()
            snap = _message(lines)
            assert snap["event"] == "snapshot"
            top_ev = {"event_id": "x1", "board_id": BOARD, "player_id": "p-new", "value": 20_000,
                      "achieved_at": 1_793_527_300_000}
            ack = c.post(f"{a}/v1/events", json={"events": [top_ev]}, headers=H("game_server")).json()
            version = ack["results"][0]["version"]
            delta = _message(lines)  # a write through A reaches a live stream served by B
            assert delta["event"] == "delta" and delta["id"] == version
            assert delta["data"]["changes"][0]["player_id"] == "p-new"
        httpx.post(f"{b}/v1/events", json={"events": [dict(top_ev, event_id="x2", player_id="p-newer",
                                                             value=30_000)]}, headers=H("game_server"))
        headers = {**H("reader"), "Last-Event-ID": str(version)}
        with c.stream("GET", f"{a}/v1/boards/{BOARD}/live", params={"top": 3}, headers=headers) as resp:
            msg = _message(resp.iter_lines())  # resumed on A from B's stream position
            assert msg["event"] == "delta" and msg["data"]["base_version"] == version
            assert msg["id"] == version + 1 and msg["data"]["changes"][0]["player_id"] == "p-newer"


def _message(lines) -> dict:
    fields: dict = {}
    for line in lines:
        if line.startswith(":"):
            continue
        if not line:
            if fields:
                return {"event": fields["event"], "id": int(fields["id"]), "data": json.loads(fields["data"])}
            continue
        k, v = line.split(": ", 1)
        fields[k] = v
    raise AssertionError("stream ended")

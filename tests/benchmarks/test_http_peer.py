"""The HTTP benchmark's FastAPI + Redis peer answers as FlowRank does (skipped without redis-server).

Same events through both apps' ``POST /v1/events`` (the design's tie example,
a redelivery, an id conflict, a non-improvement), then the same reads: the
outcomes, the top page, exact ranks and an around window must agree. A few
seconds: one private redis-server, both apps in process.
"""

from __future__ import annotations

import json
import shutil

import httpx
import pytest

from benchmarks.http_load import ADMIN_KEY, READ_KEY, WRITE_KEY
from benchmarks.redis_peer import RedisServer
from engine.runtime.local import LocalService
from gateway.app import create_app
from gateway.settings import Settings

pytestmark = [pytest.mark.anyio,
              pytest.mark.skipif(shutil.which("redis-server") is None, reason="redis-server not installed")]

BOARD = "bench:http:S1:peer"
KEYS = [{"name": "r", "role": "reader", "key": READ_KEY}, {"name": "g", "role": "game_server", "key": WRITE_KEY},
        {"name": "a", "role": "admin", "key": ADMIN_KEY}]


def _ev(eid, pid, value, at):
    return {"event_id": eid, "board_id": BOARD, "player_id": pid, "value": value, "achieved_at": at}


EVENTS = [_ev("e1", "p-ava", 9800, "2026-11-01T09:58:00Z"), _ev("e2", "p-ben", 9500, "2026-11-01T10:01:00Z"),
          _ev("e3", "p-chloe", 9500, "2026-11-01T10:02:00Z"), _ev("e4", "p-dev", 9100, "2026-11-01T10:03:00Z"),
          _ev("e5", "p-eli", 8700, "2026-11-01T10:04:00Z")]
LATER = [_ev("e2", "p-ben", 9500, "2026-11-01T10:01:00Z"),  # redelivery
         _ev("e3", "p-ben", 1, "2026-11-01T10:09:00Z"),  # same id, other content
         _ev("e6", "p-dev", 9000, "2026-11-01T10:05:00Z"),  # not an improvement
         _ev("e7", "p-eli", 9600, "2026-11-01T10:06:00Z"), _ev("e8", "not-on-board", 1, 1)]
LATER[-1]["board_id"] = "no:such:board:x"


async def _run(client: httpx.AsyncClient) -> dict:
    h = {"admin": {"Authorization": f"Bearer {ADMIN_KEY}"}, "gs": {"Authorization": f"Bearer {WRITE_KEY}"},
         "r": {"Authorization": f"Bearer {READ_KEY}"}}
    r = await client.post("/v1/boards", json={"board_id": BOARD, "policy": "best_score"}, headers=h["admin"])
    assert r.status_code == 201, r.text
    out = {}
    for name, batch in (("first", EVENTS), ("later", LATER)):
        r = await client.post("/v1/events", json={"events": batch}, headers=h["gs"])
        assert r.status_code == 200, r.text
        out[name] = [(x["event_id"], x["outcome"]) for x in r.json()["results"]]
    out["bad"] = (await client.post("/v1/events", json={"events": 3}, headers=h["gs"])).json()
    top = (await client.get(f"/v1/boards/{BOARD}/top?limit=3", headers=h["r"])).json()
    out["top"] = (top["version"], top["entries"], top["next_cursor"] is not None)
    for pid in ("p-ben", "p-chloe", "p-eli"):
        p = (await client.get(f"/v1/boards/{BOARD}/players/{pid}", headers=h["r"])).json()
        out[pid] = (p["rank"], p["value"], p["achieved_at"], p["version"])
    out["around"] = (await client.get(f"/v1/boards/{BOARD}/players/p-chloe/around?radius=1", headers=h["r"])).json()
    missing = await client.get(f"/v1/boards/{BOARD}/players/p-nobody", headers=h["r"])
    out["missing"] = (missing.status_code, missing.json()["error"]["code"])
    out["unauthenticated"] = (await client.get(f"/v1/boards/{BOARD}/top")).status_code
    return out


async def test_peer_answers_like_flowrank(tmp_path):
    from benchmarks.http_peer import create_peer

    (tmp_path / "keys.json").write_text(json.dumps({"keys": KEYS}))
    engine = await LocalService.open(data_dir=None, n_shards=1)
    try:
        app = create_app(Settings(keys=tuple(KEYS), data_dir=None), engine)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://fr") as c:
            want = await _run(c)
        await app.state.gateway.hub.close()
    finally:
        await engine.close()
    with RedisServer(appendonly=True, appendfsync="always") as rs:
        peer = create_peer(rs.port, str(tmp_path / "keys.json"))
        async with peer.router.lifespan_context(peer):
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=peer), base_url="http://peer") as c:
                got = await _run(c)
    assert got == want

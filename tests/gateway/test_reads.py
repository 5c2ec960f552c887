"""Reads over HTTP (docs/api.md §8): pages and cursors, player, around, friends, subsets, staleness."""

from __future__ import annotations

import json

import httpx
import pytest

from gateway.app import create_app
from gateway.friends import HttpFriends, StaticFriends
from tests.gateway.conftest import BOARD, H, settings

pytestmark = pytest.mark.anyio


async def get(c, path, **params):
    r = await c.get(path, params=params, headers=H("reader"))
    assert r.status_code == 200, r.text
    return r.json()


async def test_top_pages_with_pinned_cursor(seeded):
    c = seeded.client
    p1 = await get(c, f"/v1/boards/{BOARD}/top", limit=2)
    assert p1["version"] == 5 and [e["rank"] for e in p1["entries"]] == [1, 2]
    assert p1["entries"][0] == {"rank": 1, "player_id": "p-ava", "value": 9800,
                                "achieved_at": "2026-11-01T09:58:00.000Z"}
    seen = [e["player_id"] for e in p1["entries"]]
    cursor = p1["next_cursor"]
    while cursor:
        page = await get(c, f"/v1/boards/{BOARD}/top", limit=2, cursor=cursor)
        assert page["version"] == 5
        seen += [e["player_id"] for e in page["entries"]]
        cursor = page["next_cursor"]
    assert seen == ["p-ava", "p-ben", "p-chloe", "p-dev", "p-eli"]
    exact = await get(c, f"/v1/boards/{BOARD}/top", limit=5)
    assert exact["next_cursor"] is None and "stale_ms" not in exact


async def test_cursor_of_a_gone_version_is_410(seeded):
    c = seeded.client
    p1 = await get(c, f"/v1/boards/{BOARD}/top", limit=2)
    ev = {"event_id": "evt-101", "board_id": BOARD, "player_id": "p-dev", "value": 9700,
          "achieved_at": "2026-11-01T10:05:00Z"}
    await c.post("/v1/events", json={"events": [ev]}, headers=H("game_server"))
    r = await c.get(f"/v1/boards/{BOARD}/top", params={"cursor": p1["next_cursor"]}, headers=H("reader"))
    # an engine that still retains version 5 may answer it; otherwise it is 410
    assert r.status_code in (200, 410)
    if r.status_code == 410:
        assert r.json()["error"]["code"] == "VIEW_EXPIRED"
    else:
        assert r.json()["version"] == 5


async def test_player_exact_approximate_and_missing(seeded):
    c = seeded.client
    p = await get(c, f"/v1/boards/{BOARD}/players/p-chloe")
    assert p == {"version": 5, "player_id": "p-chloe", "rank": 3, "value": 9500,
                 "achieved_at": "2026-11-01T10:02:00.000Z", "status": "ACTIVE", "approximate": False,
                 "rank_error_bound": None, "row_version": 1}
    a = await get(c, f"/v1/boards/{BOARD}/players/p-chloe", approximate="true")
    assert a["approximate"] is True and abs(a["rank"] - 3) <= a["rank_error_bound"]
    r = await c.get(f"/v1/boards/{BOARD}/players/p-nobody", headers=H("reader"))
    assert r.status_code == 404 and r.json()["error"]["code"] == "PLAYER_NOT_FOUND"


async def test_around_clamps(seeded):
    c = seeded.client
    w = await get(c, f"/v1/boards/{BOARD}/players/p-chloe/around", radius=1)
    assert [(e["rank"], e["player_id"]) for e in w["entries"]] == [(2, "p-ben"), (3, "p-chloe"), (4, "p-dev")]
    w = await get(c, f"/v1/boards/{BOARD}/players/p-ava/around", radius=1)
    assert [(e["rank"], e["player_id"]) for e in w["entries"]] == [(1, "p-ava"), (2, "p-ben")]
    w = await get(c, f"/v1/boards/{BOARD}/players/p-eli/around", radius=100)
    assert len(w["entries"]) == 5 and w["version"] == 5


async def test_ranked_subset(seeded):
    r = await seeded.client.post(f"/v1/boards/{BOARD}/ranked-subset",
                                 json={"player_ids": ["p-eli", "p-ben", "p-nobody", "p-ben"]}, headers=H("reader"))
    assert r.status_code == 200
    assert [(e["rank"], e["player_id"]) for e in r.json()["entries"]] == [(1, "p-ben"), (2, "p-eli")]


async def _friends_app(engine, friends):
    app = create_app(settings(), engine, friends=friends)
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t")


async def test_friends_view_scenario_e(seeded):
    friends = StaticFriends({"p-ava": ["p-ben", "p-dev", "p-eli"], "p-ben": ["p-ava"]})
    async with await _friends_app(seeded.engine, friends) as c:
        r = await c.get(f"/v1/boards/{BOARD}/players/p-ava/friends", headers=H("reader"))
        assert r.status_code == 200
        body = r.json()
        assert [(e["rank"], e["player_id"], e["value"]) for e in body["entries"]] == [
            (1, "p-ben", 9500), (2, "p-dev", 9100), (3, "p-eli", 8700)]
        assert set(body) == {"version", "player_id", "entries"}  # never anyone's friend list
        r = await c.get(f"/v1/boards/{BOARD}/players/p-zed/friends", headers=H("reader"))
        assert r.json()["entries"] == []


async def test_http_friends_provider_caches_and_degrades():
    calls = []

    def handler(request: httpx.Request):
        calls.append(request.url.raw_path.decode())
        if "down" in request.url.path:
            return httpx.Response(500)
        if "nobody" in request.url.path:
            return httpx.Response(404)
        return httpx.Response(200, json={"friend_ids": ["p-ben", "p-ben", "bad\x00id", "p-dev"]})

    now = [0.0]
    prov = HttpFriends("http://friends.example/", ttl_s=10, clock=lambda: now[0],
                       transport=httpx.MockTransport(handler))
    assert await prov.friends_of("p ava/x") == ["p-ben", "p-dev"]
    assert calls == ["/players/p%20ava%2Fx/friends"]
    await prov.friends_of("p ava/x")
    assert len(calls) == 1  # cached
    now[0] = 11
    await prov.friends_of("p ava/x")
    assert len(calls) == 2  # expired
    assert await prov.friends_of("nobody") == []
    with pytest.raises(Exception) as ei:
        await prov.friends_of("down")
    assert ei.value.code == "OVERLOADED"
    await prov.aclose()


async def test_friends_file(tmp_path):
    f = tmp_path / "friends.json"
    f.write_text(json.dumps({"p-ava": ["p-ben"]}))
    prov = StaticFriends.from_file(str(f))
    assert await prov.friends_of("p-ava") == ["p-ben"] and await prov.friends_of("p-x") == []


async def test_max_staleness_serves_cached_views_with_age(engines):
    now = [100.0]
    engine = await engines()
    app = create_app(settings(), engine, clock=lambda: now[0])
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
        await c.post("/v1/boards", json={"board_id": BOARD, "policy": "best_score"}, headers=H("admin"))
        first = await get(c, f"/v1/boards/{BOARD}/top", max_staleness_ms=1000)
        assert first["stale_ms"] == 0 and first["version"] == 0
        ev = {"event_id": "e1", "board_id": BOARD, "player_id": "p", "value": 1, "achieved_at": 1}
        await c.post("/v1/events", json={"events": [ev]}, headers=H("game_server"))
        now[0] += 0.4
        cached = await get(c, f"/v1/boards/{BOARD}/top", max_staleness_ms=1000)
        assert cached["version"] == 0 and cached["stale_ms"] == 400
        exact = await get(c, f"/v1/boards/{BOARD}/top")
        assert exact["version"] == 1 and "stale_ms" not in exact
        tight = await get(c, f"/v1/boards/{BOARD}/top", max_staleness_ms=100)
        assert tight["version"] == 1 and tight["stale_ms"] == 0

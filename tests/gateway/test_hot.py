"""The lean dispatcher (gateway.hot) answers exactly as FastAPI does.

One engine, two apps over it: ``lean_routes=True`` (the default) and
``lean_routes=False`` (every request through FastAPI). Every request below,
good or bad, must get the same status, the same JSON body and the same
content-type / Retry-After headers from both; reads are replayed in the same
order against both apps, so versions agree.
"""

from __future__ import annotations

import json

import httpx
import pytest

from gateway import hot
from gateway.app import create_app
from gateway.friends import StaticFriends
from gateway.validation import decode_events, encode_cursor, events_from_body
from tests.gateway.conftest import BOARD, SEED_EVENTS, H, open_engine, settings

pytestmark = pytest.mark.anyio

B = f"/v1/boards/{BOARD}"
LEAGUE = "arena-clash:league:S7:global"
L = f"/v1/boards/{LEAGUE}"
READS = [
    ("GET", f"{B}/top", {}, "reader"),
    ("GET", f"{B}/top?limit=2", {}, "reader"),
    ("GET", f"{B}/top?limit=2&cursor={encode_cursor(5, 2)}", {}, "reader"),
    ("GET", f"{B}/top?limit=2&cursor={encode_cursor(1, 2)}", {}, "reader"),  # gone version: 410
    ("GET", f"{B}/top?limit=0", {}, "reader"),
    ("GET", f"{B}/top?limit=1001", {}, "reader"),
    ("GET", f"{B}/top?limit=ten", {}, "reader"),
    ("GET", f"{B}/top?limit=", {}, "reader"),
    ("GET", f"{B}/top?limit=3&limit=1", {}, "reader"),
    ("GET", f"{B}/top?limit=%2B3", {}, "reader"),
    ("GET", f"{B}/top?cursor=zzz", {}, "reader"),
    ("GET", f"{B}/top?cursor=", {}, "reader"),
    ("GET", f"{B}/top?max_staleness_ms=-1", {}, "reader"),
    ("GET", f"{B}/top?unknown=1&limit=3", {}, "reader"),
    ("GET", f"{B}/top?limit=003", {}, "reader"),
    ("GET", f"{B}/top?limit=1_0", {}, "reader"),
    ("GET", f"{B}/top?max_staleness_ms=86400001", {}, "reader"),
    ("GET", "/v1/boards/a:b:c/top", {}, "reader"),
    ("GET", "/v1/boards/no:such:board:x/top", {}, "reader"),
    ("GET", f"{B}/top/", {}, "reader"),
    ("GET", f"{B}/top", {}, None),
    ("GET", f"{B}/top", {}, "bad"),
    ("HEAD", f"{B}/top", {}, "reader"),
    ("GET", f"{B}/top?ties=competition&limit=3", {}, "reader"),
    ("GET", f"{B}/top?ties=dense", {}, "reader"),
    ("GET", f"{B}/top?ties=", {}, "reader"),
    ("GET", f"{B}/players/p-chloe?ties=competition", {}, "reader"),
    ("GET", f"{B}/players/p-chloe/around?radius=2&ties=competition", {}, "reader"),
    ("GET", f"{B}/players/p-ava/friends?ties=competition", {}, "reader"),
    ("POST", f"{B}/ranked-subset?ties=competition", {"json": {"player_ids": ["p-eli", "p-ben", "p-chloe"]}}, "reader"),
    ("POST", f"{B}/ranked-subset?ties=COMPETITION", {"json": {"player_ids": ["p-ben"]}}, "reader"),
    ("GET", f"{B}/players/p-ben", {}, "reader"),
    ("GET", f"{B}/players/p-ben?approximate=true", {}, "reader"),
    ("GET", f"{B}/players/p-ben?approximate=yes", {}, "reader"),
    ("GET", f"{B}/players/p-ben?approximate=maybe", {}, "reader"),
    ("GET", f"{B}/players/p-ben?approximate=True", {}, "reader"),
    ("GET", f"{B}/players/p-nobody", {}, "reader"),
    ("GET", f"{B}/players/p%07x", {}, "reader"),
    ("GET", f"{B}/players/" + "a" * 129, {}, "reader"),
    ("GET", f"{B}/players/%C3%A9", {}, "reader"),
    ("GET", f"{B}/players/p-chloe/around", {}, "reader"),
    ("GET", f"{B}/players/p-chloe/around?radius=2", {}, "reader"),
    ("GET", f"{B}/players/p-chloe/around?radius=101", {}, "reader"),
    ("GET", f"{B}/players/p-chloe/around?radius=-1", {}, "reader"),
    ("GET", f"{B}/players/p-nobody/around", {}, "reader"),
    ("GET", f"{B}/players/p-ava/friends", {}, "reader"),
    ("GET", f"{B}/players/p-ava/friends?max_staleness_ms=5", {}, "reader"),
    ("GET", f"{B}/players/p-nobody/friends", {}, "reader"),
    ("POST", f"{B}/ranked-subset", {"json": {"player_ids": ["p-eli", "p-ava", "p-ava", "p-x"]}}, "reader"),
    ("POST", f"{B}/ranked-subset", {"json": {"player_ids": ["p-ava", "p\x01"]}}, "reader"),
    ("POST", f"{B}/ranked-subset", {"json": {"player_ids": [f"p{i}" for i in range(10_001)]}}, "reader"),
    ("POST", f"{B}/ranked-subset", {"json": {"player_ids": "p-ava"}}, "reader"),
    ("POST", f"{B}/ranked-subset", {"json": ["p-ava"]}, "reader"),
    ("POST", f"{B}/ranked-subset", {"content": b'{"player_ids": ['}, "reader"),
    ("POST", f"{B}/ranked-subset", {"content": b"\xff"}, "reader"),
    ("POST", f"{B}/ranked-subset", {"content": b'{"player_ids": ["p-ava"]}',
                                    "headers": {"content-type": "text/plain"}}, "reader"),
    ("POST", f"{B}/ranked-subset", {"json": {"player_ids": ["p-ava"]}}, "game_server"),
    ("POST", f"{B}/ranked-subset", {"json": {"player_ids": ["p-ava"]}}, "moderator"),
    ("GET", f"{L}/players/p-ben/cohort", {}, "reader"),
    ("GET", f"{L}/players/p-ben/cohort?ties=competition", {}, "game_server"),
    ("GET", f"{L}/players/p-ben/cohort?ties=dense", {}, "reader"),
    ("GET", f"{L}/players/p-nobody/cohort", {}, "reader"),
    ("GET", f"{L}/players/p%07x/cohort", {}, "reader"),
    ("GET", f"{L}/players/p-ben/cohort", {}, None),
    ("GET", f"{B}/players/p-ben/cohort", {}, "reader"),
    ("GET", f"{L}/cohorts/1-1", {}, "reader"),
    ("GET", f"{L}/cohorts/1-1?ties=competition&ties=competition", {}, "reader"),
    ("GET", f"{L}/cohorts/1-2?ties=", {}, "reader"),
    ("GET", f"{L}/cohorts/9-9", {}, "reader"),
    ("GET", f"{L}/cohorts/%C3%A9%20x", {}, "reader"),
    ("GET", f"{L}/cohorts/1-1/", {}, "reader"),
    ("GET", f"{L}/cohorts/1-1", {}, "bad"),
    ("GET", f"{B}/cohorts/1-1", {}, "reader"),
    ("GET", "/v1/boards/a:b:c/cohorts/1-1", {}, "reader"),
]
EV = {"event_id": "e-new", "board_id": BOARD, "player_id": "p-fay", "value": 9900, "achieved_at": 1_793_527_500_000}
WRITES = [
    ("POST", "/v1/events", {"json": {"events": [EV]}}, "game_server"),
    ("POST", "/v1/events", {"json": {"events": [EV]}}, "game_server"),  # duplicate
    ("POST", "/v1/events", {"json": {"events": [EV]}}, "reader"),
    ("POST", "/v1/events", {"content": b'{"events": ['}, "game_server"),
    ("POST", "/v1/events", {"content": b'{"events": [{"value": NaN}]}'}, "game_server"),
    ("POST", "/v1/events", {"content": b"\xff\xfe"}, "game_server"),
    ("POST", "/v1/events", {"json": {"events": 3}}, "game_server"),
    ("POST", "/v1/events", {"json": {"events": []}}, "game_server"),
    ("POST", "/v1/events", {"json": {"events": [{**EV, "value": 2**64}]}}, "game_server"),
    ("POST", "/v1/events", {"json": {"events": [{**EV, "value": 2**70}]}}, "game_server"),
    ("POST", "/v1/events", {"json": {"events": [{**EV, "achieved_at": 1e30}]}}, "game_server"),
    ("POST", "/v1/events", {"content": json.dumps({"events": [{**EV, "player_id": "p\ud800"}]}).encode()},
     "game_server"),
    ("POST", "/v1/events", {"content": b" " * (8 * 1024 * 1024 + 1)}, "game_server"),
    ("POST", "/v1/events", {"content": b"{}", "headers": {"content-length": "x"}}, "game_server"),
    ("POST", "/v1/events", {"json": {"events": [EV] * 10_001}}, "game_server"),
]


def _keys(role):
    if role is None:
        return {}
    if role == "bad":
        return {"Authorization": "Bearer nope"}
    return H(role)


async def _answer(client, method, path, kw, role):
    kw = dict(kw)
    headers = {**_keys(role), **kw.pop("headers", {})}
    r = await client.request(method, path, headers=headers, **kw)
    body = r.json() if r.content else None
    return r.status_code, body, r.headers.get("content-type"), r.headers.get("retry-after")


@pytest.fixture
async def pair():
    engine = await open_engine()
    friends = {"p-ava": ["p-ben", "p-eli", "p-nobody"], "p-nobody": ["p-ava"]}
    apps = [create_app(settings(), engine, friends=StaticFriends(friends)),
            create_app(settings(lean_routes=False), engine, friends=StaticFriends(friends))]
    assert apps[0].hot_routes is not None and apps[1].hot_routes is None
    clients = [httpx.AsyncClient(transport=httpx.ASGITransport(app=a, raise_app_exceptions=False), base_url="http://t")
               for a in apps]
    c = clients[1]
    r = await c.post("/v1/boards", json={"board_id": BOARD, "policy": "best_score"}, headers=H("admin"))
    assert r.status_code == 201
    r = await c.post("/v1/events", json={"events": SEED_EVENTS}, headers=H("game_server"))
    assert r.status_code == 200
    r = await c.post("/v1/boards", json={"board_id": LEAGUE, "policy": "best_score", "league": {"cohort_size": 3}},
                     headers=H("admin"))
    assert r.status_code == 201
    r = await c.post("/v1/events", json={"events": [{**e, "board_id": LEAGUE} for e in SEED_EVENTS]},
                     headers=H("game_server"))
    assert r.status_code == 200
    yield apps, clients
    for c in clients:
        await c.aclose()
    for a in apps:
        await a.state.gateway.hub.close()
    await engine.close()


@pytest.mark.parametrize("req", READS, ids=[f"{m} {p[len(B):] or p}"[:60] for m, p, _, _ in READS])
async def test_reads_answer_as_fastapi_does(pair, req):
    _, (lean, full) = pair
    assert await _answer(lean, *req) == await _answer(full, *req)


async def test_writes_answer_as_fastapi_does(pair):
    _, (lean, full) = pair
    for i, (method, path, kw, role) in enumerate(WRITES):
        got = await _answer(lean, method, path, kw, role)
        if got[0] == 200:  # the same batch again through FastAPI: a duplicate, like the lean one's twin
            kw = {"json": {"events": [{**EV, "event_id": f"e-{i}"}]}}
            got = await _answer(lean, method, path, kw, role)
            kw = {"json": {"events": [{**EV, "event_id": f"f-{i}"}]}}
            want = await _answer(full, method, path, kw, role)
            assert [r["outcome"] for r in got[1]["results"]] == [r["outcome"] for r in want[1]["results"]]
            assert got[0] == want[0] and got[2] == want[2]
        else:
            assert got == await _answer(full, method, path, kw, role), (method, path, role)


async def test_rate_limit_is_charged_once_and_429_is_identical():
    engine = await open_engine()
    try:
        apps = [create_app(settings(read_rate_per_s=1, read_burst=2), engine, clock=lambda: 0.0),
                create_app(settings(read_rate_per_s=1, read_burst=2, lean_routes=False), engine, clock=lambda: 0.0)]
        for app in apps:
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
                bad = await c.get(f"{B}/top?limit=0", headers=H("reader"))  # handed to FastAPI: one token
                assert bad.status_code == 422
                nf = await c.get(f"{B}/top", headers=H("reader"))  # second token: 404, no such board
                assert nf.status_code == 404
                r = await c.get(f"{B}/top", headers=H("reader"))
                assert r.status_code == 429 and r.headers["retry-after"] == "1"
                assert r.json()["error"]["code"] == "RATE_LIMITED"
            await app.state.gateway.hub.close()
    finally:
        await engine.close()


async def test_top_bytes_are_encoded_once_per_version(pair):
    (lean_app, _), (lean, _) = pair
    pages = lean_app.state.gateway.pages
    a = await lean.get(f"{B}/top?limit=3", headers=H("reader"))
    n = len(pages)
    b = await lean.get(f"{B}/top?limit=3", headers=H("reader"))
    assert a.content == b.content and len(pages) == n == 1
    await lean.post("/v1/events", json={"events": [EV]}, headers=H("game_server"))
    c = await lean.get(f"{B}/top?limit=3", headers=H("reader"))
    assert c.json()["version"] == a.json()["version"] + 1 and len(pages) == 2


async def test_hot_routes_are_counted_under_their_templates(pair):
    (lean_app, _), (lean, _) = pair
    await lean.get(f"{B}/top", headers=H("reader"))
    await lean.get(f"{B}/players/p-ava/around", headers=H("reader"))
    await lean.get(f"{B}/top?limit=0", headers=H("reader"))  # via FastAPI: counted once, by its middleware
    text = (await lean.get("/metrics")).text
    assert 'flowrank_http_requests_total{method="GET",route="/v1/boards/{board_id}/top",status="200"} 1.0' in text
    assert 'route="/v1/boards/{board_id}/players/{player_id}/around",status="200"} 1.0' in text
    assert 'flowrank_http_requests_total{method="GET",route="/v1/boards/{board_id}/top",status="422"} 1.0' in text


def test_match_only_the_hot_routes():
    assert hot.match("GET", f"{B}/top")[0][1] == "/v1/boards/{board_id}/top"
    assert hot.match("POST", "/v1/events")[0][1] == "/v1/events"
    assert hot.match("GET", f"{B}/cohorts/1-1")[0][1] == "/v1/boards/{board_id}/cohorts/{cohort}"
    assert hot.match("GET", f"{B}/players/p/cohort")[0][1] == "/v1/boards/{board_id}/players/{player_id}/cohort"
    for method, path in (("GET", "/v1/events"), ("GET", f"{B}"), ("GET", f"{B}/changes"), ("POST", f"{B}/top"),
                         ("GET", f"{B}/players/p/history"), ("GET", "/v1/boards//top"), ("GET", f"{B}/players//around"),
                         ("GET", "/healthz"), ("GET", f"{B}/top/x"), ("GET", f"{B}/cohorts/"),
                         ("POST", f"{B}/cohorts/1-1"), ("GET", f"{B}/awards"), ("GET", f"{B}/cohorts/1-1/x")):
        assert hot.match(method, path) is None, (method, path)


def test_decode_events_is_the_stdlib_decode():
    good = json.dumps({"events": SEED_EVENTS}).encode()
    assert decode_events(good, 10) == events_from_body(json.loads(good), 10)

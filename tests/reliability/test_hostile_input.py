"""Hostile input: never a 5xx, never a partial apply.

Hand-picked abuse (huge numbers, 10,000-level nesting, 8 MiB + 1 bodies,
invalid UTF-8, traversal and NUL in ids, header abuse, duplicate keys) and
hypothesis-generated bodies and path ids go to an in-process app over a real
LocalService; after every rejected request the board's version, checksum and
size are unchanged. Idle SSE subscribers up to the caps, then 503 OVERLOADED
while other requests keep succeeding (over a real uvicorn socket, since
ASGITransport buffers whole responses).
"""

from __future__ import annotations

import asyncio
import json
from urllib.parse import quote

import httpx
import pytest
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st

from tests.reliability.common import BOARD, H, event, open_app, settings

pytestmark = pytest.mark.anyio

MIB = 1024 * 1024
GOOD = event(10_000, player="p-hostile")


def body_of(ev: dict) -> bytes:
    return json.dumps({"events": [ev]}).encode()


def with_value(raw_value: str) -> bytes:
    """An events body whose value is the raw JSON text ``raw_value``."""
    return body_of(GOOD).replace(b'"value": ' + str(GOOD["value"]).encode(), b'"value": ' + raw_value.encode())


DEEP = b'{"events": ' + b"[" * 10_000 + b"]" * 10_000 + b"}"
DEEP_OBJ = b'{"a":' * 10_000 + b"1" + b"}" * 10_000

EVENT_BODIES = {
    "2**63": with_value(str(2**63)),
    "-2**63-1": with_value(str(-(2**63) - 1)),
    "10**400": with_value(str(10**400)),
    "5000 digits": with_value("9" * 5000),
    "1e400": with_value("1e400"),
    "NaN": with_value("NaN"),
    "-Infinity": with_value("-Infinity"),
    "float": with_value("5.0"),
    "deep array": DEEP,
    "deep object": DEEP_OBJ,
    "8MiB+1": b'{"events": [], "pad": "' + b"x" * (8 * MIB + 1 - 26) + b'"}',
    "invalid utf-8": body_of(GOOD).replace(b"p-hostile", b"p-\xff\xfe\xc3"),
    "overlong utf-8": body_of(GOOD).replace(b"p-hostile", b"p-\xc0\xaf"),
    "lone surrogate": body_of(GOOD).replace(b"p-hostile", b"p-\\ud800"),
    "NUL in id": body_of(GOOD).replace(b"p-hostile", b"p-\\u0000"),
    "traversal board": body_of(GOOD).replace(BOARD.encode(), b"../../etc/passwd"),
    "encoded traversal board": body_of(GOOD).replace(BOARD.encode(), b"%2e%2e%2f:a:b:c"),
    "duplicate events keys": b'{"events": [], "events": ' + json.dumps([GOOD]).encode()[:-1] + b', 3]}',
    "duplicate value keys": body_of(GOOD).replace(b'"value": ', b'"value": "x", "value": ', 1).replace(
        b'"value": "x", "value": ' + str(GOOD["value"]).encode(), b'"value": ' + str(GOOD["value"]).encode()
        + b', "value": 2.5'),
    "empty": b"",
    "null": b"null",
    "array": b"[]",
    "events null": b'{"events": null}',
    "10001 events": json.dumps({"events": [event(20_000 + i) for i in range(10_001)]}).encode(),
    "bom": b"\xef\xbb\xbf" + body_of(GOOD),
    "trailing garbage": body_of(GOOD) + b"}}",
    "batch with one bad": json.dumps({"events": [event(30_000), {**event(30_001), "value": True}]}).encode(),
}


async def _assert_unchanged(a, before, label):
    after = await a.fingerprint()
    assert after == before, f"{label}: board changed after a rejected request: {before} -> {after}"


async def test_hostile_event_bodies_are_4xx_and_change_nothing():
  async with open_app() as a:
    await a.seed(10)
    for name in EVENT_BODIES:
        before = await a.fingerprint()
        r = await a.client.post("/v1/events", content=EVENT_BODIES[name],
                                headers={**H("game_server"), "content-type": "application/json"})
        assert r.status_code < 500, (name, r.status_code, r.text[:300])
        assert r.status_code != 200 or name.startswith("duplicate"), (name, r.text[:300])
        if r.status_code != 200:
            assert 400 <= r.status_code < 500
            body = r.json()
            assert set(body["error"]) == {"code", "message", "field"}
            await _assert_unchanged(a, before, name)
        else:  # duplicate keys: the last one wins (Python's json), applied whole
            assert len(r.json()["results"]) == 1


OTHER_ROUTES = [
    ("POST", "/v1/boards", "admin"),
    ("POST", f"/v1/boards/{BOARD}/state", "admin"),
    ("POST", f"/v1/boards/{BOARD}/ranked-subset", "reader"),
    ("POST", f"/v1/boards/{BOARD}/invalidations", "moderator"),
    ("POST", f"/v1/boards/{BOARD}/quarantine/evt-1", "moderator"),
]


@pytest.mark.parametrize("method,path,role", OTHER_ROUTES)
async def test_hostile_bodies_on_every_post_route(method, path, role):
  async with open_app() as a:
    await a.seed(10)
    for name in ["deep array", "deep object", "8MiB+1", "invalid utf-8", "10**400", "empty", "lone surrogate",
                 "trailing garbage"]:
        before = await a.fingerprint()
        r = await a.client.request(method, path, content=EVENT_BODIES[name],
                                   headers={**H(role), "content-type": "application/json"})
        assert 400 <= r.status_code < 500, (name, path, r.status_code, r.text[:300])
        await _assert_unchanged(a, before, f"{name} on {path}")


TRAVERSAL_IDS = ["../../etc/passwd", "..%2F..%2Fetc%2Fpasswd", "%2e%2e%2f", "%2e%2e%2f%2e%2e%2f", "%00", "p%00x",
                 "%2F", "%5c..%5c", "%ff%fe", "%c0%ae%c0%ae%2f", "a" * 129, "%0d%0aX: y",
                 "%E2%80%AE", "%F0%9F%98%80" * 40]


async def test_path_traversal_and_nul_in_ids_never_5xx():
  async with open_app() as a:
    await a.seed(10)
    for pid in TRAVERSAL_IDS:
        before = await a.fingerprint()
        for path, role in ((f"/v1/boards/{BOARD}/players/{pid}", "reader"),
                           (f"/v1/boards/{BOARD}/players/{pid}/around", "reader"),
                           (f"/v1/boards/{BOARD}/players/{pid}/history", "moderator"),
                           (f"/v1/boards/{pid}", "reader"), (f"/v1/boards/{pid}/top", "reader"),
                           (f"/v1/boards/{pid}:a:b:c/checksum", "admin")):
            r = await a.client.get(path, headers=H(role))
            if r.status_code == 307:  # "../" decoded to a trailing slash: Starlette's same-origin redirect
                assert r.headers["location"].startswith("http://test/v1/boards"), r.headers["location"]
                continue
            if r.status_code == 200 and path.endswith("/history"):  # unknown player: empty history
                assert r.json()["events"] == []
                continue
            assert r.status_code in (404, 422), (path, r.status_code, r.text[:200])
            assert r.json()["error"]["code"] in ("PLAYER_NOT_FOUND", "BOARD_NOT_FOUND", "NOT_FOUND",
                                                 "VALIDATION_FAILED", "PLAYER_NOT_RANKED")
        r = await a.client.post(f"/v1/boards/{BOARD}/quarantine/{pid}", headers=H("moderator"),
                                json={"decision": "apply", "reason": "r", "moderator": "m"})
        assert r.status_code in (307, 404, 422), r.text
        await _assert_unchanged(a, before, pid)


async def test_header_abuse():
    async with open_app() as a:
        await a.seed(10)
        before = await a.fingerprint()
        huge = {"Authorization": "Bearer " + "k" * (1 * MIB)}
        r = await a.client.get(f"/v1/boards/{BOARD}/top", headers=huge)
        assert r.status_code == 401
        assert "kkkk" not in r.text
        for bad in ("Bearer", "Bearer  ", "Basic YWRtaW46YWRtaW4=", "bearer\x00admin-key-7f3a9c", "Bearer \u00e9\u00e9",
                    "Bearer admin-key-7f3a9c admin-key-7f3a9c", "Token admin-key-7f3a9c"):
            try:
                r = await a.client.get(f"/v1/boards/{BOARD}/top", headers={"Authorization": bad})
            except (httpx.LocalProtocolError, UnicodeEncodeError):
                continue  # the client refuses to send it: fine
            assert r.status_code == 401, (bad, r.status_code)
        many = {f"X-Junk-{i}": "v" * 100 for i in range(2000)} | H("reader")
        r = await a.client.get(f"/v1/boards/{BOARD}/top", headers=many)
        assert r.status_code == 200
        for ctype in ("text/plain", "application/xml", "multipart/form-data; boundary=x", "application/json; charset=latin-1",
                      "", "application/x-www-form-urlencoded"):
            r = await a.client.post("/v1/events", content=body_of(event(40_000)), headers={**H("game_server"),
                                                                                           "content-type": ctype})
            assert r.status_code < 500, (ctype, r.status_code, r.text)
            if r.status_code != 200:
                await _assert_unchanged(a, before, ctype)
            before = await a.fingerprint()
        # A Content-Length that lies or is not a number.
        r = await a.client.post("/v1/events", content=body_of(event(40_001)),
                                headers={**H("game_server"), "content-type": "application/json",
                                         "content-length": str(9 * MIB)})
        assert 400 <= r.status_code < 500
        await _assert_unchanged(a, before, "lying content-length")


# ---------------------------------------------------------------- hypothesis

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=20,
)
field_values = st.one_of(json_values, st.just(BOARD), st.text(min_size=1, max_size=140),
                         st.integers(min_value=-(2**64), max_value=2**64), st.just("2026-11-01T10:05:00Z"))
events_st = st.fixed_dictionaries(
    {}, optional={k: field_values for k in ("event_id", "board_id", "player_id", "value", "achieved_at",
                                             "submitted_at")})
bodies = st.one_of(json_values, st.fixed_dictionaries({"events": st.lists(st.one_of(events_st, json_values),
                                                                           max_size=4)}))


class _Loop:
    """One event loop and app for every hypothesis example (fast, and the
    fingerprint check then covers the accumulated state)."""

    def __init__(self):
        self.loop = asyncio.new_event_loop()
        self.cm = open_app()
        self.a = self.loop.run_until_complete(self.cm.__aenter__())
        self.loop.run_until_complete(self.a.seed(10))

    def run(self, coro):
        return self.loop.run_until_complete(coro)

    def close(self):
        self.loop.run_until_complete(self.cm.__aexit__(None, None, None))
        self.loop.close()


@pytest.fixture(scope="module")
def looped():
    lp = _Loop()
    yield lp
    lp.close()


@hsettings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(body=bodies)
def test_generated_event_bodies_never_5xx_never_partial(looped, body):
    async def go():
        a = looped.a
        before = await a.fingerprint()
        raw = json.dumps(body, allow_nan=False).encode()
        r = await a.client.post("/v1/events", content=raw, headers={**H("game_server"),
                                                                  "content-type": "application/json"})
        assert r.status_code < 500, (r.status_code, r.text[:300])
        if r.status_code != 200:
            await _assert_unchanged(a, before, raw[:200])
        else:
            n = len(body["events"])
            assert len(r.json()["results"]) == n

    looped.run(go())


@hsettings(max_examples=50, deadline=None, suppress_health_check=list(HealthCheck))
@given(pid=st.text(min_size=0, max_size=200), board=st.text(min_size=0, max_size=80))
def test_generated_path_ids_never_5xx(looped, pid, board):
    async def go():
        a = looped.a
        for path, role in ((f"/v1/boards/{BOARD}/players/{quote(pid, safe='')}", "reader"),
                           (f"/v1/boards/{quote(board, safe='')}/top", "reader"),
                           (f"/v1/boards/{BOARD}/players/{quote(pid, safe='')}/history", "moderator")):
            r = await a.client.get(path, headers=H(role))
            assert r.status_code < 500, (path, r.status_code, r.text[:300])

    looped.run(go())


# ---------------------------------------------------------------- idle SSE subscribers


def test_subscriber_caps_answer_503_and_other_requests_still_succeed():
    from tests.gateway.conftest import thread_server

    def make_settings():
        return settings(live_max_subscribers=4, live_max_per_board=3, live_heartbeat_s=0.5)

    with thread_server(make_settings) as url, httpx.Client(base_url=url, timeout=10) as c:
        assert c.post("/v1/boards", json={"board_id": BOARD, "policy": "best_score"},
                      headers=H("admin")).status_code == 201
        assert c.post("/v1/events", json={"events": [event(i) for i in range(5)]},
                      headers=H("game_server")).status_code == 200
        streams, held = [], []
        try:
            for _ in range(3):  # idle subscribers that never read
                cm = c.stream("GET", f"/v1/boards/{BOARD}/live", headers=H("reader"))
                resp = cm.__enter__()
                held.append(cm)
                assert resp.status_code == 200
                streams.append(resp)
            r = c.get(f"/v1/boards/{BOARD}/live", headers=H("reader"))
            assert r.status_code == 503, r.text
            assert r.json()["error"]["code"] == "OVERLOADED" and int(r.headers["Retry-After"]) >= 1
            # Everything else still works while the idle streams are open.
            assert c.get(f"/v1/boards/{BOARD}/top", headers=H("reader")).status_code == 200
            r = c.post("/v1/events", json={"events": [event(100 + i) for i in range(50)]}, headers=H("game_server"))
            assert r.status_code == 200
            assert c.get("/healthz").status_code == 200
            m = c.get("/metrics").text
            assert "flowrank_live_subscribers 3.0" in m
        finally:
            for cm in held:
                cm.__exit__(None, None, None)
        # Slots are given back once the idle clients go away.
        import time

        deadline = time.time() + 5
        while time.time() < deadline:
            with c.stream("GET", f"/v1/boards/{BOARD}/live", headers=H("reader")) as resp:
                if resp.status_code == 200:
                    break
            time.sleep(0.2)
        assert resp.status_code == 200

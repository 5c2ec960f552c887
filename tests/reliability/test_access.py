"""Access control additions: key material is never logged or echoed, revoked
keys are 401, and no response exposes a friend list or a non-eligible score.

The role x route permission table lives in tests/gateway/test_auth.py; this
file adds what it does not check.
"""

from __future__ import annotations

import json
import logging

import pytest

from tests.reliability.common import BOARD, H, KEYS, event, open_app

pytestmark = pytest.mark.anyio

SECRETS = [k["key"] for k in KEYS] + ["guessed-key-3141592653", "x" * 64]


def _routes(board: str = BOARD) -> list[tuple[str, str, dict | None]]:
    return [
        ("GET", "/v1/boards", None),
        ("GET", f"/v1/boards/{board}", None),
        ("GET", f"/v1/boards/{board}/top?limit=5", None),
        ("GET", f"/v1/boards/{board}/players/p-001", None),
        ("GET", f"/v1/boards/{board}/players/p-001/friends", None),
        ("GET", f"/v1/boards/{board}/players/p-001/history", None),
        ("GET", f"/v1/boards/{board}/quarantine", None),
        ("GET", f"/v1/boards/{board}/checksum", None),
        ("GET", f"/v1/boards/{board}/changes?since_version=0", None),
        ("GET", "/v1/boards/nope:nope:nope:nope/top", None),
        ("POST", "/v1/events", {"events": [event(777)]}),
        ("POST", "/v1/events", {"events": [{"event_id": "bad"}]}),
        ("POST", "/v1/boards", {"board_id": "g:m:s:x", "policy": "best_score"}),
        ("POST", f"/v1/boards/{board}/ranked-subset", {"player_ids": ["p-001", "p-002"]}),
        ("POST", f"/v1/boards/{board}/invalidations", {"event_id": "evt-404", "reason": "r", "moderator": "m"}),
        ("GET", "/metrics", None),
        ("GET", "/readyz", None),
    ]


async def test_keys_are_never_logged_or_echoed(caplog, capfd):
    caplog.set_level(logging.DEBUG)
    seen: list[str] = []
    async with open_app() as a:
        await a.seed(20)
        for secret in SECRETS:
            for scheme in ("Bearer ", "bearer ", "Basic ", ""):
                for method, path, body in _routes():
                    r = await a.client.request(method, path, json=body,
                                               headers={"Authorization": scheme + secret})
                    seen.append(r.text)
                    seen.extend(f"{k}: {v}" for k, v in r.headers.items())
        # A key in the wrong place (query, body, other header) is not echoed either.
        r = await a.client.get(f"/v1/boards/{BOARD}/top", params={"key": SECRETS[0]},
                               headers={"X-Api-Key": SECRETS[1]})
        seen.append(r.text)
        r = await a.client.post("/v1/events", content=json.dumps({"events": [], "key": SECRETS[0]}),
                                headers={"Authorization": "Bearer " + SECRETS[0], "content-type": "text/plain"})
        seen.append(r.text)
    out, err = capfd.readouterr()
    logged = "\n".join(rec.getMessage() + " " + str(rec.args) + " " + (rec.exc_text or "") for rec in caplog.records
                       if not rec.name.startswith(("httpx", "httpcore")))  # the test client's own logs
    haystack = "\n".join(seen) + "\n" + logged + "\n" + out + "\n" + err
    for secret in SECRETS:
        assert secret not in haystack, f"key material {secret[:6]}... leaked"


async def test_revoked_and_unknown_keys_are_401_everywhere():
    async with open_app() as a:
        await a.seed(5)
        revoked = next(k["key"] for k in KEYS if k.get("revoked"))
        before = await a.fingerprint()
        for method, path, body in _routes():
            if path in ("/metrics", "/readyz"):
                continue
            for key in (revoked, "guessed-key-3141592653"):
                r = await a.client.request(method, path, json=body, headers={"Authorization": f"Bearer {key}"})
                assert r.status_code == 401, (path, r.status_code)
                assert r.json()["error"]["code"] == "UNAUTHENTICATED"
        assert await a.fingerprint() == before


async def test_friends_view_only_ranks_active_friends_and_never_leaks_lists(tmp_path):
    friends = {
        "p-000": ["p-001", "p-002", "p-003", "p-ghost"],  # p-003 gets invalidated, p-ghost has no row
        "p-010": ["p-011", "p-012", "p-000"],
        "p-secret": ["p-040", "p-041"],
    }
    path = tmp_path / "friends.json"
    path.write_text(json.dumps(friends))
    async with open_app(settings_kw={"friends_file": str(path)}) as a:
        await a.seed(50)  # p-000 .. p-049, evt-i belongs to p-{i % 50}
        r = await a.client.post(f"/v1/boards/{BOARD}/invalidations",
                                json={"event_id": "evt-3", "reason": "cheat", "moderator": "m"},
                                headers=H("moderator"))
        assert r.status_code == 200 and r.json()["status"] == "INVALIDATED", r.text
        texts: list[str] = []
        for requester, role in (("p-000", "reader"), ("p-010", "game_server"), ("p-secret", "reader"),
                                ("p-049", "admin")):
            r = await a.client.get(f"/v1/boards/{BOARD}/players/{requester}/friends", headers=H(role))
            if requester == "p-secret":  # no row of their own: still only their friends' rows
                assert r.status_code in (200, 404)
            else:
                assert r.status_code == 200, r.text
            if r.status_code != 200:
                continue
            body = r.json()
            texts.append(r.text)
            ids = [e["player_id"] for e in body["entries"]]
            allowed = set(friends.get(requester, []))
            assert set(ids) <= allowed, (requester, ids)
            assert "p-003" not in ids and "p-ghost" not in ids
            assert [e["rank"] for e in body["entries"]] == list(range(1, len(ids) + 1))
            assert set(body) <= {"version", "player_id", "entries"}
            for e in body["entries"]:
                assert set(e) == {"rank", "player_id", "value", "achieved_at"}
        assert [e["player_id"] for e in json.loads(texts[0])["entries"]] == ["p-002", "p-001"]
        # No response anywhere contains a friend list or a non-eligible player's id/score.
        for method, p, body in _routes():
            r = await a.client.request(method, p.replace("p-001/", "p-000/"), json=body, headers=H("admin"))
            texts.append(r.text)
        blob = "\n".join(texts)
        assert "friend_ids" not in blob and "p-ghost" not in blob and "p-secret\"" not in blob.replace(
            '"player_id":"p-secret"', "")
        # p-000's view says nothing about p-010's friends (p-011, p-012) or p-secret's.
        first = json.loads(texts[0])
        assert not {"p-011", "p-012", "p-040", "p-041"} & {e["player_id"] for e in first["entries"]}
        # The cached variant obeys the same rules per requester.
        r1 = await a.client.get(f"/v1/boards/{BOARD}/players/p-000/friends?max_staleness_ms=5000", headers=H("reader"))
        r2 = await a.client.get(f"/v1/boards/{BOARD}/players/p-010/friends?max_staleness_ms=5000", headers=H("reader"))
        assert {e["player_id"] for e in r1.json()["entries"]} <= set(friends["p-000"])
        assert {e["player_id"] for e in r2.json()["entries"]} <= set(friends["p-010"])

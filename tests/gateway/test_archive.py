"""Reads of an ARCHIVED board over HTTP (docs/api.md §13, archive): every read
route answers byte for byte as it did before archiving (top pages and their
cursors, player views, around, friends, ranked subsets, /changes snapshot
pages, CSV and JSON Lines export, board info, checksum, ?ties=competition,
each player's history), metadata included in every one of them; writes stay
held (and out of the history); the live window opens with a snapshot from the
archive."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from engine.core.model import BoardSpec, BoardState, Invalidation, Policy, ScoreEvent
from gateway.app import create_app
from gateway.friends import StaticFriends
from gateway.live import LiveHub
from tests.gateway.conftest import BOARD, H, open_engine, settings

pytestmark = pytest.mark.anyio

PLAYERS = [f"p-{i}" for i in range(30)] + ["p-ünï ✓", "日本語", "p,comma"]
FRIENDS = {"p-3": ["p-1", "p-7", "日本語", "p-nobody"], "日本語": ["p-ünï ✓", "p-3"]}


async def _client(engine):
    app = create_app(settings(), engine, friends=StaticFriends(FRIENDS))
    return app, httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t")


async def _load(c: httpx.AsyncClient) -> None:
    r = await c.post("/v1/boards", json={"board_id": BOARD, "policy": "best_score", "shards": 3}, headers=H("admin"))
    assert r.status_code == 201, r.text
    events = [{"event_id": f"e-{i}", "board_id": BOARD, "player_id": pid, "value": (i * 37) % 7 * 100,
               "achieved_at": 1_793_527_500_000 + (i % 4) * 1000,
               **({"metadata": {"skin": f"s{i}", "ü": [i, None]}} if i % 2 else {})} for i, pid in enumerate(PLAYERS)]
    r = await c.post("/v1/events", json={"events": events}, headers=H("game_server"))
    assert r.status_code == 200, r.text
    again = [dict(events[1], metadata={"other": 1}), events[3], dict(events[4], event_id="e-4b", value=1)]
    r = await c.post("/v1/events", json={"events": again}, headers=H("game_server"))  # conflict, duplicate, worse
    assert [x["outcome"] for x in r.json()["results"]] == ["REJECTED_EVENT_ID_CONFLICT", "DUPLICATE_IGNORED",
                                                           "REJECTED_NOT_AN_IMPROVEMENT"], r.text
    r = await c.post(f"/v1/boards/{BOARD}/invalidations", json={"event_id": "e-5", "reason": "cheat", "moderator": "m"},
                     headers=H("moderator"))
    assert r.status_code == 200, r.text


async def _get(c, path, role="reader", **params):
    r = await c.get(path, params=params, headers=H(role))
    return r.status_code, (r.json() if "json" in r.headers.get("content-type", "") else r.text)


async def _reads(c: httpx.AsyncClient) -> dict:
    b = f"/v1/boards/{BOARD}"
    out: dict = {"checksum": await _get(c, f"{b}/checksum", "admin")}
    for ties in ({}, {"ties": "competition"}):
        key = bool(ties)
        pages, params = [], {"limit": 4, **ties}
        while True:
            status, body = await _get(c, f"{b}/top", **params)
            pages.append((status, body))
            if status != 200 or not body.get("next_cursor"):
                break
            params = {"limit": 4, "cursor": body["next_cursor"], **ties}
        out[("top", key)] = pages
        for pid in PLAYERS + ["p-nobody"]:
            out[("player", pid, key)] = await _get(c, f"{b}/players/{pid}", **ties)
            out[("around", pid, key)] = await _get(c, f"{b}/players/{pid}/around", radius=3, **ties)
            out[("friends", pid, key)] = await _get(c, f"{b}/players/{pid}/friends", **ties)
        r = await c.post(f"{b}/ranked-subset", params=ties, json={"player_ids": PLAYERS[::3] + ["p-nobody"]},
                         headers=H("reader"))
        out[("subset", key)] = (r.status_code, r.json())
        snaps, params = [], {"since_version": 0, "limit": 5, **ties}
        while True:
            status, body = await _get(c, f"{b}/changes", **params)
            snaps.append((status, body))
            if status != 200 or not body.get("next_cursor"):
                break
            params = {"cursor": body["next_cursor"], "limit": 5, **ties}
        out[("changes", key)] = snaps
    for fmt in ("csv", "jsonl"):
        r = await c.get(f"{b}/export", params={"format": fmt}, headers=H("moderator"))
        out[("export", fmt)] = (r.status_code, r.headers.get("x-board-version"), r.text)
    out["approx"] = await _get(c, f"{b}/players/p-3", approximate="true")
    for pid in PLAYERS + ["p-nobody"]:
        out[("history", pid)] = await _get(c, f"{b}/players/{pid}/history", "moderator")
    return out


def _metadata_in(reads: dict) -> set:
    """The reads (by kind) whose answer carries some metadata."""
    return {k[0] if isinstance(k, tuple) else k for k, v in reads.items() if '"metadata"' in str(v).replace("'", '"')
            or (isinstance(k, tuple) and k[0] == "export" and "skin" in v[2])}


async def test_every_read_route_answers_the_same_after_archiving():
    engine = await open_engine(delta_retention=3)  # /changes?since_version=0 answers a snapshot
    app, c = await _client(engine)
    try:
        await _load(c)
        before_info = await _get(c, f"/v1/boards/{BOARD}")
        before = await _reads(c)
        assert before[("changes", False)][0][1]["kind"] == "snapshot"
        assert len(before[("top", False)]) > 3 and before[("player", "p-5", False)][1]["status"] == "INVALIDATED"
        for state in ("FROZEN", "FINALIZED", "ARCHIVED"):
            r = await c.post(f"/v1/boards/{BOARD}/state", json={"state": state}, headers=H("admin"))
            assert r.status_code == 200, r.text
        assert all(BOARD not in core.parts for core in engine.cores)
        after_info = await _get(c, f"/v1/boards/{BOARD}")
        assert after_info[1].pop("state") == "ARCHIVED" and before_info[1].pop("state") == "OPEN"
        assert after_info == before_info
        after = await _reads(c)
        for k in before:
            assert after[k] == before[k], k
        hist = after[("history", "p-1")]
        assert hist[0] == 200 and [e["outcome"] for e in hist[1]["events"]] == ["APPLIED_FIRST_SCORE",
                                                                                 "REJECTED_EVENT_ID_CONFLICT"]
        assert [e.get("metadata") for e in hist[1]["events"]] == [{"skin": "s1", "ü": [1, None]}, {"other": 1}]
        hist = after[("history", "p-5")][1]["events"]
        assert [(e["kind"], e["invalidated"], e["outcome"]) for e in hist] == [
            ("score", True, "APPLIED_FIRST_SCORE"), ("invalidation", False, "INVALIDATED")]
        assert after[("history", "p-nobody")] == (200, {"player_id": "p-nobody", "events": []})
        assert _metadata_in(after) >= {"top", "player", "around", "friends", "subset", "changes", "export",
                                       "history"}
        r = await c.post("/v1/events", json={"events": [{"event_id": "late", "board_id": BOARD, "player_id": "p-1",
                                                          "value": 10**6, "achieved_at": 1}]}, headers=H("game_server"))
        assert r.json()["results"][0]["outcome"] == "HELD_FOR_CORRECTION"
        assert (await _get(c, f"/v1/boards/{BOARD}"))[1]["version"] == before_info[1]["version"]
        assert await _reads(c) == after  # the held event changed nothing
    finally:
        await c.aclose()
        await app.state.gateway.hub.close()
        await engine.close()


async def test_live_on_an_archived_board_opens_with_a_snapshot_and_sends_no_deltas():
    engine = await open_engine()
    try:
        await engine.create_board(BoardSpec("g:m:s:arch", Policy.BEST_SCORE, shards=2))
        await engine.submit([ScoreEvent("g:m:s:arch", f"e{i}", f"p{i}", 10 * i, 1000 + i, 1000 + i,
                                        b'{"lvl":%d}' % i if i % 2 else b"") for i in range(12)])
        await engine.invalidate(Invalidation("g:m:s:arch", "e11"))
        top = await engine.top("g:m:s:arch", 0, 5)
        for s in (BoardState.FROZEN, BoardState.FINALIZED, BoardState.ARCHIVED):
            await engine.set_state("g:m:s:arch", s)
        hub = LiveHub(engine, window_s=0.02)
        hub.start()
        sub = await hub.subscribe("g:m:s:arch", 5)
        await engine.submit([ScoreEvent("g:m:s:arch", "late", "p1", 10**6, 1, 1)])  # held: no delta
        await asyncio.sleep(0.1)
        msgs = []
        while not sub.queue.empty():
            msgs.append(sub.queue.get_nowait())
        assert len(msgs) == 1 and msgs[0].startswith("event: snapshot")
        assert f"id: {top.version}" in msgs[0]
        for e in top.entries:
            assert f'"player_id":"{e.player_id}"' in msgs[0].replace(" ", "")
        assert '"metadata":{"lvl":9}' in msgs[0].replace(" ", "")  # the archive's metadata in the live snapshot
        await hub.close()
    finally:
        await engine.close()

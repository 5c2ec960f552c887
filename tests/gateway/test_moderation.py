"""Quarantine, decisions, invalidations, history and checksum (docs/api.md §10)."""

from __future__ import annotations

import pytest

from tests.gateway.conftest import BOARD, H

pytestmark = pytest.mark.anyio


async def test_invalidation_scenario_g(seeded):
    c = seeded.client
    r = await c.post(f"/v1/boards/{BOARD}/invalidations",
                     json={"event_id": "evt-ava-1", "reason": "exploit", "moderator": "mod-1"}, headers=H("moderator"))
    assert r.status_code == 200, r.text
    body = r.json()
    assert set(body) == {"correction_event_id", "player_id", "status", "value", "version"}
    assert (body["player_id"], body["status"], body["version"]) == ("p-ava", "INVALIDATED", 6)
    top = (await c.get(f"/v1/boards/{BOARD}/top?limit=5", headers=H("reader"))).json()
    assert [e["player_id"] for e in top["entries"]] == ["p-ben", "p-chloe", "p-dev", "p-eli"]
    p = (await c.get(f"/v1/boards/{BOARD}/players/p-ava", headers=H("reader"))).json()
    assert (p["rank"], p["status"]) == (None, "INVALIDATED")
    r = await c.post(f"/v1/boards/{BOARD}/invalidations", json={"event_id": "evt-never"}, headers=H("moderator"))
    assert r.status_code == 404 and r.json()["error"]["code"] == "EVENT_NOT_FOUND"
    hist = (await c.get(f"/v1/boards/{BOARD}/players/p-ava/history", headers=H("moderator"))).json()
    assert [h["kind"] for h in hist["events"]] == ["score", "invalidation"]
    assert hist["events"][0]["achieved_at"] == "2026-11-01T09:58:00.000Z"
    assert [h["invalidated"] for h in hist["events"]] == [True, False]  # the event, then its invalidation
    assert all("metadata" not in h for h in hist["events"])  # the seed events carry none


async def test_history_carries_each_events_metadata(seeded):
    c = seeded.client
    events = [{"event_id": f"m-{i}", "board_id": BOARD, "player_id": "p-meta", "value": v,
               "achieved_at": "2026-11-01T10:00:00Z", **({"metadata": m} if m is not None else {})}
              for i, (v, m) in enumerate([(10, {"b": 1, "a": "é"}), (5, None), (20, {"run": [1, 2.5]})])]
    r = await c.post("/v1/events", json={"events": events + [dict(events[0], metadata={"x": 1})]},
                     headers=H("game_server"))
    assert [x["outcome"] for x in r.json()["results"]][-1] == "REJECTED_EVENT_ID_CONFLICT"
    r = await c.get(f"/v1/boards/{BOARD}/players/p-meta/history", headers=H("moderator"))
    assert r.status_code == 200 and '"metadata":{"a":"é","b":1}' in r.content.decode()  # canonical, as stored
    hist = r.json()["events"]
    assert [h.get("metadata") for h in hist] == [{"a": "é", "b": 1}, None, {"run": [1, 2.5]}, {"x": 1}]
    assert [h["outcome"] for h in hist] == ["APPLIED_FIRST_SCORE", "REJECTED_NOT_AN_IMPROVEMENT", "APPLIED_NEW_BEST",
                                            "REJECTED_EVENT_ID_CONFLICT"]
    assert not any(h["invalidated"] for h in hist)


async def test_quarantine_scenario_h_and_decisions(seeded):
    c = seeded.client
    for state in ("FROZEN", "FINALIZED"):
        await c.post(f"/v1/boards/{BOARD}/state", json={"state": state}, headers=H("admin"))
    late = {"event_id": "evt-s7-late", "board_id": BOARD, "player_id": "p-ben", "value": 9900,
            "achieved_at": "2026-11-01T10:07:00Z"}
    r = await c.post("/v1/events", json={"events": [late]}, headers=H("game_server"))
    assert r.json()["results"][0]["outcome"] == "HELD_FOR_CORRECTION"
    q = (await c.get(f"/v1/boards/{BOARD}/quarantine", headers=H("moderator"))).json()
    assert q == {"events": [{"event_id": "evt-s7-late", "player_id": "p-ben", "value": 9900,
                             "achieved_at": "2026-11-01T10:07:00.000Z", "reason": "HELD_FOR_CORRECTION"}]}
    r = await c.post(f"/v1/boards/{BOARD}/quarantine/evt-s7-late", json={"decision": "apply", "reason": "ok"},
                     headers=H("moderator"))
    assert r.status_code == 200, r.text
    assert r.json()["decision"] == "apply" and r.json()["version"] == 6
    r = await c.post(f"/v1/boards/{BOARD}/quarantine/evt-s7-late", json={"decision": "reject"},
                     headers=H("moderator"))
    assert r.status_code == 409 and r.json()["error"]["code"] == "ALREADY_DECIDED"
    r = await c.post(f"/v1/boards/{BOARD}/quarantine/evt-other", json={"decision": "reject"}, headers=H("moderator"))
    assert r.status_code == 404 and r.json()["error"]["code"] == "EVENT_NOT_FOUND"
    assert (await c.get(f"/v1/boards/{BOARD}/quarantine", headers=H("moderator"))).json() == {"events": []}


async def test_checksum_and_readyz(seeded):
    c = seeded.client
    r = await c.get(f"/v1/boards/{BOARD}/checksum", headers=H("admin"))
    assert r.status_code == 200 and r.json()["version"] == 5 and isinstance(r.json()["checksum"], str)
    assert (await c.get("/readyz")).status_code == 200

    async def not_ready():
        return False

    seeded.engine.ready = not_ready  # e.g. still recovering, or the log is not writable
    r = await c.get("/readyz")
    assert r.status_code == 503 and r.headers["Retry-After"] == "1"
    assert r.json()["error"]["code"] == "OVERLOADED"
    assert (await c.get("/healthz")).json() == {"status": "ok"}


async def test_invalidation_leaving_int64_is_409_and_changes_nothing(harness):
    c, board = harness.client, "g:m:s:int64"
    r = await c.post("/v1/boards", json={"board_id": board, "policy": "cumulative"}, headers=H("admin"))
    assert r.status_code == 201, r.text
    events = [{"event_id": eid, "board_id": board, "player_id": "p", "value": v,
               "achieved_at": f"2026-11-01T10:0{i}:00Z"}
              for i, (eid, v) in enumerate((("big", 2**63 - 1), ("minus", -5), ("plus", 5)))]
    r = await c.post("/v1/events", json={"events": events}, headers=H("game_server"))
    assert [x["outcome"] for x in r.json()["results"]] == ["APPLIED"] * 3
    before = (await c.get(f"/v1/boards/{board}/checksum", headers=H("admin"))).json()
    r = await c.post(f"/v1/boards/{board}/invalidations", json={"event_id": "minus"}, headers=H("moderator"))
    assert r.status_code == 409 and r.json()["error"]["code"] == "TOTAL_OUT_OF_RANGE", r.text
    assert (await c.get(f"/v1/boards/{board}/checksum", headers=H("admin"))).json() == before
    hist = (await c.get(f"/v1/boards/{board}/players/p/history", headers=H("moderator"))).json()["events"]
    assert (hist[-1]["kind"], hist[-1]["outcome"]) == ("invalidation", "REJECTED_TOTAL_OUT_OF_RANGE")
    r = await c.post(f"/v1/boards/{board}/invalidations", json={"event_id": "plus"}, headers=H("moderator"))
    assert r.status_code == 200 and r.json()["value"] == 2**63 - 6
    r = await c.post(f"/v1/boards/{board}/invalidations", json={"event_id": "minus"}, headers=H("moderator"))
    assert r.status_code == 200 and r.json()["value"] == 2**63 - 1

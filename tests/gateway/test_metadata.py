"""Event metadata over HTTP (docs/api.md §13): what an event carries comes back
on the row it gave its value to, in every read (top, player, around, ranked
subset, /changes deltas and snapshots, export, the live stream); validation
refuses a batch with a bad one whole; a redelivery with other metadata is a
conflict, one with the same object in another key order a duplicate."""

from __future__ import annotations

import csv
import io
import json

import pytest

from engine.core.model import BoardSpec, Invalidation, Policy, ScoreEvent
from gateway.live import LiveHub
from tests.gateway.conftest import BOARD, H
from tests.gateway.test_live import drain, parse, settle

pytestmark = pytest.mark.anyio

T = "2026-11-01T10:00:00Z"


def _ev(eid: str, pid: str, value: int, metadata=None, at: str = T) -> dict:
    out = {"event_id": eid, "board_id": BOARD, "player_id": pid, "value": value, "achieved_at": at}
    if metadata is not None:
        out["metadata"] = metadata
    return out


async def _post(client, events: list[dict]):
    return await client.post("/v1/events", json={"events": events}, headers=H("game_server"))


async def _board(client, policy: str = "best_score", shards: int = 2) -> None:
    r = await client.post("/v1/boards", json={"board_id": BOARD, "policy": policy, "shards": shards},
                          headers=H("admin"))
    assert r.status_code == 201, r.text


async def test_every_read_returns_the_metadata_of_the_event_that_gave_the_row_its_value(harness):
    c = harness.client
    await _board(c)
    r = await _post(c, [_ev("a1", "p-ava", 900, {"map": "dust", "kills": 12, "z": [1.5, None, True]}),
                        _ev("b1", "p-ben", 800),
                        _ev("c1", "p-cat", 700, {"nested": {"b": 2, "a": "é,\"q\""}})])
    assert r.status_code == 200, r.text
    # a worse event does not change the row's metadata; a better one without metadata clears it
    r = await _post(c, [_ev("a2", "p-ava", 100, {"map": "worse"}), _ev("c2", "p-cat", 750)])
    assert [x["outcome"] for x in r.json()["results"]] == ["REJECTED_NOT_AN_IMPROVEMENT", "APPLIED_NEW_BEST"]
    ava = {"kills": 12, "map": "dust", "z": [1.5, None, True]}

    top = (await c.get(f"/v1/boards/{BOARD}/top", params={"limit": 10}, headers=H("reader"))).json()
    assert [(e["player_id"], e.get("metadata")) for e in top["entries"]] == \
        [("p-ava", ava), ("p-ben", None), ("p-cat", None)]
    assert "metadata" not in top["entries"][1]  # omitted when none, not null
    # the cached bytes of the hot route are the same on a second read
    again = await c.get(f"/v1/boards/{BOARD}/top", params={"limit": 10}, headers=H("reader"))
    assert again.json() == top
    # canonical: keys sorted, compact, as stored
    raw = again.content.decode()
    assert '"metadata":{"kills":12,"map":"dust","z":[1.5,null,true]}' in raw

    me = (await c.get(f"/v1/boards/{BOARD}/players/p-ava", headers=H("reader"))).json()
    assert me["metadata"] == ava
    ben = (await c.get(f"/v1/boards/{BOARD}/players/p-ben", headers=H("reader"))).json()
    assert "metadata" not in ben
    approx = (await c.get(f"/v1/boards/{BOARD}/players/p-ava", params={"approximate": "true"},
                          headers=H("reader"))).json()
    assert approx["metadata"] == ava
    around = (await c.get(f"/v1/boards/{BOARD}/players/p-ben/around", params={"radius": 1},
                          headers=H("reader"))).json()
    assert [e.get("metadata") for e in around["entries"]] == [ava, None, None]
    subset = (await c.post(f"/v1/boards/{BOARD}/ranked-subset", json={"player_ids": ["p-cat", "p-ava"]},
                           headers=H("reader"))).json()
    assert [(e["player_id"], e.get("metadata")) for e in subset["entries"]] == [("p-ava", ava), ("p-cat", None)]

    snap = (await c.get(f"/v1/boards/{BOARD}/changes", params={"since_version": 10**6, "limit": 2},
                        headers=H("reader"))).json()
    assert snap["kind"] == "snapshot" and snap["entries"][0]["metadata"] == ava
    deltas = (await c.get(f"/v1/boards/{BOARD}/changes", params={"since_version": 0}, headers=H("reader"))).json()
    changes = [ch for d in deltas["deltas"] for ch in d["changes"]]
    assert [(ch["player_id"], ch.get("metadata")) for ch in changes] == [
        ("p-ava", ava), ("p-ben", None), ("p-cat", {"nested": {"a": "é,\"q\"", "b": 2}}), ("p-cat", None)]

    # export: CSV (compact JSON in its column, quoted) and JSON Lines
    r = await c.get(f"/v1/boards/{BOARD}/export", params={"format": "csv"}, headers=H("moderator"))
    rows = list(csv.reader(io.StringIO(r.text)))
    assert rows[0] == ["rank", "player_id", "value", "achieved_at", "metadata"]
    assert [(row[1], row[4]) for row in rows[1:]] == [
        ("p-ava", '{"kills":12,"map":"dust","z":[1.5,null,true]}'), ("p-ben", ""), ("p-cat", "")]
    r = await c.get(f"/v1/boards/{BOARD}/export", params={"format": "jsonl", "ties": "competition"},
                    headers=H("moderator"))
    lines = [json.loads(x) for x in r.text.splitlines()]
    assert [x.get("metadata") for x in lines] == [ava, None, None]
    assert all("metadata" not in x for x in lines[1:])


async def test_cumulative_keeps_the_latest_applied_and_invalidation_restores_the_right_one(harness):
    c = harness.client
    await _board(c, "cumulative", 1)
    await _post(c, [_ev("d1", "p", 5, {"round": 1}), _ev("d2", "p", 7, {"round": 2}), _ev("d3", "p", 1)])
    me = (await c.get(f"/v1/boards/{BOARD}/players/p", headers=H("reader"))).json()
    assert me["value"] == 13 and "metadata" not in me  # the latest applied carried none
    r = await c.post(f"/v1/boards/{BOARD}/invalidations", json={"event_id": "d3", "reason": "dup"},
                     headers=H("moderator"))
    assert r.status_code == 200, r.text
    me = (await c.get(f"/v1/boards/{BOARD}/players/p", headers=H("reader"))).json()
    assert me["value"] == 12 and me["metadata"] == {"round": 2}


async def test_redelivery_with_other_metadata_is_a_conflict_and_key_order_does_not_matter(harness):
    c = harness.client
    await _board(c)
    assert (await _post(c, [_ev("e1", "p", 5, {"a": 1, "b": 2})])).status_code == 200
    r = await _post(c, [_ev("e1", "p", 5, {"b": 2, "a": 1}), _ev("e1", "p", 5, {"a": 1}), _ev("e1", "p", 5)])
    assert [x["outcome"] for x in r.json()["results"]] == \
        ["DUPLICATE_IGNORED", "REJECTED_EVENT_ID_CONFLICT", "REJECTED_EVENT_ID_CONFLICT"]
    me = (await c.get(f"/v1/boards/{BOARD}/players/p", headers=H("reader"))).json()
    assert me["metadata"] == {"a": 1, "b": 2}


@pytest.mark.parametrize("bad, message", [
    ({"k": "x" * 1017}, "at most 1024 bytes"),  # compact: 1,025 bytes
    ([1, 2], "must be a JSON object"),
    ("text", "must be a JSON object"),
    (5, "must be a JSON object"),
    ({"big": 2**64}, "64"),
    ({"big": 1e19}, "floats below"),
])
async def test_bad_metadata_is_422_naming_the_event_and_nothing_is_applied(harness, bad, message):
    c = harness.client
    await _board(c)
    ok = _ev("v1", "p-ok", 5, {"k": "x" * 1016})  # exactly 1,024 bytes: accepted
    r = await _post(c, [ok, _ev("v2", "p-bad", 6, bad)])
    assert r.status_code == 422, r.text
    err = r.json()["error"]
    assert err["code"] == "VALIDATION_FAILED" and err["field"] == "events[1].metadata" and message in err["message"]
    assert (await harness.board())["version"] == 0  # nothing of the batch applied
    r = await _post(c, [ok])
    assert r.status_code == 200 and r.json()["results"][0]["outcome"] == "APPLIED_FIRST_SCORE"


async def test_null_metadata_is_none(harness):
    c = harness.client
    await _board(c)
    r = await _post(c, [_ev("n1", "p", 5, None) | {"metadata": None}])
    assert r.status_code == 200
    assert "metadata" not in (await c.get(f"/v1/boards/{BOARD}/players/p", headers=H("reader"))).json()


async def test_live_snapshot_and_deltas_carry_metadata(engines):
    b = "g:m:s:meta"
    eng = await engines()
    await eng.create_board(BoardSpec(b, Policy.BEST_SCORE))
    await eng.submit([ScoreEvent(b, "e1", "p1", 100, 1, 1, b'{"skin":"red"}'), ScoreEvent(b, "e2", "p2", 50, 1, 1)])
    hub = LiveHub(eng, window_s=0.02)
    hub.start()
    sub = await hub.subscribe(b, 3)
    await settle(hub)
    [snap] = await drain(sub)
    kind, _, data = parse(snap)
    assert kind == "snapshot"
    assert [e.get("metadata") for e in data["entries"]] == [{"skin": "red"}, None]
    # a new best for p2 with metadata: the delta carries it
    await eng.submit([ScoreEvent(b, "e3", "p2", 200, 2, 2, b'{"skin":"blue"}')])
    await settle(hub)
    [delta] = await drain(sub)
    kind, _, data = parse(delta)
    assert kind == "delta"
    assert {"player_id": "p2", "value": 200, "achieved_at": "1970-01-01T00:00:00.002Z", "status": "ACTIVE",
            "metadata": {"skin": "blue"}} in data["changes"]
    # an invalidation brings back the metadata of the event that now gives the row its value
    await eng.invalidate(Invalidation(b, "e3"))
    await settle(hub)
    [delta] = await drain(sub)
    kind, _, data = parse(delta)
    assert [ch for ch in data["changes"] if ch["player_id"] == "p2"] == [
        {"player_id": "p2", "value": 50, "achieved_at": "1970-01-01T00:00:00.001Z", "status": "ACTIVE"}]
    await eng.submit([ScoreEvent(b, "e4", "p2", 60, 3, 3, b'{"skin":"green"}')])
    await settle(hub)
    await drain(sub)
    view = await eng.player(b, "p2")
    assert view.metadata == b'{"skin":"green"}'
    hub.unsubscribe(sub)
    await hub.close()

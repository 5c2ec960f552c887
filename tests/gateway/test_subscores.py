"""Subscores over HTTP (docs/api.md §14): a board declares them, every event
on it carries exactly that many (any other count, type or range refuses the
batch whole, 422 naming ``events[i].subscores``), every read and /changes
return them, ``?ties=competition`` ties on the primary value and the
subscores together, and the subscores are part of an event's content."""

from __future__ import annotations

import json

import pytest

from engine.core.model import BoardSpec, Invalidation, Policy, ScoreEvent
from gateway.live import LiveHub
from tests.gateway.conftest import BOARD, H
from tests.gateway.test_live import drain, parse, settle

pytestmark = pytest.mark.anyio

T = "2026-11-01T10:00:00Z"
MIN, MAX = -(2**63), 2**63 - 1
PLAIN = "g:m:s:plain"


def _ev(eid: str, pid: str, value: int, subscores=None, board: str = BOARD, at: str = T) -> dict:
    out = {"event_id": eid, "board_id": board, "player_id": pid, "value": value, "achieved_at": at}
    if subscores is not None:
        out["subscores"] = subscores
    return out


async def _post(client, events: list[dict]):
    return await client.post("/v1/events", json={"events": events}, headers=H("game_server"))


async def _board(client, board: str = BOARD, policy: str = "best_score", subscores=("desc", "asc"), shards: int = 2):
    body = {"board_id": board, "policy": policy, "shards": shards}
    if subscores is not None:
        body["subscores"] = list(subscores)
    return await client.post("/v1/boards", json=body, headers=H("admin"))


async def test_board_creation_takes_0_to_3_directions_on_best_and_fastest_boards_only(harness):
    c = harness.client
    r = await _board(c)
    assert r.status_code == 201, r.text
    assert r.json()["subscores"] == ["desc", "asc"]
    got = (await c.get(f"/v1/boards/{BOARD}", headers=H("reader"))).json()
    assert got["subscores"] == ["desc", "asc"]
    assert (await _board(c, "g:m:s:f", "fastest_time", ["asc", "asc", "desc"])).status_code == 201
    for board, subs in [("g:m:s:e", []), ("g:m:s:n", None)]:
        r = await _board(c, board, "cumulative", subs)
        assert r.status_code == 201, r.text
        assert r.json()["subscores"] == []
    for policy, subs in [("cumulative", ["desc"]), ("best_score", ["up"]), ("best_score", ["asc"] * 4),
                         ("best_score", "desc"), ("best_score", [1])]:
        r = await _board(c, "g:m:s:bad", policy, subs)
        assert r.status_code == 422, (policy, subs, r.text)
        assert r.json()["error"]["code"] == "VALIDATION_FAILED"
        assert r.json()["error"]["field"].startswith("subscores"), r.json()


async def test_a_batch_with_a_bad_subscores_field_is_refused_whole(harness):
    c = harness.client
    assert (await _board(c)).status_code == 201
    assert (await _board(c, PLAIN, subscores=None)).status_code == 201
    good = _ev("g1", "p", 1, [1, 2])
    cases = [
        (_ev("x", "p", 1), "missing"),
        (_ev("x", "p", 1, [1]), "too few"),
        (_ev("x", "p", 1, [1, 2, 3]), "too many"),
        (_ev("x", "p", 1, [1, "2"]), "a string"),
        (_ev("x", "p", 1, [1, 2.0]), "a float"),
        (_ev("x", "p", 1, [1, True]), "a boolean"),
        (_ev("x", "p", 1, [1, 2**63]), "past int64"),
        (_ev("x", "p", 1, [MIN - 1, 0]), "below int64"),
        (_ev("x", "p", 1, 5), "not a list"),
        (_ev("x", "p", 1, [1, 2, 3, 4]), "past the limit"),
        (_ev("x", "p", 1, [1], board=PLAIN), "on a board without subscores"),
        ({**_ev("x", "p", 1), "subscores": None}, "null on a board with subscores"),
    ]
    for bad, why in cases:
        r = await _post(c, [good, _ev("ok", "q", 1, None, PLAIN), bad])
        assert r.status_code == 422, (why, r.text)
        err = r.json()["error"]
        assert (err["code"], err["field"]) == ("VALIDATION_FAILED", "events[2].subscores"), (why, err)
    for board in (BOARD, PLAIN):  # nothing was applied
        assert (await c.get(f"/v1/boards/{board}", headers=H("reader"))).json()["version"] == 0
    # on a board without subscores, omitted, null and [] are all fine
    r = await _post(c, [good, _ev("a", "p", 1, None, PLAIN), {**_ev("b", "q", 1, board=PLAIN), "subscores": None},
                        _ev("c", "r", 1, [], PLAIN)])
    assert r.status_code == 200, r.text
    assert [x["outcome"] for x in r.json()["results"]] == ["APPLIED_FIRST_SCORE"] * 4


async def test_reads_and_changes_return_subscores_and_a_better_subscore_replaces_the_best(harness):
    c = harness.client
    assert (await _board(c)).status_code == 201  # desc, asc
    assert (await _board(c, PLAIN, subscores=None)).status_code == 201
    r = await _post(c, [_ev("a1", "p-ava", 900, [MIN, MAX]), _ev("b1", "p-ben", 900, [0, 0]),
                        _ev("c1", "p-cat", 800, [MAX, MIN]), _ev("z1", "p-ava", 1, board=PLAIN)])
    assert r.status_code == 200, r.text
    # the same score, later, with a better first subscore: a new best
    r = await _post(c, [_ev("a2", "p-ava", 900, [1, MAX], at="2026-11-02T00:00:00Z")])
    assert r.json()["results"][0]["outcome"] == "APPLIED_NEW_BEST"
    r = await _post(c, [_ev("a3", "p-ava", 900, [1, MAX - 1], at="2026-11-03T00:00:00Z"),
                        _ev("a4", "p-ava", 900, [0, MIN])])
    assert [x["outcome"] for x in r.json()["results"]] == ["APPLIED_NEW_BEST", "REJECTED_NOT_AN_IMPROVEMENT"]
    want = [("p-ava", 900, [1, MAX - 1]), ("p-ben", 900, [0, 0]), ("p-cat", 800, [MAX, MIN])]

    top = (await c.get(f"/v1/boards/{BOARD}/top", params={"limit": 10}, headers=H("reader"))).json()
    assert [(e["player_id"], e["value"], e["subscores"]) for e in top["entries"]] == want
    again = await c.get(f"/v1/boards/{BOARD}/top", params={"limit": 10}, headers=H("reader"))
    assert again.json() == top
    me = (await c.get(f"/v1/boards/{BOARD}/players/p-cat", headers=H("reader"))).json()
    assert (me["rank"], me["subscores"]) == (3, [MAX, MIN])
    around = (await c.get(f"/v1/boards/{BOARD}/players/p-ben/around", params={"radius": 1},
                          headers=H("reader"))).json()
    assert [(e["player_id"], e["subscores"]) for e in around["entries"]] == [(p, s) for p, _, s in want]
    subset = (await c.post(f"/v1/boards/{BOARD}/ranked-subset", json={"player_ids": ["p-cat", "p-ben"]},
                           headers=H("reader"))).json()
    assert [(e["rank"], e["player_id"], e["subscores"]) for e in subset["entries"]] == \
        [(1, "p-ben", [0, 0]), (2, "p-cat", [MAX, MIN])]
    changes = (await c.get(f"/v1/boards/{BOARD}/changes", params={"since_version": 0},
                           headers=H("reader"))).json()
    assert changes["kind"] == "deltas"
    assert [(x["player_id"], x["subscores"]) for d in changes["deltas"] for x in d["changes"]] == [
        ("p-ava", [MIN, MAX]), ("p-ben", [0, 0]), ("p-cat", [MAX, MIN]), ("p-ava", [1, MAX]),
        ("p-ava", [1, MAX - 1])]
    snap = (await c.get(f"/v1/boards/{BOARD}/changes", params={"since_version": 10**6},
                        headers=H("reader"))).json()
    assert [(e["player_id"], e["subscores"]) for e in snap["entries"]] == [(p, s) for p, _, s in want]
    # a board without subscores shows none anywhere
    plain = (await c.get(f"/v1/boards/{PLAIN}/top", headers=H("reader"))).json()
    assert "subscores" not in plain["entries"][0]
    assert "subscores" not in (await c.get(f"/v1/boards/{PLAIN}/players/p-ava", headers=H("reader"))).json()


async def test_competition_ties_are_on_the_primary_value_and_the_subscores_together(harness):
    c = harness.client
    assert (await _board(c, subscores=["asc"])).status_code == 201
    r = await _post(c, [_ev("1", "a", 10, [5]), _ev("2", "b", 10, [5], at="2026-11-01T11:00:00Z"),
                        _ev("3", "c", 10, [6]), _ev("4", "d", 9, [MIN]), _ev("5", "e", 9, [MIN])])
    assert r.status_code == 200, r.text
    q = {"ties": "competition"}
    top = (await c.get(f"/v1/boards/{BOARD}/top", params={**q, "limit": 10}, headers=H("reader"))).json()
    assert [(e["rank"], e["tied_rank"], e["player_id"]) for e in top["entries"]] == [
        (1, 1, "a"), (2, 1, "b"), (3, 3, "c"), (4, 4, "d"), (5, 4, "e")]
    for pid, tied in [("b", 1), ("c", 3), ("e", 4)]:
        me = (await c.get(f"/v1/boards/{BOARD}/players/{pid}", params=q, headers=H("reader"))).json()
        assert me["tied_rank"] == tied, pid
    around = (await c.get(f"/v1/boards/{BOARD}/players/e/around", params={**q, "radius": 1},
                          headers=H("reader"))).json()
    assert [(e["player_id"], e["tied_rank"]) for e in around["entries"]] == [("d", 4), ("e", 4)]
    around = (await c.get(f"/v1/boards/{BOARD}/players/b/around", params={**q, "radius": 1},
                          headers=H("reader"))).json()
    assert [(e["player_id"], e["tied_rank"]) for e in around["entries"]] == [("a", 1), ("b", 1), ("c", 3)]


async def test_subscores_are_part_of_an_events_content(harness):
    c = harness.client
    assert (await _board(c, subscores=["desc"])).status_code == 201
    await _post(c, [_ev("e1", "p", 5, [MAX])])
    r = await _post(c, [_ev("e1", "p", 5, [MAX]), _ev("e1", "p", 5, [MAX - 1])])
    assert [x["outcome"] for x in r.json()["results"]] == ["DUPLICATE_IGNORED", "REJECTED_EVENT_ID_CONFLICT"]


async def test_exports_carry_subscores_as_a_last_csv_column_and_a_jsonl_field(harness):
    c = harness.client
    assert (await _board(c)).status_code == 201  # desc, asc
    assert (await _board(c, "g:m:s:one", subscores=["asc"])).status_code == 201
    assert (await _board(c, PLAIN, subscores=None)).status_code == 201
    empty = await c.get("/v1/boards/g:m:s:one/export", params={"format": "csv"}, headers=H("admin"))
    assert empty.text == "rank,player_id,value,achieved_at,metadata,subscores\r\n"
    r = await _post(c, [_ev("a", "p-ava", 9, [MIN, MAX]), _ev("b", "p-ben", 9, [0, -5]),
                        {**_ev("c", "p,cat", 7, [MAX, MIN]), "metadata": {"m": "x,y"}},
                        _ev("d", "p", 1, [3], "g:m:s:one"), _ev("e", "q", 1, board=PLAIN)])
    assert r.status_code == 200, r.text
    csv_ = await c.get(f"/v1/boards/{BOARD}/export", params={"format": "csv", "ties": "competition"},
                       headers=H("admin"))
    assert csv_.status_code == 200, csv_.text
    lines = csv_.text.split("\r\n")
    assert lines[0] == "rank,player_id,value,achieved_at,metadata,tied_rank,subscores"
    assert lines[1] == '1,p-ben,9,2026-11-01T10:00:00.000Z,,1,"[0,-5]"'
    assert lines[2] == f'2,p-ava,9,2026-11-01T10:00:00.000Z,,2,"[{MIN},{MAX}]"'
    assert lines[3] == f'3,"p,cat",7,2026-11-01T10:00:00.000Z,"{{""m"":""x,y""}}",3,"[{MAX},{MIN}]"'
    one = await c.get("/v1/boards/g:m:s:one/export", params={"format": "csv"}, headers=H("admin"))
    assert one.text.split("\r\n")[1] == "1,p,1,2026-11-01T10:00:00.000Z,,[3]"  # one subscore: no comma, no quotes
    jl = await c.get(f"/v1/boards/{BOARD}/export", params={"format": "jsonl"}, headers=H("admin"))
    rows = [json.loads(x) for x in jl.text.splitlines()]
    assert [(x["player_id"], x["subscores"]) for x in rows] == [("p-ben", [0, -5]), ("p-ava", [MIN, MAX]),
                                                                ("p,cat", [MAX, MIN])]
    assert list(rows[2]) == ["rank", "player_id", "value", "achieved_at", "metadata", "subscores"]
    plain = await c.get(f"/v1/boards/{PLAIN}/export", params={"format": "jsonl"}, headers=H("admin"))
    assert "subscores" not in json.loads(plain.text.splitlines()[0])
    plain = await c.get(f"/v1/boards/{PLAIN}/export", params={"format": "csv"}, headers=H("admin"))
    assert plain.text.split("\r\n")[0] == "rank,player_id,value,achieved_at,metadata"


async def test_live_snapshot_and_deltas_carry_subscores(engines):
    b = "g:m:s:livesubs"
    eng = await engines()
    await eng.create_board(BoardSpec(b, Policy.BEST_SCORE, shards=2, subscores=("desc",)))
    await eng.submit([ScoreEvent(b, "e1", "p1", 100, 1, 1, b"", (MIN,)), ScoreEvent(b, "e2", "p2", 100, 1, 1, b"", (0,))])
    hub = LiveHub(eng, window_s=0.02)
    hub.start()
    sub = await hub.subscribe(b, 3)
    await settle(hub)
    [snap] = await drain(sub)
    kind, _, data = parse(snap)
    assert kind == "snapshot"
    assert [(e["player_id"], e["subscores"]) for e in data["entries"]] == [("p2", [0]), ("p1", [MIN])]
    # the same score with a better subscore: a new best, and the delta carries it
    await eng.submit([ScoreEvent(b, "e3", "p1", 100, 2, 2, b"", (MAX,))])
    await settle(hub)
    [delta] = await drain(sub)
    kind, _, data = parse(delta)
    assert kind == "delta"
    assert {"player_id": "p1", "value": 100, "achieved_at": "1970-01-01T00:00:00.002Z", "status": "ACTIVE",
            "subscores": [MAX]} in data["changes"]
    await eng.invalidate(Invalidation(b, "e3"))
    await settle(hub)
    [delta] = await drain(sub)
    kind, _, data = parse(delta)
    assert [ch["subscores"] for ch in data["changes"] if ch["player_id"] == "p1"] == [[MIN]]
    hub.unsubscribe(sub)
    await hub.close()

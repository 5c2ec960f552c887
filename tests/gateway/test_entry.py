"""Competition entry over HTTP (docs/api.md §16, "Entry"): board settings,
the join route and every error, entry outcomes, attempts in player views."""

from __future__ import annotations

import pytest

from tests.gateway.conftest import BOARD, H

pytestmark = pytest.mark.anyio

JOIN = f"/v1/boards/{BOARD}/players/{{}}/join"


async def _create(c, **entry):
    body = {"board_id": BOARD, "policy": "best_score", "shards": 3}
    if entry:
        body["entry"] = entry
    r = await c.post("/v1/boards", json=body, headers=H("admin"))
    assert r.status_code == 201, r.text
    return r.json()


def _ev(i: int, player: str, value: int = 10) -> dict:
    return {"event_id": f"e{i}", "board_id": BOARD, "player_id": player, "value": value,
            "achieved_at": "2026-11-01T10:00:00Z"}


async def _submit(c, events) -> list[str]:
    r = await c.post("/v1/events", json={"events": events}, headers=H("game_server"))
    assert r.status_code == 200, r.text
    return [x["outcome"] for x in r.json()["results"]]


async def test_board_shows_its_entry_rules_and_next_season_copies_them(harness):
    c = harness.client
    body = await _create(c, join_required=True, max_players=100, max_attempts=3)
    rules = {"join_required": True, "max_players": 100, "max_attempts": 3}
    assert body["entry"] == rules
    assert (await c.get(f"/v1/boards/{BOARD}", headers=H("reader"))).json()["entry"] == rules
    r = await c.post(f"/v1/boards/{BOARD}/next-season", json={"season": "S8"}, headers=H("admin"))
    assert r.status_code == 201 and r.json()["entry"] == rules
    # defaults: join_required false, no caps
    r = await c.post("/v1/boards", json={"board_id": "g:m:s:x", "policy": "cumulative", "entry": {}},
                     headers=H("admin"))
    assert r.status_code == 201
    assert r.json()["entry"] == {"join_required": False, "max_players": None, "max_attempts": None}
    # a board without entry rules shows none
    r = await c.post("/v1/boards", json={"board_id": "g:m:s:y", "policy": "cumulative"}, headers=H("admin"))
    assert "entry" not in r.json()


@pytest.mark.parametrize("entry, field", [
    ({"join_required": "yes"}, "entry.join_required"),
    ({"max_players": 0}, "entry.max_players"),
    ({"max_players": 2.5}, "entry.max_players"),
    ({"max_attempts": -1}, "entry.max_attempts"),
    ({"max_attempts": "3"}, "entry.max_attempts"),
    ({"cohort": 3}, "entry.cohort"),
    ([], "entry"),
])
async def test_bad_entry_settings_are_422_naming_the_field_and_create_nothing(harness, entry, field):
    c = harness.client
    r = await c.post("/v1/boards", json={"board_id": BOARD, "policy": "best_score", "entry": entry},
                     headers=H("admin"))
    assert r.status_code == 422
    assert r.json()["error"]["code"] == "VALIDATION_FAILED" and r.json()["error"]["field"] == field
    assert (await c.get(f"/v1/boards/{BOARD}", headers=H("reader"))).status_code == 404


async def test_join_201_then_200_positions_in_order_and_no_version_change(harness):
    c = harness.client
    await _create(c, join_required=True, max_players=2)
    r = await c.post(JOIN.format("p-ava"), headers=H("game_server"))
    assert r.status_code == 201 and r.json() == {"player_id": "p-ava", "position": 0}
    r = await c.post(JOIN.format("p-ben"), headers=H("admin"))
    assert r.status_code == 201 and r.json() == {"player_id": "p-ben", "position": 1}
    r = await c.post(JOIN.format("p-ava"), headers=H("game_server"))
    assert r.status_code == 200 and r.json() == {"player_id": "p-ava", "position": 0}
    r = await c.post(JOIN.format("p-chloe"), headers=H("game_server"))
    assert r.status_code == 409 and r.json()["error"]["code"] == "BOARD_FULL"
    assert (await c.get(f"/v1/boards/{BOARD}", headers=H("reader"))).json()["version"] == 0
    # whatever the board's state, a player who joined gets their position
    r = await c.post(f"/v1/boards/{BOARD}/state", json={"state": "FROZEN"}, headers=H("admin"))
    assert r.status_code == 200
    r = await c.post(JOIN.format("p-ben"), headers=H("game_server"))
    assert r.status_code == 200 and r.json() == {"player_id": "p-ben", "position": 1}


async def test_join_errors(harness):
    c = harness.client
    r = await c.post(JOIN.format("p-ava"), headers=H("game_server"))
    assert r.status_code == 404 and r.json()["error"]["code"] == "BOARD_NOT_FOUND"
    await _create(c, join_required=True)
    for role in ("reader", "moderator"):
        r = await c.post(JOIN.format("p-ava"), headers=H(role))
        assert r.status_code == 403 and r.json()["error"]["code"] == "FORBIDDEN"
    r = await c.post(JOIN.format("p-ava"))
    assert r.status_code == 401
    r = await c.post(JOIN.format("bad%01id"), headers=H("game_server"))
    assert r.status_code == 422 and r.json()["error"]["code"] == "VALIDATION_FAILED"
    r = await c.post(JOIN.format("x" * 129), headers=H("game_server"))
    assert r.status_code == 422
    r = await c.post(f"/v1/boards/{BOARD}/state", json={"state": "FROZEN"}, headers=H("admin"))
    r = await c.post(JOIN.format("p-ava"), headers=H("game_server"))
    assert r.status_code == 409 and r.json()["error"]["code"] == "BOARD_NOT_OPEN"
    # none of the refused joins was recorded: after they failed, nobody has joined
    assert (await c.post(JOIN.format("p-ava"), headers=H("game_server"))).status_code == 409


async def test_refused_join_changes_nothing(harness):
    """The 4xx-changes-nothing rule: a BOARD_FULL join does not take a position."""
    c = harness.client
    await _create(c, max_players=1)
    assert (await c.post(JOIN.format("p-ava"), headers=H("game_server"))).status_code == 201
    for _ in range(2):
        assert (await c.post(JOIN.format("p-ben"), headers=H("game_server"))).status_code == 409
    assert (await c.post(JOIN.format("p-ava"), headers=H("game_server"))).json()["position"] == 0


async def test_entry_outcomes_over_http_and_attempts_in_player_views(harness):
    c = harness.client
    await _create(c, join_required=True, max_attempts=2)
    await c.post(JOIN.format("p-ava"), headers=H("game_server"))
    got = await _submit(c, [_ev(1, "p-ava", 5), _ev(2, "p-ben"), _ev(3, "p-ava", 7), _ev(4, "p-ava", 9)])
    assert got == ["APPLIED_FIRST_SCORE", "REJECTED_NOT_JOINED", "APPLIED_NEW_BEST", "REJECTED_MAX_ATTEMPTS"]
    # a resend of rejected events is a duplicate
    assert await _submit(c, [_ev(2, "p-ben"), _ev(4, "p-ava", 9)]) == ["DUPLICATE_IGNORED"] * 2
    view = (await c.get(f"/v1/boards/{BOARD}/players/p-ava", headers=H("reader"))).json()
    assert view["attempts"] == 2 and view["value"] == 7
    view = (await c.get(f"/v1/boards/{BOARD}/players/p-ava?approximate=true", headers=H("reader"))).json()
    assert view["attempts"] == 2
    hist = (await c.get(f"/v1/boards/{BOARD}/players/p-ben/history", headers=H("moderator"))).json()
    assert [e["outcome"] for e in hist["events"]] == ["REJECTED_NOT_JOINED", "DUPLICATE_IGNORED"]


async def test_board_full_without_join_required_and_no_attempts_field(harness):
    c = harness.client
    await _create(c, max_players=2)
    got = await _submit(c, [_ev(1, "p-ava"), _ev(2, "p-ben"), _ev(3, "p-chloe"), _ev(4, "p-ava", 20)])
    assert got == ["APPLIED_FIRST_SCORE", "APPLIED_FIRST_SCORE", "REJECTED_BOARD_FULL", "APPLIED_NEW_BEST"]
    view = (await c.get(f"/v1/boards/{BOARD}/players/p-ava", headers=H("reader"))).json()
    assert "attempts" not in view  # only on boards with max_attempts


JOINS = f"/v1/boards/{BOARD}/joins"


@pytest.mark.parametrize("shards", [1, 3])
async def test_bulk_join_answers_each_player_as_the_single_join_would(harness, shards):
    """POST …/joins (docs/api.md §18): per player in request order 201 / 200 / 409 with the single join's
    body or error; positions continue the single joins'; and the same requests one at a time answer alike."""
    c = harness.client
    r = await c.post("/v1/boards", json={"board_id": BOARD, "policy": "best_score", "shards": shards,
                                         "entry": {"join_required": True, "max_players": 4}}, headers=H("admin"))
    assert r.status_code == 201
    assert (await c.post(JOIN.format("p-ava"), headers=H("game_server"))).status_code == 201
    ids = ["p-ben", "p-ava", "p-chloe", "p-dev", "p-eli", "p-fay"]
    r = await c.post(JOINS, json={"player_ids": ids}, headers=H("game_server"))
    assert r.status_code == 200, r.text
    full = {"code": "BOARD_FULL", "message": "The board is full: 4 players have joined.", "field": None}
    assert r.json() == {"board_id": BOARD, "results": [
        {"player_id": "p-ben", "status": 201, "position": 1}, {"player_id": "p-ava", "status": 200, "position": 0},
        {"player_id": "p-chloe", "status": 201, "position": 2}, {"player_id": "p-dev", "status": 201, "position": 3},
        {"player_id": "p-eli", "status": 409, "error": full}, {"player_id": "p-fay", "status": 409, "error": full}]}
    for item in r.json()["results"]:  # the single join agrees (now every joined one answers 200)
        one = await c.post(JOIN.format(item["player_id"]), headers=H("admin"))
        assert one.status_code == (409 if item["status"] == 409 else 200)
        assert one.json() == ({"error": item["error"]} if item["status"] == 409 else
                              {"player_id": item["player_id"], "position": item["position"]})
    # joined players' events count; the refused ones are not joined
    assert await _submit(c, [_ev(1, "p-chloe"), _ev(2, "p-eli")]) == ["APPLIED_FIRST_SCORE", "REJECTED_NOT_JOINED"]
    await c.post(f"/v1/boards/{BOARD}/state", json={"state": "FROZEN"}, headers=H("admin"))
    r = await c.post(JOINS, json={"player_ids": ["p-dev", "p-zed"]}, headers=H("admin"))
    assert r.json()["results"] == [
        {"player_id": "p-dev", "status": 200, "position": 3},
        {"player_id": "p-zed", "status": 409, "error": {
            "code": "BOARD_NOT_OPEN", "message": "The board is not OPEN: players can no longer join it.",
            "field": None}}]


@pytest.mark.parametrize("body, field", [
    ({"player_ids": []}, "player_ids"),
    ({"player_ids": [f"p{i}" for i in range(1001)]}, "player_ids"),
    ({"player_ids": ["p-ava", "p-ben", "p-ava"]}, "player_ids[2]"),
    ({"player_ids": ["p-ava", ""]}, "player_ids[1]"),
    ({"player_ids": ["p-ava", "bad\u0007id"]}, "player_ids[1]"),
    ({"player_ids": ["p-ava", 7]}, "player_ids[1]"),
    ({"players": ["p-ava"]}, "player_ids"),
])
async def test_bad_bulk_joins_are_422_and_join_no_one(harness, body, field):
    c = harness.client
    await _create(c, join_required=True)
    r = await c.post(JOINS, json=body, headers=H("game_server"))
    assert r.status_code == 422, r.text
    assert r.json()["error"]["code"] == "VALIDATION_FAILED" and r.json()["error"]["field"] == field
    # nobody joined: p-ava's first join is still a 201 at position 0
    r = await c.post(JOIN.format("p-ava"), headers=H("game_server"))
    assert r.status_code == 201 and r.json()["position"] == 0


async def test_bulk_join_404_403_and_one_request_against_the_rate_limit(harness):
    c = harness.client
    r = await c.post(JOINS, json={"player_ids": ["p-ava"]}, headers=H("game_server"))
    assert r.status_code == 404 and r.json()["error"]["code"] == "BOARD_NOT_FOUND"
    await _create(c, join_required=True)
    for role in ("reader", "moderator"):
        r = await c.post(JOINS, json={"player_ids": ["p-ava"]}, headers=H(role))
        assert r.status_code == 403 and r.json()["error"]["code"] == "FORBIDDEN"


@pytest.mark.settings(write_rate_per_s=0.001, write_burst=2)
async def test_a_bulk_join_of_1000_counts_once_against_the_rate_limit(harness):
    """A burst of 2 writes per key (per gateway worker): 1,000 joins in one request are one of them."""
    c = harness.client
    await _create(c, join_required=True)  # the admin's bucket
    ids = [f"p{i:04d}" for i in range(1000)]
    r = await c.post(JOINS, json={"player_ids": ids}, headers=H("game_server"))
    assert r.status_code == 200 and [x["position"] for x in r.json()["results"]] == list(range(1000))
    for _ in range(2 * len(harness.apps) - 1):
        r = await c.post(JOINS, json={"player_ids": ids[:10]}, headers=H("game_server"))
        assert r.status_code == 200 and {x["status"] for x in r.json()["results"]} == {200}
    r = await c.post(JOINS, json={"player_ids": ids[:10]}, headers=H("game_server"))
    assert r.status_code == 429 and r.json()["error"]["code"] == "RATE_LIMITED"

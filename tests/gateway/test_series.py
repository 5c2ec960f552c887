"""Recurring boards and one event for several boards over HTTP (docs/api.md
§15): results name their board, series route to their current instance,
fan-out results in request order, 413/422 as documented, series reads, the
instances route. The engine runs on the real clock here: events use "now"."""

from __future__ import annotations

import time
from datetime import datetime, timezone

import pytest

from engine.core.timefmt import format_timestamp
from tests.gateway.conftest import BOARD, H

pytestmark = pytest.mark.anyio

SERIES = "arena-clash:solo:daily:global"
OTHER = "arena-clash:solo:S7:eu"


def today() -> str:
    return datetime.now(timezone.utc).strftime("%Y%m%d")


def instance() -> str:
    return f"arena-clash:solo:daily.{today()}:global"


def now_ts(shift_ms: int = 0) -> str:
    return format_timestamp(time.time_ns() // 1_000_000 + shift_ms)


async def _boards(c) -> None:
    for body in ({"board_id": SERIES, "policy": "best_score", "shards": 3, "recurrence": {"every": "day", "keep": 5}},
                 {"board_id": BOARD, "policy": "best_score"}, {"board_id": OTHER, "policy": "cumulative"}):
        r = await c.post("/v1/boards", json=body, headers=H("admin"))
        assert r.status_code == 201, r.text


def ev(eid: str, player: str, value: int, **where) -> dict:
    return {"event_id": eid, "player_id": player, "value": value, "achieved_at": now_ts(), **where}


async def test_results_name_their_boards_and_a_fan_out_is_one_result_per_board_in_order(harness):
    c = harness.client
    await _boards(c)
    body = {"events": [ev("e1", "p1", 10, board_id=SERIES), ev("e2", "p2", 20, board_ids=[BOARD, SERIES, OTHER]),
                       ev("e3", "p3", 30, board_id=BOARD)]}
    r = await c.post("/v1/events", json=body, headers=H("game_server"))
    assert r.status_code == 200, r.text
    got = [(x["event_id"], x["board_id"], x["outcome"]) for x in r.json()["results"]]
    assert got == [("e1", instance(), "APPLIED_FIRST_SCORE"), ("e2", BOARD, "APPLIED_FIRST_SCORE"),
                   ("e2", instance(), "APPLIED_FIRST_SCORE"), ("e2", OTHER, "APPLIED"),
                   ("e3", BOARD, "APPLIED_FIRST_SCORE")]
    # deduplicated per board under the one event id
    r = await c.post("/v1/events", json={"events": body["events"][1:2]}, headers=H("game_server"))
    assert [x["outcome"] for x in r.json()["results"]] == ["DUPLICATE_IGNORED"] * 3
    # reads on the series answer from the current instance
    top = (await c.get(f"/v1/boards/{SERIES}/top", headers=H("reader"))).json()
    assert [e["player_id"] for e in top["entries"]] == ["p2", "p1"]
    assert top == (await c.get(f"/v1/boards/{instance()}/top", headers=H("reader"))).json()
    me = (await c.get(f"/v1/boards/{SERIES}/players/p1", headers=H("reader"))).json()
    assert me["rank"] == 2
    for path, role in (("players/p1/around?radius=1", "reader"), ("changes?since_version=0", "reader"),
                       ("export?format=jsonl", "admin"), ("players/p2/history", "moderator")):
        via_series = await c.get(f"/v1/boards/{SERIES}/{path}", headers=H(role))
        direct = await c.get(f"/v1/boards/{instance()}/{path}", headers=H(role))
        assert via_series.status_code == direct.status_code == 200, (path, via_series.text)
        assert via_series.content == direct.content, path
    info = (await c.get(f"/v1/boards/{SERIES}", headers=H("reader"))).json()
    assert info["recurrence"] == {"every": "day", "timezone": "UTC", "at": "00:00", "keep": 5}
    assert (info["current"], info["size"]) == (instance(), 2)
    inst = (await c.get(f"/v1/boards/{instance()}", headers=H("reader"))).json()
    day = datetime.now(timezone.utc).strftime("%Y-%m-%d")
    assert inst["series"] == SERIES and inst["window"]["starts_at"].startswith(day + "T00:00:00")
    assert inst["closes_at"] == inst["window"]["ends_at"]
    assert "recurrence" not in inst and "series" not in (await c.get(f"/v1/boards/{BOARD}", headers=H("reader"))).json()
    listed = (await c.get(f"/v1/boards/{SERIES}/instances", headers=H("reader"))).json()
    assert listed == {"instances": [{"board_id": instance(), "starts_at": inst["window"]["starts_at"],
                                     "ends_at": inst["window"]["ends_at"], "state": "OPEN", "size": 2}]}
    r = await c.get(f"/v1/boards/{BOARD}/instances", headers=H("reader"))
    assert r.status_code == 404 and r.json()["error"]["code"]
    assert (await c.get(f"/v1/boards/{SERIES}/instances")).status_code == 401


async def test_too_far_ahead_names_the_request_event_and_nothing_is_applied(harness):
    c = harness.client
    await _boards(c)
    events = [ev("a", "p1", 1, board_ids=[BOARD, OTHER]), ev("b", "p2", 2, board_id=BOARD),
              dict(ev("c", "p3", 3, board_id=SERIES), achieved_at=now_ts(3 * 86_400_000))]
    r = await c.post("/v1/events", json={"events": events}, headers=H("game_server"))
    assert r.status_code == 422, r.text
    assert r.json()["error"]["field"] == "events[2].achieved_at"
    assert (await c.get(f"/v1/boards/{BOARD}", headers=H("reader"))).json()["size"] == 0


@pytest.mark.parametrize("event, field", [
    ({"board_id": BOARD, "board_ids": [OTHER]}, "events[0].board_ids"),
    ({}, "events[0].board_id"),
    ({"board_ids": []}, "events[0].board_ids"),
    ({"board_ids": [BOARD, BOARD]}, "events[0].board_ids"),
    ({"board_ids": None}, "events[0].board_ids"),
    ({"board_ids": [BOARD, "not-a-board"]}, "events[0].board_ids[1]"),
    ({"board_ids": [f"g:m:s:{i}" for i in range(17)]}, "events[0].board_ids"),
])
async def test_board_id_xor_board_ids(harness, event, field):
    r = await harness.client.post("/v1/events", json={"events": [{**ev("a", "p", 1), **event}]},
                                  headers=H("game_server"))
    assert r.status_code == 422, r.text
    assert r.json()["error"]["field"] == field


@pytest.mark.settings(max_batch_events=4)
async def test_a_fan_out_counts_once_per_board_towards_the_batch_limit(harness):
    c = harness.client
    await _boards(c)
    two = [BOARD, OTHER]
    r = await c.post("/v1/events", json={"events": [ev(f"e{i}", "p", 1, board_ids=two) for i in range(2)]},
                     headers=H("game_server"))
    assert r.status_code == 200 and len(r.json()["results"]) == 4
    r = await c.post("/v1/events", json={"events": [ev(f"f{i}", "p", 1, board_ids=two) for i in range(2)]
                                         + [ev("g", "p", 1, board_id=BOARD)]}, headers=H("game_server"))
    assert r.status_code == 413, r.text
    assert r.json()["error"]["code"] == "BATCH_TOO_LARGE"


async def test_joins_of_a_series_join_its_current_instance_and_name_it(harness):
    """docs/api.md §18: a bulk join, and a single join, of a series id join the current window's instance."""
    c = harness.client
    await _boards(c)
    r = await c.post(f"/v1/boards/{SERIES}/joins", json={"player_ids": ["p-ava", "p-ben"]}, headers=H("game_server"))
    assert r.status_code == 200, r.text
    assert r.json() == {"board_id": instance(), "results": [{"player_id": "p-ava", "status": 201, "position": 0},
                                                            {"player_id": "p-ben", "status": 201, "position": 1}]}
    r = await c.post(f"/v1/boards/{SERIES}/players/p-ava/join", headers=H("game_server"))
    assert r.status_code == 200 and r.json() == {"player_id": "p-ava", "position": 0, "board_id": instance()}
    r = await c.post(f"/v1/boards/{instance()}/players/p-chloe/join", headers=H("game_server"))
    assert r.status_code == 201 and r.json() == {"player_id": "p-chloe", "position": 2}

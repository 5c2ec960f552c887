"""Boards and season state over HTTP (docs/api.md §5)."""

from __future__ import annotations

import pytest

from tests.gateway.conftest import BOARD, H

pytestmark = pytest.mark.anyio


async def test_create_list_get_and_conflict(harness):
    c = harness.client
    r = await c.post("/v1/boards", json={"board_id": BOARD, "policy": "fastest_time", "shards": 1,
                                         "max_plausible_time_ms": 600000, "review_above": None}, headers=H("admin"))
    assert r.status_code == 201
    body = r.json()
    assert {k: body[k] for k in ("board_id", "policy", "state", "version", "size", "shards")} == {
        "board_id": BOARD, "policy": "fastest_time", "state": "OPEN", "version": 0, "size": 0, "shards": 1}
    r = await c.post("/v1/boards", json={"board_id": BOARD, "policy": "best_score"}, headers=H("admin"))
    assert r.status_code == 409 and r.json()["error"]["code"] == "BOARD_EXISTS"
    listed = (await c.get("/v1/boards", headers=H("reader"))).json()["boards"]
    assert [b["board_id"] for b in listed] == [BOARD]
    r = await c.get("/v1/boards/g:m:s:missing", headers=H("reader"))
    assert r.status_code == 404 and r.json()["error"]["code"] == "BOARD_NOT_FOUND"


async def test_state_moves_forward_only(seeded):
    c = seeded.client
    for state in ("FROZEN", "FINALIZED"):
        r = await c.post(f"/v1/boards/{BOARD}/state", json={"state": state}, headers=H("admin"))
        assert r.status_code == 200 and r.json()["state"] == state
    r = await c.post(f"/v1/boards/{BOARD}/state", json={"state": "OPEN"}, headers=H("admin"))
    assert r.status_code == 409 and r.json()["error"]["code"] == "INVALID_TRANSITION"
    assert (await seeded.board())["state"] == "FINALIZED"


async def test_a_405_allows_every_method_of_the_path(harness):
    """Starlette names only the first route that matched the path; /v1/boards has GET and POST."""
    c = harness.client
    for method, path, allow in (("OPTIONS", "/v1/boards", "GET, POST"), ("DELETE", "/v1/boards", "GET, POST"),
                                ("PUT", f"/v1/boards/{BOARD}", "GET"), ("DELETE", f"/v1/boards/{BOARD}/top", "GET")):
        r = await c.request(method, path, headers=H("admin"))
        assert r.status_code == 405 and r.json()["error"]["code"] == "METHOD_NOT_ALLOWED", (method, path)
        assert r.headers["allow"] == allow, (method, path, r.headers["allow"])


# ---------------------------------------------------- season schedule (§13)

FUTURE = "2999-01-01T00:00:00Z"


async def test_create_with_a_schedule_and_get_shows_it(harness):
    c = harness.client
    r = await c.post("/v1/boards", json={"board_id": BOARD, "policy": "best_score", "closes_at": "2999-01-01T01:00:00+01:00",
                                         "finalize_after_s": 0}, headers=H("admin"))
    assert r.status_code == 201, r.text
    assert (r.json()["closes_at"], r.json()["finalize_after_s"], r.json()["state"]) == (
        "2999-01-01T00:00:00.000Z", 0, "OPEN")
    body = await harness.board()
    assert (body["closes_at"], body["finalize_after_s"]) == ("2999-01-01T00:00:00.000Z", 0)
    r = await c.post("/v1/boards", json={"board_id": "g:m:s:plain", "policy": "cumulative"}, headers=H("admin"))
    assert (r.json()["closes_at"], r.json()["finalize_after_s"]) == (None, 3600)
    r = await c.post("/v1/boards", json={"board_id": "g:m:s:ms", "policy": "cumulative", "closes_at": 32503680000000},
                     headers=H("admin"))
    assert r.status_code == 201 and r.json()["closes_at"] == "3000-01-01T00:00:00.000Z"
    listed = {b["board_id"]: b for b in (await c.get("/v1/boards", headers=H("reader"))).json()["boards"]}
    assert listed[BOARD]["closes_at"] == "2999-01-01T00:00:00.000Z"


async def test_a_closes_at_already_past_freezes_the_board_before_the_answer(harness):
    c = harness.client
    r = await c.post("/v1/boards", json={"board_id": BOARD, "policy": "best_score", "closes_at": "2020-01-01T00:00:00Z",
                                         "finalize_after_s": 10**9}, headers=H("admin"))
    assert r.status_code == 201 and r.json()["state"] == "FROZEN"
    ev = {"event_id": "e1", "board_id": BOARD, "player_id": "p", "value": 1, "achieved_at": "2026-11-01T10:00:00Z"}
    r = await c.post("/v1/events", json={"events": [ev]}, headers=H("game_server"))
    assert r.json()["results"][0]["outcome"] == "HELD_FOR_CORRECTION"


@pytest.mark.parametrize("extra, field", [
    ({"closes_at": 1.5}, "closes_at"), ({"closes_at": True}, "closes_at"), ({"closes_at": "2026-12-01T00:00:00"}, "closes_at"),
    ({"closes_at": "tomorrow"}, "closes_at"), ({"closes_at": 10**17}, "closes_at"),
    ({"finalize_after_s": -1}, "finalize_after_s"), ({"finalize_after_s": 1.0}, "finalize_after_s"),
    ({"finalize_after_s": "60"}, "finalize_after_s"), ({"finalize_after_s": 2**63}, "finalize_after_s"),
])
async def test_a_bad_schedule_is_422_and_creates_nothing(harness, extra, field):
    c = harness.client
    r = await c.post("/v1/boards", json={"board_id": BOARD, "policy": "best_score", **extra}, headers=H("admin"))
    assert r.status_code == 422, r.text
    assert r.json()["error"]["code"] == "VALIDATION_FAILED" and r.json()["error"]["field"] == field
    assert (await c.get("/v1/boards", headers=H("reader"))).json()["boards"] == []


async def test_next_season(harness):
    c = harness.client
    r = await c.post("/v1/boards", json={"board_id": BOARD, "policy": "fastest_time", "shards": 3,
                                         "max_plausible_time_ms": 600000, "review_above": 90000,
                                         "closes_at": FUTURE, "finalize_after_s": 120}, headers=H("admin"))
    assert r.status_code == 201
    url = f"/v1/boards/{BOARD}/next-season"
    r = await c.post(url, json={"season": "S8", "closes_at": "3000-01-01T00:00:00Z"}, headers=H("admin"))
    assert r.status_code == 201, r.text
    got = r.json()
    assert {k: got[k] for k in ("board_id", "policy", "state", "version", "size", "shards", "max_plausible_time_ms",
                                "review_above", "closes_at", "finalize_after_s")} == {
        "board_id": "arena-clash:solo:S8:global", "policy": "fastest_time", "state": "OPEN", "version": 0, "size": 0,
        "shards": 3, "max_plausible_time_ms": 600000, "review_above": 90000,
        "closes_at": "3000-01-01T00:00:00.000Z", "finalize_after_s": 120}
    assert (await harness.board("arena-clash:solo:S8:global"))["closes_at"] == "3000-01-01T00:00:00.000Z"
    r = await c.post(url, json={"season": "S9", "finalize_after_s": 5}, headers=H("admin"))
    assert r.status_code == 201 and (r.json()["closes_at"], r.json()["finalize_after_s"]) == (None, 5)
    r = await c.post(url, json={"season": "S8"}, headers=H("admin"))
    assert r.status_code == 409 and r.json()["error"]["code"] == "BOARD_EXISTS"
    for bad in ("", "-S10", "S:10", "S 10", "x" * 65, "S10\n", 10, None):
        r = await c.post(url, json={"season": bad}, headers=H("admin"))
        assert r.status_code == 422 and r.json()["error"]["field"] == "season", (bad, r.text)
    r = await c.post(url, json={"season": "S10", "closes_at": "soon"}, headers=H("admin"))
    assert r.status_code == 422 and r.json()["error"]["field"] == "closes_at"
    r = await c.post(url, json={}, headers=H("admin"))
    assert r.status_code == 422 and r.json()["error"]["field"] == "season"
    r = await c.post("/v1/boards/g:m:S1:missing/next-season", json={"season": "S2"}, headers=H("admin"))
    assert r.status_code == 404 and r.json()["error"]["code"] == "BOARD_NOT_FOUND"
    for role in ("reader", "game_server", "moderator"):
        r = await c.post(url, json={"season": "S11"}, headers=H(role))
        assert r.status_code == 403
    boards = [b["board_id"] for b in (await c.get("/v1/boards", headers=H("reader"))).json()["boards"]]
    assert boards == [BOARD, "arena-clash:solo:S8:global", "arena-clash:solo:S9:global"]


# ---------------------------------------------------- recurring boards (§15)

SERIES = "arena-clash:solo:daily:global"


async def test_a_recurring_board_carries_its_recurrence_to_the_engine(harness):
    """The recurrence reaches the board's spec (what the log records), defaults filled in;
    a board without one has none."""
    from engine.core.windows import Recurrence

    c = harness.client
    r = await c.post("/v1/boards", json={"board_id": SERIES, "policy": "best_score", "recurrence": {
        "every": "day", "timezone": "Europe/Berlin", "at": "04:00"}}, headers=H("admin"))
    assert r.status_code == 201, r.text
    r = await c.post("/v1/boards", json={"board_id": BOARD, "policy": "best_score", "recurrence": None},
                     headers=H("admin"))
    assert r.status_code == 201, r.text
    boards = harness.engine.router.boards
    assert boards[SERIES].spec.recurrence == Recurrence("day", "Europe/Berlin", 240, 30)
    assert boards[BOARD].spec.recurrence is None


@pytest.mark.parametrize("recurrence, field", [
    ("day", "recurrence"), ([], "recurrence"), ({}, "recurrence.every"), ({"every": "hour"}, "recurrence.every"),
    ({"every": None}, "recurrence.every"), ({"every": "day", "timezone": "Mars/Olympus"}, "recurrence.timezone"),
    ({"every": "day", "timezone": "europe/berlin"}, "recurrence.timezone"),
    ({"every": "day", "timezone": None}, "recurrence.timezone"), ({"every": "day", "timezone": 1}, "recurrence.timezone"),
    ({"every": "day", "at": "24:00"}, "recurrence.at"), ({"every": "day", "at": "4:00"}, "recurrence.at"),
    ({"every": "day", "at": "04:00\n"}, "recurrence.at"), ({"every": "day", "at": 240}, "recurrence.at"),
    ({"every": "day", "keep": 0}, "recurrence.keep"), ({"every": "day", "keep": 1001}, "recurrence.keep"),
    ({"every": "day", "keep": 30.0}, "recurrence.keep"), ({"every": "day", "keep": True}, "recurrence.keep"),
    ({"every": "day", "keep": "30"}, "recurrence.keep"), ({"every": "day", "start": "04:00"}, "recurrence.start"),
])
async def test_a_bad_recurrence_is_422_naming_its_field_and_creates_nothing(harness, recurrence, field):
    c = harness.client
    r = await c.post("/v1/boards", json={"board_id": SERIES, "policy": "best_score", "recurrence": recurrence},
                     headers=H("admin"))
    assert r.status_code == 422, r.text
    assert r.json()["error"]["code"] == "VALIDATION_FAILED" and r.json()["error"]["field"] == field, r.text
    assert (await c.get("/v1/boards", headers=H("reader"))).json()["boards"] == []


async def test_a_series_season_part_leaves_room_for_the_window_date(harness):
    c = harness.client
    too_long = "g:m:" + "s" * 56 + ":x"
    r = await c.post("/v1/boards", json={"board_id": too_long, "policy": "best_score", "recurrence": {"every": "week"}},
                     headers=H("admin"))
    assert r.status_code == 422 and r.json()["error"]["field"] == "board_id", r.text
    r = await c.post("/v1/boards", json={"board_id": too_long, "policy": "best_score"}, headers=H("admin"))
    assert r.status_code == 201, r.text  # an ordinary board may use all 64
    r = await c.post("/v1/boards", json={"board_id": "g:m:" + "s" * 55 + ":x", "policy": "best_score",
                                         "recurrence": {"every": "month"}}, headers=H("admin"))
    assert r.status_code == 201, r.text
    url = "/v1/boards/g:m:" + "s" * 55 + ":x/next-season"
    r = await c.post(url, json={"season": "t" * 56}, headers=H("admin"))
    assert r.status_code == 422 and r.json()["error"]["field"] == "season", r.text
    r = await c.post(url, json={"season": "t" * 55}, headers=H("admin"))
    assert r.status_code == 201, r.text
    assert harness.engine.router.boards["g:m:" + "t" * 55 + ":x"].spec.recurrence.every == "month"


# ---------------------------------------------------- the latest policy (§6, §14)


async def test_a_latest_board_over_http(harness):
    """Create a latest board over 3 partitions; the most recent event stands
    whatever its value (an older one is REJECTED_NOT_LATEST, a tie on both
    timestamps goes to the greater event id), ranks are by value; invalidating
    the row's event falls back to the older event."""
    c = harness.client
    r = await c.post("/v1/boards", json={"board_id": BOARD, "policy": "latest", "shards": 3}, headers=H("admin"))
    assert r.status_code == 201, r.text
    assert (r.json()["policy"], r.json()["shards"]) == ("latest", 3)

    def ev(eid, pid, value, at, sub=None):
        return {"event_id": eid, "board_id": BOARD, "player_id": pid, "value": value,
                "achieved_at": f"2026-11-01T10:0{at}:00Z", "submitted_at": sub}
    batch = [ev("a-2", "p-ava", 1500, 2), ev("a-1", "p-ava", 1900, 1), ev("b-1", "p-ben", 1700, 1),
             ev("c-x", "p-chloe", 1600, 3, "2026-11-01T10:04:00Z"), ev("c-y", "p-chloe", 1650, 3),
             ev("d-1", "p-dev", 1200, 1), ev("d-2", "p-dev", 1250, 1)]
    r = await c.post("/v1/events", json={"events": batch}, headers=H("game_server"))
    assert r.status_code == 200, r.text
    assert [x["outcome"] for x in r.json()["results"]] == [
        "APPLIED_LATEST", "REJECTED_NOT_LATEST", "APPLIED_LATEST", "APPLIED_LATEST",
        "REJECTED_NOT_LATEST",  # same achieved_at, earlier submitted_at than c-x
        "APPLIED_LATEST", "APPLIED_LATEST"]  # "d-2" > "d-1" on a full tie
    top = (await c.get(f"/v1/boards/{BOARD}/top?limit=10", headers=H("reader"))).json()
    assert [(e["rank"], e["player_id"], e["value"]) for e in top["entries"]] == [
        (1, "p-ben", 1700), (2, "p-chloe", 1600), (3, "p-ava", 1500), (4, "p-dev", 1250)]
    view = (await c.get(f"/v1/boards/{BOARD}/players/p-ava", headers=H("reader"))).json()
    assert (view["rank"], view["value"], view["achieved_at"]) == (3, 1500, "2026-11-01T10:02:00.000Z")

    r = await c.post(f"/v1/boards/{BOARD}/invalidations", json={"event_id": "a-2", "reason": "r", "moderator": "m"},
                     headers=H("moderator"))
    assert r.status_code == 200, r.text
    assert (r.json()["status"], r.json()["value"]) == ("ACTIVE", 1900)
    view = (await c.get(f"/v1/boards/{BOARD}/players/p-ava", headers=H("reader"))).json()
    assert (view["rank"], view["value"]) == (1, 1900)
    info = (await c.get(f"/v1/boards/{BOARD}", headers=H("reader"))).json()
    assert (info["policy"], info["size"], info["version"]) == ("latest", 4, 6)

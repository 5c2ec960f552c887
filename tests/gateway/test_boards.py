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

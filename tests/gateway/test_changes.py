"""GET /changes over HTTP (docs/api.md §9): snapshot pages, cursors, 410, 422."""

from __future__ import annotations

import httpx
import pytest

from gateway.app import create_app
from tests.gateway.conftest import BOARD, H, Harness, open_engine, settings

pytestmark = pytest.mark.anyio

PLAYERS = 2_500


def _event(i: int, player: int, value: int) -> dict:
    return {"event_id": f"e-{i}", "board_id": BOARD, "player_id": f"p-{player}", "value": value,
            "achieved_at": f"2026-11-01T10:{(i // 60) % 60:02d}:{i % 60:02d}Z"}


async def _load(h) -> None:
    r = await h.client.post("/v1/boards", json={"board_id": BOARD, "policy": "best_score"}, headers=H("admin"))
    assert r.status_code == 201, r.text
    events = [_event(i, i, (i * 7919) % 1_000) for i in range(PLAYERS)]  # many ties on value
    r = await h.client.post("/v1/events", json={"events": events}, headers=H("game_server"))
    assert r.status_code == 200, r.text


@pytest.fixture
async def harness():
    """The conftest harness with 5 versions of deltas: since_version=0 answers a snapshot."""
    engine = await open_engine(delta_retention=5)
    app = create_app(settings(), engine)
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        yield Harness(app, engine, client)
    await app.state.gateway.hub.close()
    await engine.close()


async def _changes(h, **params):
    return await h.client.get(f"/v1/boards/{BOARD}/changes", params=params, headers=H("reader"))


async def test_snapshot_pages_follow_cursors_exactly_once_while_writes_arrive(harness):
    await _load(harness)
    board = await harness.board()
    r = await _changes(harness, since_version=0, limit=1_000)
    assert r.status_code == 200, r.text
    first = r.json()
    assert first["kind"] == "snapshot" and first["version"] == board["version"] and len(first["entries"]) == 1_000
    entries, cursor, n = list(first["entries"]), first["next_cursor"], PLAYERS
    while cursor:
        # an existing player jumps to the top and a new one arrives between pages
        moved = [_event(n, n, 5_000), _event(n + 1, len(entries) - 1, 10_000)]
        n += 2
        w = await harness.client.post("/v1/events", json={"events": moved}, headers=H("game_server"))
        assert w.status_code == 200, w.text
        page = (await _changes(harness, since_version=0, limit=1_000, cursor=cursor)).json()
        assert page["kind"] == "snapshot" and page["version"] == first["version"]
        entries += page["entries"]
        cursor = page["next_cursor"]
    assert [e["rank"] for e in entries] == list(range(1, PLAYERS + 1))
    assert len({e["player_id"] for e in entries}) == PLAYERS
    values = [e["value"] for e in entries]
    assert values == sorted(values, reverse=True) and max(values) < 1_000  # none of the later writes
    assert (await harness.board())["version"] > first["version"]


async def test_default_limit_is_the_whole_board_up_to_10000(harness):
    await _load(harness)
    body = (await _changes(harness, since_version=0)).json()
    assert len(body["entries"]) == PLAYERS and body["next_cursor"] is None
    recent = (await _changes(harness, since_version=body["version"] - 1)).json()
    assert recent["kind"] == "deltas" and "next_cursor" not in recent


async def test_cursor_of_a_snapshot_version_that_is_gone_is_410(harness):
    await _load(harness)
    first = (await _changes(harness, since_version=0, limit=100)).json()
    harness.engine.router.views.clear()  # the view cache let it go (TTL, row budget)
    w = await harness.client.post("/v1/events", json={"events": [_event(PLAYERS, 1, 9_999)]},
                                  headers=H("game_server"))
    assert w.status_code == 200
    r = await _changes(harness, since_version=0, limit=100, cursor=first["next_cursor"])
    assert r.status_code == 410, r.text
    assert r.json()["error"]["code"] == "VIEW_EXPIRED" and r.json()["error"]["field"] == "cursor"


@pytest.mark.parametrize("params,field", [
    ({"since_version": 0, "limit": 0}, "limit"),
    ({"since_version": 0, "limit": 10_001}, "limit"),
    ({"since_version": 0, "limit": "ten"}, "limit"),
    ({"since_version": 0, "cursor": "not-a-cursor"}, "cursor"),
    ({"limit": 10}, "since_version"),
])
async def test_bad_paging_input_is_422(seeded, params, field):
    r = await _changes(seeded, **params)
    assert r.status_code == 422, r.text
    err = r.json()["error"]
    assert err["code"] == "VALIDATION_FAILED" and err["field"] == field

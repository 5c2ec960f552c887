"""``GET /v1/players/{id}/data`` (docs/api.md §17, access): everything held
about a player, board by board (row, history, held events, awards, and where
they joined and their cohort), at 1 and 3 partitions, through one gateway and
two workers; 404 when nothing is held; admin only."""

from __future__ import annotations

import pytest

from tests.gateway.conftest import H
from tests.gateway.test_competitions import LEAGUE, SHARDS, _create, _get, _score, _season

pytestmark = pytest.mark.anyio

HELD = "arena-clash:held:S1:global"


@SHARDS
async def test_a_players_data_covers_every_board_that_holds_something(harness, shards):
    c = harness.client
    await _season(c, shards)  # the league: p-ava joined and scored 50, p-ben only joined
    for state in ("FROZEN", "FINALIZED"):
        assert (await c.post(f"/v1/boards/{LEAGUE}/state", json={"state": state}, headers=H("admin"))).status_code == 200
    await _create(c, HELD, shards=shards, review_above=100)
    assert await _score(c, HELD, "p-ava", 500) == "HELD_FOR_REVIEW"
    assert await _score(c, HELD, "p-ava", 40, minute=1) == "APPLIED_FIRST_SCORE"
    await _create(c, "arena-clash:other:S1:global", shards=shards)
    assert await _score(c, "arena-clash:other:S1:global", "p-zed", 7) == "APPLIED_FIRST_SCORE"

    data = await _get(c, "/v1/players/p-ava/data", role="admin")
    assert data["player_id"] == "p-ava" and [b["board_id"] for b in data["boards"]] == sorted([HELD, LEAGUE])
    held, league = (next(b for b in data["boards"] if b["board_id"] == bid) for bid in (HELD, LEAGUE))
    assert held["row"] == await _get(c, f"/v1/boards/{HELD}/players/p-ava")
    assert [h["event_id"] for h in held["held"]] == [f"{HELD}/p-ava/500"] and held["awards"] == []
    assert [h["event_id"] for h in held["history"]] == [e["event_id"] for e in (await _get(
        c, f"/v1/boards/{HELD}/players/p-ava/history", role="moderator"))["events"]]
    assert league["row"]["value"] == 50 and league["joined"] == 0 and league["cohort"] == "1-1"
    assert [(a["award_id"], a["rank"], a["cohort"]) for a in league["awards"]] == [(f"{LEAGUE}/p-ava", 1, "1-1")]
    assert "joined" not in held and "cohort" not in held

    ben = await _get(c, "/v1/players/p-ben/data", role="admin")  # joined, never scored: no row, but held about
    assert [(b["board_id"], b["row"], b["history"], b["joined"], b["cohort"]) for b in ben["boards"]] == [
        (LEAGUE, None, [], 1, "1-1")]

    nobody = await _get(c, "/v1/players/p-nobody/data", "admin", 404)
    assert nobody["error"]["code"] == "PLAYER_NOT_FOUND"
    for role in ("reader", "game_server", "moderator"):
        assert (await c.get("/v1/players/p-ava/data", headers=H(role))).status_code == 403, role
    assert (await c.get("/v1/players/bad%01id/data", headers=H("admin"))).status_code == 422

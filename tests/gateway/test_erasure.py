"""``DELETE /v1/players/{id}`` and ``GET /v1/erasures/{id}`` (docs/api.md §17) at 1 and 3 partitions, through
one gateway and two workers: 202 with the boards, then every read excludes the player (rows, ranks closing up,
versions, the ERASED delta, history, quarantine, cohorts, awards, the player's data), a redelivery stays a
duplicate, the erasure becomes complete; 404s; admin only."""

from __future__ import annotations

import asyncio

import pytest

from tests.gateway.conftest import H
from tests.gateway.test_competitions import LEAGUE, SHARDS, _create, _get, _score, _season

pytestmark = pytest.mark.anyio

HELD = "arena-clash:held:S1:global"


async def _complete(c, erasure_id: str) -> dict:
    for _ in range(400):
        got = await _get(c, f"/v1/erasures/{erasure_id}", role="admin")
        if got["status"] == "complete":
            return got
        await asyncio.sleep(0.05)
    raise AssertionError(got)


@SHARDS
async def test_an_erased_player_is_gone_from_every_read(harness, shards):
    c = harness.client
    harness.engine.erasure_job.delay_s = 3.0  # the ERASED delta is served until the erasure is complete
    await _season(c, shards)  # league: cohort 1-1 = ava, ben, chloe, dev; ranked ava 50, chloe 30, dev 30
    for state in ("FROZEN", "FINALIZED"):
        assert (await c.post(f"/v1/boards/{LEAGUE}/state", json={"state": state}, headers=H("admin"))).status_code == 200
    for _ in range(200):  # the awards are logged just after FINALIZED
        if (await c.get(f"/v1/boards/{LEAGUE}/awards", headers=H("admin"))).status_code == 200:
            break
        await asyncio.sleep(0.05)
    await _create(c, HELD, shards=shards, review_above=100)
    assert await _score(c, HELD, "p-ava", 500) == "HELD_FOR_REVIEW"
    assert await _score(c, HELD, "p-ava", 40, minute=1) == "APPLIED_FIRST_SCORE"
    assert await _score(c, HELD, "p-zed", 30, minute=1) == "APPLIED_FIRST_SCORE"
    before = {b: await _get(c, f"/v1/boards/{b}") for b in (HELD, LEAGUE)}

    r = await c.delete("/v1/players/p-ava", headers=H("admin"))
    assert r.status_code == 202, r.text
    got = r.json()
    assert got["player_id"] == "p-ava" and sorted(got["boards"]) == sorted([HELD, LEAGUE])
    for b in (HELD, LEAGUE):
        info = await _get(c, f"/v1/boards/{b}")
        assert info["version"] == before[b]["version"] + 1
        assert (await _get(c, f"/v1/boards/{b}/players/p-ava", status=404))["error"]["code"] == "PLAYER_NOT_FOUND"
        top = await _get(c, f"/v1/boards/{b}/top")
        assert "p-ava" not in [e["player_id"] for e in top["entries"]]
        assert [e["rank"] for e in top["entries"]] == list(range(1, len(top["entries"]) + 1))
        ch = await _get(c, f"/v1/boards/{b}/changes?since_version={info['version'] - 1}")
        assert ch["deltas"][-1]["changes"] == [{"player_id": "p-ava", "status": "ERASED"}]
        old = await _get(c, f"/v1/boards/{b}/changes?since_version={before[b]['version'] - 1}")
        assert old["kind"] == "snapshot"
    assert (await _get(c, f"/v1/boards/{HELD}/quarantine", role="moderator"))["events"] == []
    assert (await _get(c, f"/v1/boards/{HELD}/players/p-ava/history", role="moderator"))["events"] == []
    assert [e["player_id"] for e in (await _get(c, f"/v1/boards/{HELD}/top"))["entries"]] == ["p-zed"]
    cohort = await _get(c, f"/v1/boards/{LEAGUE}/cohorts/1-1")
    assert "p-ava" not in [e["player_id"] for e in cohort["entries"]]
    awards = await _get(c, f"/v1/boards/{LEAGUE}/awards", role="admin")
    assert "p-ava" not in [a["player_id"] for a in awards["awards"]]
    assert (await _get(c, "/v1/players/p-ava/data", "admin", 404))["error"]["code"] == "PLAYER_NOT_FOUND"

    ev = {"event_id": f"{HELD}/p-ava/40", "board_id": HELD, "player_id": "p-ava", "value": 40,
          "achieved_at": "2026-11-01T10:01:00Z"}
    r = await c.post("/v1/events", json={"events": [ev, ev | {"event_id": f"{HELD}/p-ava/500", "value": 7}]},
                     headers=H("game_server"))
    assert [x["outcome"] for x in r.json()["results"]] == ["DUPLICATE_IGNORED", "REJECTED_EVENT_ID_CONFLICT"]
    assert (await _get(c, "/v1/players/p-ava/data", "admin", 404))["error"]["code"] == "PLAYER_NOT_FOUND"

    done = await _complete(c, got["erasure_id"])
    assert done["erasure_id"] == got["erasure_id"] and done["requested_at"] <= done["completed_at"]
    again = await c.delete("/v1/players/p-ava", headers=H("admin"))
    assert again.status_code == 404 and again.json()["error"]["code"] == "PLAYER_NOT_FOUND"
    assert (await _get(c, "/v1/erasures/nope", "admin", 404))["error"]["code"] == "ERASURE_NOT_FOUND"
    for role in ("reader", "game_server", "moderator"):
        assert (await c.delete("/v1/players/p-ben", headers=H(role))).status_code == 403, role
        assert (await c.get(f"/v1/erasures/{got['erasure_id']}", headers=H(role))).status_code == 403, role
    # a later event with the same id starts a new player
    assert await _score(c, HELD, "p-ava", 3, minute=9) == "APPLIED_FIRST_SCORE"
    assert (await _get(c, f"/v1/boards/{HELD}/players/p-ava"))["value"] == 3

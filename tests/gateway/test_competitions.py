"""Leagues and prizes over HTTP (docs/api.md §16, "Leagues" and "Prizes"):
board settings and their 422s, cohort reads by player and by id (local ranks,
zones, members, ties), their 404s, awards after FINALIZED paged by cursor and
admin-only, and the tiers next-season carries. Every test runs at 1 and 3
partitions, through one gateway and through two workers on an engine host;
and the typed Python client (gateway.client) over a served app."""

from __future__ import annotations

import json

import pytest

from engine.core.errors import CohortNotFound, PlayerNotFound
from gateway.client import FlowRankClient
from tests.gateway.conftest import ROLE_KEYS, H, thread_server

pytestmark = pytest.mark.anyio

LEAGUE = "arena-clash:league:S7:global"
NEXT = "arena-clash:league:S8:global"
PLAIN = "arena-clash:cup:W49:global"
SETTINGS = {"cohort_size": 4, "tiers": 2, "promote": 1, "demote": 1}
GOLD, SILVER = {"coins": 1000, "badge": "gold"}, {"coins": 100, "note": "zweiter Platz ✓"}
PRIZES = [{"ranks": [2, 3], "reward": SILVER}, {"ranks": [1, 1], "reward": GOLD}]
SHARDS = pytest.mark.parametrize("shards", [1, 3])


async def _create(c, board_id: str = LEAGUE, shards: int = 3, **extra) -> dict:
    r = await c.post("/v1/boards", json={"board_id": board_id, "policy": "best_score", "shards": shards, **extra},
                     headers=H("admin"))
    assert r.status_code == 201, r.text
    return r.json()


async def _score(c, board_id: str, player: str, value: int, minute: int = 0) -> str:
    """One event per request, so players enter (and are placed) in the order of the calls."""
    ev = {"event_id": f"{board_id}/{player}/{value}", "board_id": board_id, "player_id": player, "value": value,
          "achieved_at": f"2026-11-01T10:{minute:02d}:00Z"}
    r = await c.post("/v1/events", json={"events": [ev]}, headers=H("game_server"))
    assert r.status_code == 200, r.text
    return r.json()["results"][0]["outcome"]


async def _join(c, board_id: str, player: str) -> None:
    r = await c.post(f"/v1/boards/{board_id}/players/{player}/join", headers=H("game_server"))
    assert r.status_code == 201, r.text


async def _get(c, path: str, role: str = "reader", status: int = 200) -> dict:
    r = await c.get(path, headers=H(role))
    assert r.status_code == status, r.text
    return r.json()


async def _season(c, shards: int) -> None:
    """S7: p-ava and p-ben join (p-ben never scores), p-chloe, p-dev and p-eli enter by their first event.
    Cohort 1-1: ava, ben, chloe, dev (ranked: ava 50, chloe 30, dev 30 later); 1-2: eli."""
    await _create(c, shards=shards, league=SETTINGS, prizes=PRIZES)
    await _join(c, LEAGUE, "p-ava")
    await _join(c, LEAGUE, "p-ben")
    assert await _score(c, LEAGUE, "p-chloe", 30) == "APPLIED_FIRST_SCORE"
    assert await _score(c, LEAGUE, "p-dev", 30, minute=5) == "APPLIED_FIRST_SCORE"
    assert await _score(c, LEAGUE, "p-eli", 10) == "APPLIED_FIRST_SCORE"
    assert await _score(c, LEAGUE, "p-ava", 50) == "APPLIED_FIRST_SCORE"


def _ranked(view: dict) -> list[tuple]:
    return [(e["rank"], e["player_id"], e["value"], e["zone"]) for e in view["entries"]]


@SHARDS
async def test_a_board_shows_its_league_and_prizes_and_next_season_copies_them(harness, shards):
    c = harness.client
    body = await _create(c, shards=shards, league={"cohort_size": 50}, prizes=PRIZES)
    league = {"cohort_size": 50, "tiers": 1, "promote": 0, "demote": 0}
    assert body["league"] == league
    assert body["prizes"] == PRIZES  # in the order given, rewards as objects
    got = await _get(c, f"/v1/boards/{LEAGUE}")
    assert got["league"] == league and got["prizes"] == PRIZES
    r = await c.post(f"/v1/boards/{LEAGUE}/next-season", json={"season": "S8"}, headers=H("admin"))
    assert r.status_code == 201 and r.json()["league"] == league and r.json()["prizes"] == PRIZES
    # a league without prizes, prizes without a league, and neither
    only_league = await _create(c, "g:m:s:a", league={"cohort_size": 2, "tiers": 20, "promote": 1, "demote": 1})
    assert "prizes" not in only_league and only_league["league"]["tiers"] == 20
    only_prizes = await _create(c, "g:m:s:b", prizes=[{"ranks": [1, 10], "reward": {}}])
    assert "league" not in only_prizes and only_prizes["prizes"] == [{"ranks": [1, 10], "reward": {}}]
    neither = await _create(c, "g:m:s:c", prizes=[])
    assert "league" not in neither and "prizes" not in neither
    listed = {b["board_id"]: b for b in (await _get(c, "/v1/boards"))["boards"]}
    assert listed["g:m:s:b"]["prizes"] == [{"ranks": [1, 10], "reward": {}}] and "league" not in listed["g:m:s:c"]


@SHARDS
async def test_cohorts_by_player_and_by_id_rank_locally_with_zones(harness, shards):
    c = harness.client
    await _season(c, shards)
    first = await _get(c, f"/v1/boards/{LEAGUE}/players/p-ben/cohort")  # entered by joining, never ranked
    assert {k: first[k] for k in ("tier", "cohort", "members")} == {"tier": 1, "cohort": "1-1", "members": 4}
    assert first["version"] == 4
    # tier 1 of 2: local rank 1 promotes, nobody is demoted from the lowest tier
    assert _ranked(first) == [(1, "p-ava", 50, "promote"), (2, "p-chloe", 30, None), (3, "p-dev", 30, None)]
    assert [set(e) for e in first["entries"]] == [{"rank", "player_id", "value", "achieved_at", "zone"}] * 3
    assert first["entries"][1]["achieved_at"] == "2026-11-01T10:00:00.000Z"
    assert await _get(c, f"/v1/boards/{LEAGUE}/cohorts/1-1") == first
    assert await _get(c, f"/v1/boards/{LEAGUE}/players/p-dev/cohort") == first
    second = await _get(c, f"/v1/boards/{LEAGUE}/cohorts/1-2")
    assert (second["cohort"], second["members"], _ranked(second)) == ("1-2", 1, [(1, "p-eli", 10, "promote")])
    # ?ties=competition: tied_rank local to the cohort (chloe and dev share 30)
    tied = await _get(c, f"/v1/boards/{LEAGUE}/players/p-ava/cohort?ties=competition")
    assert [(e["rank"], e["tied_rank"]) for e in tied["entries"]] == [(1, 1), (2, 2), (3, 2)]
    # a token for the board reads cohorts too (a reader's GET)
    token = (await c.post("/v1/tokens", json={"board_ids": [LEAGUE]}, headers=H("reader"))).json()["token"]
    r = await c.get(f"/v1/boards/{LEAGUE}/cohorts/1-2?access_token={token}")
    assert r.status_code == 200 and r.json() == second


@SHARDS
async def test_cohort_404s(harness, shards):
    c = harness.client
    await _season(c, shards)
    await _create(c, PLAIN, shards=shards)
    await _score(c, PLAIN, "p-ava", 5)

    async def code(path: str) -> str:
        return (await _get(c, path, status=404))["error"]["code"]

    assert await code(f"/v1/boards/{LEAGUE}/players/p-nobody/cohort") == "PLAYER_NOT_FOUND"
    for cohort in ("1-3", "2-1", "21-1", "x", "1-0", "0-1", "01-1", "1-01", "1-1-1", "-1", "1-", " 1-1", "1%2D1%20",
                   "%C3%A9", "1" * 300):
        assert await code(f"/v1/boards/{LEAGUE}/cohorts/{cohort}") == "COHORT_NOT_FOUND", cohort
    assert await code(f"/v1/boards/{PLAIN}/players/p-ava/cohort") == "COHORT_NOT_FOUND"  # not a league
    assert await code(f"/v1/boards/{PLAIN}/cohorts/1-1") == "COHORT_NOT_FOUND"
    assert await code("/v1/boards/no:such:board:x/cohorts/1-1") == "BOARD_NOT_FOUND"
    assert await code("/v1/boards/no:such:board:x/players/p-ava/cohort") == "BOARD_NOT_FOUND"
    r = await c.get(f"/v1/boards/{LEAGUE}/cohorts/1-1?ties=dense", headers=H("reader"))
    assert r.status_code == 422 and r.json()["error"]["field"] == "ties"
    assert (await c.get(f"/v1/boards/{LEAGUE}/cohorts/1-1")).status_code == 401


@pytest.mark.parametrize("change, field", [
    ({"league": {"cohort_size": 1}}, "league.cohort_size"),
    ({"league": {"cohort_size": 1001}}, "league.cohort_size"),
    ({"league": {"cohort_size": "4"}}, "league.cohort_size"),
    ({"league": {"cohort_size": 4, "tiers": 21}}, "league.tiers"),
    ({"league": {"cohort_size": 4, "tiers": 0}}, "league.tiers"),
    ({"league": {"cohort_size": 4, "promote": 3, "demote": 2}}, "league.promote"),
    ({"league": {"cohort_size": 4, "promote": -1}}, "league.promote"),
    ({"league": {"tiers": 2}}, "league.cohort_size"),
    ({"league": {"cohort_size": 4, "cohorts": 2}}, "league.cohorts"),
    ({"league": 4}, "league"),
    ({"prizes": [{"ranks": [1, 3], "reward": {}}, {"ranks": [3, 5], "reward": {}}]}, "prizes[1].ranks"),
    ({"prizes": [{"ranks": [5, 9], "reward": {}}, {"ranks": [1, 5], "reward": {}}]}, "prizes[0].ranks"),
    ({"prizes": [{"ranks": [3, 1], "reward": {}}]}, "prizes[0].ranks"),
    ({"prizes": [{"ranks": [0, 1], "reward": {}}]}, "prizes[0].ranks[0]"),
    ({"prizes": [{"ranks": [1], "reward": {}}]}, "prizes[0].ranks[1]"),
    ({"prizes": [{"ranks": [1, 2, 3], "reward": {}}]}, "prizes[0].ranks"),
    ({"prizes": [{"ranks": [1, 1]}]}, "prizes[0].reward"),
    ({"prizes": [{"ranks": [1, 1], "reward": "gold"}]}, "prizes[0].reward"),
    ({"prizes": [{"ranks": [1, 1], "reward": {}}, {"ranks": [2, 2], "reward": {"x": "y" * 1017}}]},
     "prizes[1].reward"),
    ({"prizes": [{"ranks": [1, 1], "reward": {"n": 2**64}}]}, "prizes[0].reward"),
    ({"prizes": [{"ranks": [1, 1], "reward": {"n": [float("nan")]}}]}, "prizes[0].reward"),
    ({"prizes": [{"ranks": [1, 1], "reward": {"s": "\ud800"}}]}, "prizes[0].reward"),
    ({"prizes": [{"ranks": [1, 1], "reward": {}, "tier": 2}]}, "prizes[0].tier"),
    ({"prizes": [{"ranks": [i, i], "reward": {}} for i in range(1, 102)]}, "prizes"),
])
async def test_bad_league_or_prizes_are_422_naming_the_field_and_create_nothing(harness, change, field):
    c = harness.client
    body = json.dumps({"board_id": LEAGUE, "policy": "best_score", **change})  # NaN and "\ud800" as JSON can say them
    r = await c.post("/v1/boards", content=body, headers={**H("admin"), "content-type": "application/json"})
    assert r.status_code == 422, r.text
    assert r.json()["error"]["code"] == "VALIDATION_FAILED" and r.json()["error"]["field"] == field, r.text
    assert (await c.get(f"/v1/boards/{LEAGUE}", headers=H("reader"))).status_code == 404


async def test_a_reward_of_exactly_1024_bytes_is_kept_as_given(harness):
    reward = {"x": "y" * 1016}  # {"x":"…"}: 8 bytes around the string
    body = await _create(harness.client, prizes=[{"ranks": [1, 1], "reward": reward}])
    assert body["prizes"][0]["reward"] == reward


async def _awards(c, board_id: str, limit: int) -> list[dict]:
    """Every award, page by page; every page but the last is full."""
    got, cursor, pages = [], None, []
    while True:
        q = f"?limit={limit}" + (f"&cursor={cursor}" if cursor else "")
        page = await _get(c, f"/v1/boards/{board_id}/awards{q}", role="admin")
        pages.append(len(page["awards"]))
        got += page["awards"]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert all(n == limit for n in pages[:-1]) and 0 < pages[-1] <= limit, pages
    return got


@SHARDS
async def test_awards_after_finalized_paged_in_award_order_admin_only(harness, shards):
    c = harness.client
    await _season(c, shards)
    assert (await _get(c, f"/v1/boards/{LEAGUE}/awards", role="admin")) == {"awards": [], "next_cursor": None}
    for state in ("FROZEN", "FINALIZED"):
        r = await c.post(f"/v1/boards/{LEAGUE}/state", json={"state": state}, headers=H("admin"))
        assert r.status_code == 200, r.text
    # by tier, cohort number, local rank: 1-1 (ava 1, chloe 2, dev 3), then 1-2 (eli 1)
    want = [("p-ava", 1, "1-1", GOLD), ("p-chloe", 2, "1-1", SILVER), ("p-dev", 3, "1-1", SILVER),
            ("p-eli", 1, "1-2", GOLD)]
    for limit in (1, 2, 3, 4, 100):
        got = await _awards(c, LEAGUE, limit)
        assert [(a["player_id"], a["rank"], a["cohort"], a["reward"]) for a in got] == want, limit
    first = got[0]
    assert first["award_id"] == f"{LEAGUE}/p-ava" and first["delivery"] == "pending" and first["attempts"] == 0
    assert list(first) == ["award_id", "player_id", "rank", "cohort", "reward", "delivery", "attempts"]
    # a cursor past the end is an empty last page
    page = await _get(c, f"/v1/boards/{LEAGUE}/awards?cursor=0.9", role="admin")
    assert page == {"awards": [], "next_cursor": None}
    # a corrected ranking after FINALIZED does not change the awards
    r = await c.post(f"/v1/boards/{LEAGUE}/invalidations", json={"event_id": f"{LEAGUE}/p-ava/50"},
                     headers=H("moderator"))
    assert r.status_code == 200, r.text
    assert [a["player_id"] for a in await _awards(c, LEAGUE, 100)] == [w[0] for w in want]
    # admin only
    for role in ("reader", "game_server", "moderator"):
        r = await c.get(f"/v1/boards/{LEAGUE}/awards", headers=H(role))
        assert r.status_code == 403 and r.json()["error"]["code"] == "FORBIDDEN", role
    token = (await c.post("/v1/tokens", json={"board_ids": [LEAGUE]}, headers=H("admin"))).json()["token"]
    assert (await c.get(f"/v1/boards/{LEAGUE}/awards?access_token={token}")).status_code == 403
    for q, field in (("limit=0", "limit"), ("limit=1001", "limit"), ("cursor=3", "cursor"), ("cursor=-1.2", "cursor")):
        r = await c.get(f"/v1/boards/{LEAGUE}/awards?{q}", headers=H("admin"))
        assert r.status_code == 422 and r.json()["error"]["field"] == field, q
    assert (await _get(c, "/v1/boards/no:such:board:x/awards", "admin", 404))["error"]["code"] == "BOARD_NOT_FOUND"


@SHARDS
async def test_awards_of_a_board_without_a_league_follow_the_ranking(harness, shards):
    c = harness.client
    await _create(c, PLAIN, shards=shards, prizes=PRIZES)
    for i, p in enumerate(("p-a", "p-b", "p-c", "p-d", "p-e")):
        await _score(c, PLAIN, p, 100 - i)
    for state in ("FROZEN", "FINALIZED"):
        await c.post(f"/v1/boards/{PLAIN}/state", json={"state": state}, headers=H("admin"))
    got = await _awards(c, PLAIN, 2)
    assert [(a["player_id"], a["rank"], a["cohort"], a["reward"]) for a in got] == [
        ("p-a", 1, None, GOLD), ("p-b", 2, None, SILVER), ("p-c", 3, None, SILVER)]
    # a board without prizes has no awards
    await _create(c, "g:m:s:none", shards=shards)
    assert await _get(c, "/v1/boards/g:m:s:none/awards", role="admin") == {"awards": [], "next_cursor": None}


@SHARDS
async def test_next_season_carries_tiers_and_zones_follow_them(harness, shards):
    c = harness.client
    await _season(c, shards)
    r = await c.post(f"/v1/boards/{LEAGUE}/next-season", json={"season": "S8"}, headers=H("admin"))
    assert r.status_code == 201, r.text
    # ava and eli led their tier-1 cohorts (promote zone): tier 2 now; chloe stays in tier 1
    for p, value in (("p-eli", 70), ("p-chloe", 60), ("p-ava", 20)):
        await _score(c, NEXT, p, value)
    top = await _get(c, f"/v1/boards/{NEXT}/players/p-ava/cohort")
    assert (top["tier"], top["cohort"], top["members"]) == (2, "2-1", 2)
    # tier 2 is the top of 2: nobody promotes, the last ranked member is demoted
    assert _ranked(top) == [(1, "p-eli", 70, None), (2, "p-ava", 20, "demote")]
    low = await _get(c, f"/v1/boards/{NEXT}/players/p-chloe/cohort")
    assert (low["tier"], low["cohort"], _ranked(low)) == (1, "1-1", [(1, "p-chloe", 60, "promote")])
    assert await _get(c, f"/v1/boards/{NEXT}/cohorts/2-1") == top
    # a player new to the league starts in tier 1
    await _join(c, NEXT, "p-zed")
    assert (await _get(c, f"/v1/boards/{NEXT}/players/p-zed/cohort"))["cohort"] == "1-1"


def test_the_python_client_reads_cohorts_and_pages_through_awards():
    """gateway.client over a served app: cohort by player and by id, typed 404s, every award by iter_awards."""
    with thread_server(n_shards=3) as url, FlowRankClient(url, ROLE_KEYS["admin"]) as client:
        client.create_board(LEAGUE, "best_score", league={"cohort_size": 2}, prizes=[{"ranks": [1, 2], "reward": {}}])
        client.submit([{"event_id": f"e{i}", "board_id": LEAGUE, "player_id": f"p{i}", "value": i,
                        "achieved_at": "2026-11-01T10:00:00Z"} for i in range(5)])
        mine = client.cohort(LEAGUE, player_id="p0", ties=True)
        assert mine == client.cohort(LEAGUE, cohort=mine["cohort"], ties=True) and mine["members"] == 2
        assert "tied_rank" in mine["entries"][0]
        with pytest.raises(CohortNotFound):
            client.cohort(LEAGUE, cohort="4-1")
        with pytest.raises(PlayerNotFound):
            client.cohort(LEAGUE, player_id="p-nobody")
        with pytest.raises(ValueError):
            client.cohort(LEAGUE)
        for state in ("FROZEN", "FINALIZED"):
            client.set_state(LEAGUE, state)
        got = list(client.iter_awards(LEAGUE, page_size=2))
        assert len(got) == 5 and [a["cohort"] for a in got] == ["1-1", "1-1", "1-2", "1-2", "1-3"]
        assert got == client.awards(LEAGUE, limit=1000)["awards"]


@SHARDS
async def test_cohorts_list_by_tier_then_number_paged_and_filtered(harness, shards):
    """GET …/cohorts (docs/api.md §18): every cohort once, by tier then number, `members` as the cohort read
    counts them; pages by cursor, `?tier=` filters; after next-season carried tiers, tier 2 comes after 1."""
    c = harness.client
    await _season(c, shards)
    got = await _get(c, f"/v1/boards/{LEAGUE}/cohorts")
    assert got["board_id"] == LEAGUE and got["next_cursor"] is None
    assert got["version"] == (await _get(c, f"/v1/boards/{LEAGUE}"))["version"]
    assert got["cohorts"] == [{"cohort": "1-1", "tier": 1, "members": 4}, {"cohort": "1-2", "tier": 1, "members": 1}]
    for item in got["cohorts"]:
        assert (await _get(c, f"/v1/boards/{LEAGUE}/cohorts/{item['cohort']}"))["members"] == item["members"]
    r = await c.post(f"/v1/boards/{LEAGUE}/next-season", json={"season": "S8"}, headers=H("admin"))
    assert r.status_code == 201, r.text
    for p, value in (("p-eli", 70), ("p-chloe", 60), ("p-ava", 20), ("p-dev", 5)):
        await _score(c, NEXT, p, value)
    await _join(c, NEXT, "p-new")
    pages, cursor = [], None
    while True:
        page = await _get(c, f"/v1/boards/{NEXT}/cohorts?limit=1" + (f"&cursor={cursor}" if cursor else ""))
        pages.append(page["cohorts"])
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert [len(p) for p in pages] == [1, 1]
    assert [p[0]["cohort"] for p in pages] == ["1-1", "2-1"]
    assert (await _get(c, f"/v1/boards/{NEXT}/cohorts?tier=2"))["cohorts"] == [
        {"cohort": "2-1", "tier": 2, "members": 2}]
    assert (await _get(c, f"/v1/boards/{NEXT}/cohorts?tier=3"))["cohorts"] == []


@SHARDS
async def test_player_tier_entered_carried_or_1(harness, shards):
    """GET …/players/{id}/tier (docs/api.md §18): the cohort's tier once entered; before, the tier
    next-season carried (promote zone up one), else 1."""
    c = harness.client
    await _season(c, shards)
    assert await _get(c, f"/v1/boards/{LEAGUE}/players/p-ava/tier") == {
        "board_id": LEAGUE, "player_id": "p-ava", "tier": 1, "entered": True}
    r = await c.post(f"/v1/boards/{LEAGUE}/next-season", json={"season": "S8"}, headers=H("admin"))
    assert r.status_code == 201, r.text
    tier = f"/v1/boards/{NEXT}/players/{{}}/tier"
    assert await _get(c, tier.format("p-ava")) == {"board_id": NEXT, "player_id": "p-ava", "tier": 2,
                                                   "entered": False}
    assert (await _get(c, tier.format("p-chloe")))["tier"] == 1  # kept her tier: not in a zone
    assert await _get(c, tier.format("p-nobody")) == {"board_id": NEXT, "player_id": "p-nobody", "tier": 1,
                                                      "entered": False}
    await _score(c, NEXT, "p-ava", 20)
    assert await _get(c, tier.format("p-ava")) == {"board_id": NEXT, "player_id": "p-ava", "tier": 2,
                                                   "entered": True}


async def test_cohorts_and_tier_errors(harness):
    c = harness.client
    await _create(c, PLAIN, shards=1)
    for path in (f"/v1/boards/{PLAIN}/cohorts", f"/v1/boards/{PLAIN}/players/p-ava/tier"):
        err = (await _get(c, path, status=404))["error"]
        assert err["code"] == "COHORT_NOT_FOUND" and "not a league" in err["message"]
    for path in ("/v1/boards/g:m:s:none/cohorts", "/v1/boards/g:m:s:none/players/p-ava/tier"):
        assert (await _get(c, path, status=404))["error"]["code"] == "BOARD_NOT_FOUND"
    await _create(c, shards=1, league=SETTINGS)
    for bad in ("tier=0", "tier=21", "limit=0", "limit=1001", "cursor=x"):
        err = (await _get(c, f"/v1/boards/{LEAGUE}/cohorts?{bad}", status=422))["error"]
        assert err["code"] == "VALIDATION_FAILED" and err["field"] == bad.split("=")[0], bad

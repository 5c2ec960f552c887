"""Recurring competitions over HTTP (docs/api.md §18): a weekly league series with prizes, entry rules and
subscores over three windows, on a fake wall clock (the engine's seam, as tests/engine/test_series.py uses),
at 1 and 3 partitions: the series is created (no 422), its instances copy the settings, bulk joins of the
series enter its current instance at the carried tier, cohort reads and the tier route on the series id
answer from the current instance and name it, and each instance's awards are read from the instance."""

from __future__ import annotations

import asyncio
from datetime import datetime, timezone

import httpx
import pytest

from engine.core.timefmt import format_timestamp
from engine.runtime.local import LocalService
from gateway.app import create_app
from tests.gateway.conftest import H, settings

pytestmark = pytest.mark.anyio

SERIES = "arena-clash:league:weekly:global"
W1, W2, W3 = (f"arena-clash:league:weekly.{d}:global" for d in ("20261130", "20261207", "20261214"))


def ms(y, mo, d, h=0) -> int:
    return int(datetime(y, mo, d, h, tzinfo=timezone.utc).timestamp() * 1000)


class FakeClock:
    def __init__(self, now: int):
        self.now = now

    def __call__(self) -> int:
        return self.now


async def _settle(engine: LocalService) -> None:
    await engine.router.close_due()
    control = engine.router.control
    while control._settling:
        await asyncio.gather(*list(control._settling.values()), return_exceptions=True)


async def _get(c, path: str, role: str = "reader") -> dict:
    r = await c.get(path, headers=H(role))
    assert r.status_code == 200, (path, r.text)
    return r.json()


async def _scores(c, clock: FakeClock, scores: dict[str, int], tag: str) -> list[str]:
    at = format_timestamp(clock.now)
    events = [{"event_id": f"{tag}-{p}", "board_id": SERIES, "player_id": p, "value": v, "achieved_at": at,
               "subscores": [v % 7]} for p, v in scores.items()]
    r = await c.post("/v1/events", json={"events": events}, headers=H("game_server"))
    assert r.status_code == 200, r.text
    return [x["outcome"] for x in r.json()["results"]]


@pytest.mark.parametrize("shards", [1, 3])
async def test_a_weekly_league_series_over_three_windows(shards):
    clock = FakeClock(ms(2026, 11, 30, 12))
    engine = await LocalService.open(data_dir=None, n_shards=3, wall_clock=clock)
    app = create_app(settings(), engine)
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as c:
            body = {"board_id": SERIES, "policy": "best_score", "shards": shards, "finalize_after_s": 0,
                    "recurrence": {"every": "week"}, "subscores": ["desc"],
                    "entry": {"join_required": True, "max_players": 100, "max_attempts": 5},
                    "league": {"cohort_size": 3, "tiers": 3, "promote": 1, "demote": 1},
                    "prizes": [{"ranks": [1, 1], "reward": {"gems": 100}}]}
            r = await c.post("/v1/boards", json=body, headers=H("admin"))
            assert r.status_code == 201, r.text
            series = r.json()
            assert series["current"] == W1 and series["league"]["cohort_size"] == 3
            inst = await _get(c, f"/v1/boards/{W1}")
            for key in ("entry", "league", "prizes", "subscores"):
                assert inst[key] == series[key], key
            # window 1: six players, two cohorts of tier 1
            players = ["p1", "p2", "p3", "p4", "p5", "p6"]
            r = await c.post(f"/v1/boards/{SERIES}/joins", json={"player_ids": players}, headers=H("game_server"))
            assert r.status_code == 200 and r.json()["board_id"] == W1, r.text
            assert await _scores(c, clock, {"p1": 50, "p2": 40, "p3": 30, "p4": 60, "p5": 10, "p6": 20}, "w1") == [
                "APPLIED_FIRST_SCORE"] * 6
            cohort = await _get(c, f"/v1/boards/{SERIES}/players/p1/cohort")
            assert (cohort["board_id"], cohort["cohort"], cohort["entries"][0]["zone"]) == (W1, "1-1", "promote")
            assert cohort["entries"][0]["subscores"] == [50 % 7]
            # window 2: the tiers carried at window 1's FROZEN; p1 and p4 promoted
            clock.now = ms(2026, 12, 7, 1)
            await _settle(engine)
            tier = await _get(c, f"/v1/boards/{SERIES}/players/p4/tier")
            assert tier == {"board_id": W2, "player_id": "p4", "tier": 2, "entered": False}
            awards = (await _get(c, f"/v1/boards/{W1}/awards", "admin"))["awards"]
            assert [(a["award_id"], a["cohort"], a["reward"]) for a in awards] == [
                (f"{W1}/p1", "1-1", {"gems": 100}), (f"{W1}/p4", "1-2", {"gems": 100})]
            r = await c.post(f"/v1/boards/{SERIES}/joins", json={"player_ids": ["p1", "p4", "p2"]},
                             headers=H("game_server"))
            assert r.json()["board_id"] == W2
            listed = await _get(c, f"/v1/boards/{SERIES}/cohorts")
            assert listed["board_id"] == W2
            assert [(x["cohort"], x["members"]) for x in listed["cohorts"]] == [("1-1", 1), ("2-1", 2)]
            assert await _scores(c, clock, {"p1": 5, "p4": 9, "p2": 1}, "w2") == ["APPLIED_FIRST_SCORE"] * 3
            top = await _get(c, f"/v1/boards/{SERIES}/cohorts/2-1")
            assert top["board_id"] == W2 and [(e["player_id"], e["zone"]) for e in top["entries"]] == [
                ("p4", "promote"), ("p1", "demote")]
            # window 3: p4 at 3, p1 back at 1, p2 (alone in its cohort, so first) up to 2
            clock.now = ms(2026, 12, 14, 1)
            await _settle(engine)
            got = {p: (await _get(c, f"/v1/boards/{SERIES}/players/{p}/tier"))["tier"] for p in players}
            assert got == {"p1": 1, "p2": 2, "p3": 1, "p4": 3, "p5": 1, "p6": 1}  # p2: alone, so first, in 1-1
            r = await c.post(f"/v1/boards/{SERIES}/players/p4/join", headers=H("game_server"))
            assert r.status_code == 201 and r.json()["board_id"] == W3, r.text
            cohort = await _get(c, f"/v1/boards/{SERIES}/players/p4/cohort")
            assert (cohort["board_id"], cohort["tier"], cohort["cohort"]) == (W3, 3, "3-1")
            awards = (await _get(c, f"/v1/boards/{W2}/awards", "admin"))["awards"]
            assert [a["award_id"] for a in awards] == [f"{W2}/p2", f"{W2}/p4"]
            instances = (await _get(c, f"/v1/boards/{SERIES}/instances"))["instances"]
            assert [(i["board_id"], i["state"]) for i in instances] == [
                (W3, "OPEN"), (W2, "FINALIZED"), (W1, "FINALIZED")]
    finally:
        await app.state.gateway.hub.close()
        await engine.close()

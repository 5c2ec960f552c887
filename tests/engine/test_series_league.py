"""Recurring competitions (docs/api.md §18): a series with a league, prizes, entry rules and subscores.

Pure first: a series' league table holds the tiers its instances carried, and an instance's table places
each entering player at the tier carried for them when they enter (1 if none; a player who skips instances
keeps their last carried tier), against a reference. Then through the service at 1 and 3 partitions, with
a fake wall clock over three weekly windows: every instance copies the settings, the tiers carry at each
FROZEN (promote zone up, demote zone down, the others who entered keep theirs), later joins enter at the
carried tier, what happens after the window moves no tier, each instance awards its prizes at FINALIZED
(readable after ``keep`` archived it), cohort reads on the series answer from the current instance; and a
restart (snapshot + tail, the log alone) gives the same tiers, cohorts and awards."""

from __future__ import annotations

import asyncio
import shutil
from datetime import datetime, timezone

import numpy as np
import pytest

from engine.core import records as R
from engine.core.archive import ArchiveRows, rank_order
from engine.core.errors import AwardsPending
from engine.core.league import LeagueTable, next_tiers
from engine.core.model import (BoardSpec, BoardState, EntrySpec, Invalidation, LeagueSpec, Outcome, Policy, Prize,
                               QuarantineDecision, ScoreEvent)
from engine.core.players import ids_of
from engine.core.windows import Recurrence
from engine.router.control import check_competition
from engine.runtime.local import LocalService

SPEC = LeagueSpec(cohort_size=3, tiers=3, promote=1, demote=1)


def ms(y, mo, d, h=0) -> int:
    return int(datetime(y, mo, d, h, tzinfo=timezone.utc).timestamp() * 1000)


# ------------------------------------------------------------------ pure

def _carry(series: LeagueTable, instance: LeagueTable, scores: dict[str, int]) -> dict[str, int]:
    """The instance freezes with these best scores (every entered player ranked): its tier moves, folded into
    the series as a Y record is; returns them."""
    ids = sorted(scores, key=lambda p: (-scores[p], p))
    rows = ArchiveRows.of(ids, [scores[p] for p in ids], [0] * len(ids), [0] * len(ids), [1] * len(ids),
                          [True] * len(ids))
    order = rank_order(Policy.BEST_SCORE, rows)
    moves = next_tiers(instance, rows.id_bytes, rows.id_offsets, order)
    got = dict(zip(ids_of(moves.id_bytes, moves.id_offsets), moves.tiers.tolist()))
    series.carry(list(got), np.array(list(got.values()), np.int64))
    return got


def _ref_carry(carried: dict[str, int], where: dict[str, int], scores: dict[str, int],
               cohorts: dict[str, int]) -> dict[str, int]:
    """The §16 next-season rule per cohort (``cohorts``: player -> cohort key), into ``carried``."""
    out = dict(carried)
    by: dict[int, list[str]] = {}
    for p in sorted(scores, key=lambda p: (-scores[p], p)):
        by.setdefault(cohorts[p], []).append(p)
    for members in by.values():
        k = len(members)
        for i, p in enumerate(members, 1):
            t = where[p]
            if t < SPEC.tiers and i <= SPEC.promote:
                t += 1
            elif t > 1 and i > k - SPEC.demote:
                t -= 1
            out[p] = t
    return out


def test_tiers_carry_across_instances_and_a_player_who_skips_keeps_theirs():
    series = LeagueTable(SPEC)
    rng = np.random.default_rng(5)
    players = [f"p{i}" for i in range(12)]
    carried: dict[str, int] = {}
    for week in range(5):
        inst = LeagueTable(SPEC)
        inst.base = series
        entering = [p for p in players if rng.random() < 0.7]
        for p in players:  # before entering: the tier they would enter at
            assert inst.tier_of(p) == (carried.get(p, 1), False)
        inst.place(entering)
        where = {p: inst.where(p) for p in entering}
        assert {p: w[0] for p, w in where.items()} == {p: carried.get(p, 1) for p in entering}, week
        inst._check()
        scores = {p: int(rng.integers(0, 50)) for p in entering}
        _carry(series, inst, scores)
        carried = _ref_carry(carried, {p: w[0] for p, w in where.items()}, scores,
                             {p: w[0] * 100 + w[1] for p, w in where.items()})
        assert {p: series.tier_of(p)[0] for p in players} == {p: carried.get(p, 1) for p in players}, week
        assert not any(series.tier_of(p)[1] for p in players)  # nobody enters the series itself
    again = LeagueTable.from_state(SPEC, series.to_state())
    assert {p: again.tier_of(p) for p in players} == {p: series.tier_of(p) for p in players}


def test_an_instance_places_at_the_tier_carried_when_the_player_enters_not_when_it_was_made():
    series = LeagueTable(SPEC)
    inst = LeagueTable(SPEC)
    inst.base = series
    inst.place(["a"])
    series.carry(["a", "b"], np.array([3, 2]))  # a later carry: "a" entered before it, "b" after
    inst.place(["b"])
    assert inst.where("a") == (1, 1) and inst.where("b") == (2, 1)
    assert inst.tier_of("c") == (1, False) and inst.tier_of("a") == (1, True)
    series.erase(["b"])
    assert series.tier_of("b") == (1, False)


def test_a_series_takes_competition_settings_and_subscores_and_its_instances_copy_them():
    from engine.core.windows import window_of
    from engine.router.decide import instance_spec

    spec = BoardSpec("g:w:weekly:x", Policy.BEST_SCORE, shards=3, recurrence=Recurrence("week"),
                     entry=EntrySpec(True, 10, 3), league=SPEC, prizes=(Prize(1, 1, '{"gems":1}'),),
                     subscores=("desc", "asc"))
    check_competition(spec)  # no 422 any more
    rec = R.board_record(spec)
    assert rec.kind == R.OPTIONS_BOARD and R.spec_of(list(rec)) == spec
    inst = instance_spec(spec, window_of(spec.recurrence, ms(2026, 12, 8)))
    assert (inst.entry, inst.league, inst.prizes, inst.subscores) == (spec.entry, spec.league, spec.prizes,
                                                                      spec.subscores)
    rec = R.board_record(inst)
    assert rec.kind == R.INSTANCE_OPTIONS and R.spec_of(list(rec)) == inst
    plain = BoardSpec("g:w:plain:x", Policy.BEST_SCORE, subscores=("desc",))
    assert R.board_record(plain).kind == R.BOARD_SUBS  # unchanged for a board with subscores only
    league_subs = BoardSpec("g:w:l:x", Policy.BEST_SCORE, league=SPEC, subscores=("desc",))
    assert R.spec_of(list(R.board_record(league_subs))) == league_subs


# ------------------------------------------------------------------ through the service

class FakeClock:
    def __init__(self, now: int):
        self.now = now

    def __call__(self) -> int:
        return self.now


SERIES = "g:league:weekly:x"
W1, W2, W3 = "g:league:weekly.20261130:x", "g:league:weekly.20261207:x", "g:league:weekly.20261214:x"
PRIZES = (Prize(1, 1, '{"gems":100}'),)


def series_spec(shards: int, subscores: tuple[str, ...] = ()) -> BoardSpec:
    return BoardSpec(SERIES, Policy.BEST_SCORE, shards=shards, finalize_after_s=0,
                     recurrence=Recurrence("week", keep=2), entry=EntrySpec(False, None, 3), league=SPEC,
                     prizes=PRIZES, subscores=subscores)


async def open_svc(clock: FakeClock, data_dir=None) -> LocalService:
    return await LocalService.open(data_dir=None if data_dir is None else str(data_dir), n_shards=3,
                                   wall_clock=clock, snapshot_every_events=10**9, snapshot_every_seconds=10**9)


async def settle(svc: LocalService) -> None:
    """What the season timer owes at the clock's now, and the carries and awards it started, done."""
    await svc.router.close_due()
    control = svc.router.control
    while control._settling:
        await asyncio.gather(*list(control._settling.values()), return_exceptions=True)


def ev(board: str, eid: str, player: str, value: int, at: int, subs: tuple[int, ...]) -> ScoreEvent:
    return ScoreEvent(board, eid, player, value, at, at, b"", subs)


async def observe(svc: LocalService, players: list[str]) -> dict:
    """The series' carried tiers, and per instance its cohorts (members, ranked entries, zones) and awards."""
    out: dict = {"tiers": {}}
    for p in players:
        t = await svc.tier(SERIES, p)
        out["tiers"][p] = [t.board_id, t.tier, t.entered]
    for b in (W1, W2, W3):
        if b not in svc.router.boards:
            continue
        page = await svc.cohorts(b)
        cohorts = {}
        for c in page.cohorts:
            view = await svc.cohort(b, cohort=c.cohort)
            cohorts[c.cohort] = [c.members, [[e.rank, e.player_id, e.value] for e in view.entries],
                                 list(view.zones)]
        awards = (await svc.awards(b, 0, 100)).awards
        out[b] = {"state": (await svc.board(b)).state.value, "cohorts": cohorts,
                  "awards": [[a.award_id, a.rank, a.cohort, a.reward] for a in awards]}
    return out


PLAYERS = [f"p{i}" for i in range(1, 10)]


async def weekly_league(svc: LocalService, clock: FakeClock, shards: int, subscores: tuple[str, ...]) -> dict:
    """Three weekly windows of a league series (see the module doc); returns what :func:`observe` saw at the end."""
    subs = tuple(0 for _ in subscores)
    clock.now = ms(2026, 11, 30, 12)  # a Monday: window 1
    await svc.create_board(series_spec(shards, subscores))
    assert set(svc.router.boards) == {SERIES, W1}
    inst = await svc.board(W1)
    assert (inst.league, inst.prizes, inst.entry, inst.subscores) == (SPEC, PRIZES, EntrySpec(False, None, 3),
                                                                      subscores)
    # window 1: nine players in tier 1, three cohorts; the best of each is in the promote zone
    got = await svc.joins(SERIES, PLAYERS)
    assert got.board_id == W1 and [r.position for r in got.results] == list(range(9))
    scores = {"p1": 50, "p2": 40, "p3": 30, "p4": 60, "p5": 10, "p6": 20, "p7": 70, "p8": 5, "p9": 1}
    t = clock.now
    await svc.submit([ev(SERIES, f"w1-{p}", p, v, t, subs) for p, v in scores.items()])
    extra = await svc.submit([ev(SERIES, f"w1-p2-{i}", "p2", 1, t, subs) for i in range(3)])
    assert [r.outcome for r in extra] == [Outcome.REJECTED_NOT_AN_IMPROVEMENT] * 2 + [Outcome.REJECTED_MAX_ATTEMPTS]
    view = await svc.cohort(SERIES, player_id="p1")
    assert view.board_id == W1 and view.cohort == "1-1" and view.zones[0] == "promote"
    assert (await svc.tier(SERIES, "p1")).tier == 1

    # window 2: window 1 froze (and finalized: finalize_after_s 0): the tiers carried, the awards logged
    clock.now = ms(2026, 12, 7, 1)
    await settle(svc)
    assert svc.router.boards[W1].carried and not svc.router.boards[W1].carry_due
    assert {p: (await svc.tier(SERIES, p)).tier for p in PLAYERS} == {
        "p1": 2, "p4": 2, "p7": 2, "p2": 1, "p3": 1, "p5": 1, "p6": 1, "p8": 1, "p9": 1}
    tier = await svc.tier(SERIES, "p1")
    assert (tier.board_id, tier.entered) == (W2, False)
    awards = (await svc.awards(W1)).awards
    assert [(a.award_id, a.rank, a.cohort) for a in awards] == [
        (f"{W1}/p1", 1, "1-1"), (f"{W1}/p4", 1, "1-2"), (f"{W1}/p7", 1, "1-3")]
    # p7 skips window 2; p2 gets its attempts back on the new instance
    got = await svc.joins(SERIES, ["p1", "p4", "p2", "p3"])
    assert got.board_id == W2
    assert [c.cohort for c in (await svc.cohorts(SERIES)).cohorts] == ["1-1", "2-1"]
    t = clock.now
    res = await svc.submit([ev(SERIES, "w2-p1", "p1", 5, t, subs), ev(SERIES, "w2-p4", "p4", 9, t, subs),
                            ev(SERIES, "w2-p2", "p2", 70, t, subs), ev(SERIES, "w2-p3", "p3", 80, t, subs)])
    assert all(r.outcome is Outcome.APPLIED_FIRST_SCORE for r in res)
    view = await svc.cohort(SERIES, cohort="2-1")
    assert view.board_id == W2 and [e.player_id for e in view.entries] == ["p4", "p1"]
    assert list(view.zones) == ["promote", "demote"]

    # window 3: window 2's zones moved the tiers; p7 kept the one window 1 carried
    clock.now = ms(2026, 12, 14, 1)
    await settle(svc)
    want = {"p1": 1, "p4": 3, "p7": 2, "p3": 2, "p2": 1, "p5": 1, "p6": 1, "p8": 1, "p9": 1}
    assert {p: (await svc.tier(SERIES, p)).tier for p in PLAYERS} == want
    # after its window: a late event held on window 2, applied by a moderator, moves no tier
    late = await svc.submit([ev(SERIES, "w2-late-p1", "p1", 999, ms(2026, 12, 13, 23), subs)])
    assert late[0].outcome is Outcome.HELD_FOR_CORRECTION
    await svc.decide(QuarantineDecision(W2, "w2-late-p1", "apply", "verified", "mod"))
    assert [e.player_id for e in (await svc.cohort(W2, cohort="2-1")).entries] == ["p1", "p4"]
    assert {p: (await svc.tier(SERIES, p)).tier for p in PLAYERS} == want
    awards = (await svc.awards(W2)).awards  # logged at FINALIZED, before the correction
    assert [(a.award_id, a.cohort) for a in awards] == [(f"{W2}/p3", "1-1"), (f"{W2}/p4", "2-1")]
    got = await svc.joins(SERIES, ["p1", "p4", "p7", "p3"])
    assert got.board_id == W3
    where = {p: (await svc.cohort(SERIES, player_id=p)) for p in ("p1", "p4", "p7", "p3")}
    assert {p: (v.board_id, v.cohort) for p, v in where.items()} == {
        "p1": (W3, "1-1"), "p4": (W3, "3-1"), "p7": (W3, "2-1"), "p3": (W3, "2-1")}
    tier = await svc.tier(SERIES, "p7")
    assert (tier.board_id, tier.tier, tier.entered) == (W3, 2, True)
    # keep=2: window 1 was archived when window 3 started; its awards stay readable
    await svc.router.control.enforce_keep()
    assert (await svc.board(W1)).state is BoardState.ARCHIVED and (await svc.board(W2)).state is BoardState.FINALIZED
    assert [a.award_id for a in (await svc.awards(W1)).awards] == [f"{W1}/p1", f"{W1}/p4", f"{W1}/p7"]
    return await observe(svc, PLAYERS)


@pytest.mark.parametrize("shards, subscores", [(1, ()), (3, ("desc",))])
def test_a_weekly_league_over_three_windows_and_a_restart(tmp_path, shards, subscores):
    async def main():
        clock = FakeClock(ms(2026, 11, 30, 12))
        data = tmp_path / "data"
        svc = await open_svc(clock, data)
        try:
            live = await weekly_league(svc, clock, shards, subscores)
            await svc.snapshot()
            await svc.submit([ev(SERIES, "w3-p1", "p1", 3, clock.now, tuple(0 for _ in subscores))])
            live = await observe(svc, PLAYERS)
        finally:
            await svc.close()
        copy = tmp_path / "copy"
        shutil.copytree(data, copy)
        shutil.rmtree(copy / "snapshots")
        for d in (data, copy):  # snapshot + tail, then the log alone
            svc = await open_svc(clock, d)
            try:
                assert await observe(svc, PLAYERS) == live
            finally:
                await svc.close()
        return live

    asyncio.run(main())


def test_k_partitions_equal_one():
    async def run(shards):
        clock = FakeClock(ms(2026, 11, 30, 12))
        svc = await open_svc(clock)
        try:
            return await weekly_league(svc, clock, shards, ())
        finally:
            await svc.close()

    one = asyncio.run(run(1))
    assert asyncio.run(run(3)) == one


def test_nobody_enters_another_instance_while_a_frozen_one_carries_its_tiers():
    async def main():
        clock = FakeClock(ms(2026, 11, 30, 12))
        svc = await open_svc(clock)
        try:
            await svc.create_board(series_spec(1))
            await svc.joins(SERIES, ["a", "b"])
            await svc.submit([ev(SERIES, "a1", "a", 9, clock.now, ()), ev(SERIES, "b1", "b", 3, clock.now, ())])
            # the next window's instance exists already (an event ahead); window 1 freezes by an admin
            await svc.submit([ev(SERIES, "c-next", "c", 1, ms(2026, 12, 7, 2), ())])
            control = svc.router.control
            real = control.carry_tiers
            control.carry_tiers = _noop  # type: ignore[method-assign]  # the carry has not come yet
            await svc.set_state(W1, BoardState.FROZEN)
            assert svc.router.boards[W1].carry_due
            with pytest.raises(AwardsPending):
                await svc.submit([ev(SERIES, "d-next", "d", 1, ms(2026, 12, 7, 3), ())])  # d would enter window 2
            with pytest.raises(AwardsPending):  # nothing changes its rows before the carry either
                await svc.invalidate(Invalidation(W1, "a1", "cheating", "mod"))
            res = await svc.submit([ev(SERIES, "c-next2", "c", 2, ms(2026, 12, 7, 3), ())])  # c entered before
            assert res[0].outcome is Outcome.APPLIED_NEW_BEST
            control.carry_tiers = real  # type: ignore[method-assign]
            await control.finish_awards()  # as a start does
            assert svc.router.boards[W1].carried
            assert (await svc.tier(W2, "a")).tier == 2 and (await svc.tier(W2, "b")).tier == 1
            res = await svc.submit([ev(SERIES, "d-next", "d", 1, ms(2026, 12, 7, 3), ())])
            assert res[0].outcome is Outcome.APPLIED_FIRST_SCORE
        finally:
            await svc.close()

    asyncio.run(main())


async def _noop(board_id: str) -> None:
    return None

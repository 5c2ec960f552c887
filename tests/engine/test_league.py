"""engine.core.league and engine.core.prizes (docs/api.md §16): placement, zones,
the tiers a next season carries and awards, each against a brute-force
reference (ties included); then through the service: k partitions equal one,
and a restart (snapshot + tail, or the log alone) keeps cohorts and awards."""

from __future__ import annotations

import asyncio
import json
import shutil

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.core.archive import ArchiveRows, rank_order
from engine.core.errors import AwardsPending, CohortNotFound, PlayerNotFound, ValidationFailed
from engine.core.league import LeagueTable, check_league, cohort_id, next_tiers, parse_cohort_id, zone
from engine.core.model import (BoardSpec, BoardState, EntrySpec, Invalidation, LeagueSpec, Policy, Prize,
                               ScoreEvent)
from engine.core.players import ids_of
from engine.core.prizes import AwardTable, award_records, check_prizes, compute_awards
from engine.router.decide import Submission
from engine.runtime.local import LocalService
from tests.engine.oracle import final_rows, ranking

PLAYERS = [f"p{i:02d}" for i in range(24)] + ["é", "𝔘"]


# ------------------------------------------------------------------ references

def ref_place(spec: LeagueSpec, entering: list[str], carried: dict[str, int]) -> dict[str, tuple[int, int]]:
    """player -> (tier, number), one player at a time in order."""
    cohorts: dict[int, list[list[str]]] = {}
    where: dict[str, tuple[int, int]] = {}
    for p in entering:
        if p in where:
            continue
        t = carried.get(p, 1)
        got = cohorts.setdefault(t, [])
        if not got or len(got[-1]) >= spec.cohort_size:
            got.append([])
        got[-1].append(p)
        where[p] = (t, len(got))
    return where


def ref_local(spec: LeagueSpec, where: dict, board_order: list[str]) -> dict[str, tuple[int, int, str | None]]:
    """ranked player -> (local rank, ranked members k, zone), from the board's rank order."""
    by_cohort: dict[tuple[int, int], list[str]] = {}
    for p in board_order:
        if p in where:
            by_cohort.setdefault(where[p], []).append(p)
    out = {}
    for (tier, _), members in by_cohort.items():
        k = len(members)
        for i, p in enumerate(members, 1):
            z = "promote" if tier < spec.tiers and i <= spec.promote else \
                "demote" if tier > 1 and i > k - spec.demote else None
            out[p] = (i, k, z)
    return out


def ref_awards(prizes, where, local, board_order, league: bool) -> list[tuple[str, int, str | None, int]]:
    """(player, rank, cohort id, prize index) in award order."""
    def prize(r):
        return next((i for i, p in enumerate(prizes) if p.first <= r <= p.last), None)
    if not league:
        got = [(p, r, None, prize(r)) for r, p in enumerate(board_order, 1)]
    else:
        ranked = sorted((where[p][0], where[p][1], local[p][0], p) for p in local)
        got = [(p, r, cohort_id(t, n), prize(r)) for t, n, r, p in ranked]
    return [g for g in got if g[3] is not None]


# ------------------------------------------------------------------ pure

leagues = st.builds(lambda s, t, pd: LeagueSpec(s, t, min(pd[0], s), min(pd[1], s - min(pd[0], s))),
                    st.integers(2, 5), st.integers(1, 4), st.tuples(st.integers(0, 3), st.integers(0, 3)))


@settings(max_examples=60, deadline=None)
@given(leagues, st.lists(st.sampled_from(PLAYERS), max_size=60), st.dictionaries(st.sampled_from(PLAYERS),
                                                                                   st.integers(1, 4), max_size=8))
def test_placement_follows_log_order_and_survives_a_snapshot(spec, entering, carried):
    carried = {p: min(t, spec.tiers) for p, t in carried.items()}
    t = LeagueTable(spec)
    t.carry(list(carried), np.array(list(carried.values()), np.int64))
    half = len(entering) // 2
    t.place(entering[:half])
    rest = entering[half:] + ["not-admitted"]
    t.place(t.entrants(rest, np.array([0] * (len(rest) - 1) + [3], np.uint8)))
    want = ref_place(spec, entering, carried)
    assert {p: t.where(p) for p in PLAYERS if t.where(p) is not None} == want
    assert t.where("not-admitted") is None and t.placed == len(want)
    for (tier, number) in set(want.values()):
        g = t.find(tier, number)
        assert t.get(g).members == [p for p in dict.fromkeys(entering) if want[p] == (tier, number)]
    t._check()
    again = LeagueTable.from_state(spec, t.to_state())
    again._check()
    again.place(["late-1", "late-2"])
    t.place(["late-1", "late-2"])
    assert again.to_state() == t.to_state()


def _rows(draw_rows: list[tuple[str, int, int, bool]]) -> ArchiveRows:
    ids = [r[0] for r in draw_rows]
    return ArchiveRows.of(ids, [r[1] for r in draw_rows], [r[2] for r in draw_rows], [0] * len(ids),
                          [1] * len(ids), [r[3] for r in draw_rows])


rows_st = st.lists(st.tuples(st.sampled_from(PLAYERS), st.integers(0, 3), st.integers(0, 2), st.booleans()),
                   max_size=len(PLAYERS), unique_by=lambda r: r[0])
prizes_st = st.lists(st.tuples(st.integers(1, 6), st.integers(0, 3)), max_size=4).map(
    lambda xs: tuple(Prize(a, a + w, json.dumps({"i": i})) for i, (a, w) in enumerate(xs))).filter(
    lambda ps: all(b.first > a.last or a.first > b.last for i, a in enumerate(ps) for b in ps[i + 1:]))


@settings(max_examples=80, deadline=None)
@given(leagues, rows_st, st.lists(st.sampled_from(PLAYERS), max_size=40), prizes_st, st.booleans())
def test_zones_tier_moves_and_awards_equal_the_reference(spec, rows, entering, prizes, league):
    t = LeagueTable(spec)
    t.place(entering)
    where = {p: t.where(p) for p in dict.fromkeys(entering)}
    arch = _rows(rows)
    order = rank_order(Policy.BEST_SCORE, arch)[:sum(r[3] for r in rows)]
    board_order = ranking(Policy.BEST_SCORE, {p: (v, a, 0) for p, v, a, on in rows if on})
    assert [rows[i][0] for i in order] == board_order
    local = ref_local(spec, where, board_order)

    moves = next_tiers(t, arch.id_bytes, arch.id_offsets, order)
    got = dict(zip(ids_of(moves.id_bytes, moves.id_offsets), moves.tiers.tolist()))
    want = {p: tier + (1 if local.get(p, (0, 0, None))[2] == "promote" else
                       -1 if local.get(p, (0, 0, None))[2] == "demote" else 0)
            for p, (tier, _) in where.items()}
    assert got == want
    assert all(1 <= x <= spec.tiers for x in got.values())

    awards = compute_awards(prizes, arch.id_bytes, arch.id_offsets, order, t if league else None)
    table = AwardTable("b", prizes)
    for k, rec in enumerate(award_records("b", 7, awards, per_record=3)):
        table.fold(100 + k, rec)
    assert table.complete
    got_awards = [(r.player_id, r.rank, r.cohort, int(table.prize[r.seq])) for r in table.page(0, 1000)]
    assert got_awards == ref_awards(prizes, where, local, board_order, league)
    restored = AwardTable.from_state("b", prizes, table.to_state())
    assert restored.page(0, 1000) == table.page(0, 1000)
    for r in table.page(0, 1000):
        assert restored.of_player(r.player_id) == [r]


def test_zone_cohort_ids_and_validation():
    spec = LeagueSpec(50, 5, 10, 10)
    assert zone(10, 50, 1, spec) == "promote" and zone(11, 50, 1, spec) is None and zone(41, 50, 1, spec) is None
    assert zone(41, 50, 2, spec) == "demote" and zone(1, 50, 5, spec) is None and zone(41, 50, 5, spec) == "demote"
    assert zone(1, 3, 2, spec) == "promote"  # the promote zone wins over the demote zone in a small cohort
    assert parse_cohort_id("3-12") == (3, 12)
    for bad in ("0-1", "1-0", "1", "a-b", "1-1-1", " 1-1", "01-1", "21-1x"):
        assert parse_cohort_id(bad) is None
    for bad, field in ((LeagueSpec(1), "league.cohort_size"), (LeagueSpec(2, 21), "league.tiers"),
                       (LeagueSpec(4, 2, 3, 2), "league.promote"), (LeagueSpec(1001), "league.cohort_size")):
        with pytest.raises(ValidationFailed) as e:
            check_league(bad)
        assert e.value.field == field
    check_league(LeagueSpec(1000, 20, 500, 500))
    with pytest.raises(ValidationFailed, match="overlap"):
        check_prizes((Prize(1, 3, "{}"), Prize(3, 4, "{}")))
    with pytest.raises(ValidationFailed) as e:
        check_prizes((Prize(2, 1, "{}"),))
    assert e.value.field == "prizes[0].ranks"
    with pytest.raises(ValidationFailed):
        check_prizes(tuple(Prize(i, i, "{}") for i in range(1, 102)))
    with pytest.raises(ValidationFailed) as e:
        check_prizes((Prize(1, 1, json.dumps({"x": "y" * 1020})),))
    assert e.value.field == "prizes[0].reward"


# ------------------------------------------------------------------ through the service

B = "g:league:s1:eu"
B2 = "g:league:s2:eu"
SPEC = LeagueSpec(3, 3, 1, 1)
PRIZES = (Prize(1, 1, '{"gold":1}'), Prize(2, 2, '{"silver":1}'))


def _events(seed: int) -> list[ScoreEvent]:
    rng = np.random.default_rng(seed)
    evs = [ScoreEvent(B, f"e{i}", PLAYERS[int(rng.integers(0, 14))], int(rng.integers(0, 4)),
                      int(rng.integers(0, 3)), i) for i in range(40)]
    return evs + [evs[int(i)] for i in rng.integers(0, 40, 6)]  # redeliveries


async def _league_run(svc, board_shards: int, seed: int) -> dict:
    await svc.create_board(BoardSpec(B, Policy.BEST_SCORE, shards=board_shards, league=SPEC, prizes=PRIZES,
                                     entry=EntrySpec(False, None, 3)))
    for p in ("p20", "p21"):  # joined before any event: entered first
        await svc.join(B, p)
    evs = _events(seed)
    await svc.submit(evs[:20])
    await svc.submit(evs[20:])
    return await _observe(svc, B)


async def _observe(svc, board: str) -> dict:
    info = await svc.board(board)
    cohorts = {}
    league = svc.router.registry.ctl(board).admission.league
    for g in range(league.n_cohorts):
        c = league.get(g)
        view = await svc.cohort(board, cohort=c.cohort_id, ties=True)
        cohorts[c.cohort_id] = (c.members, view.members, [(e.rank, e.tied_rank, e.player_id, e.value)
                                                           for e in view.entries], list(view.zones))
    awards = await svc.awards(board, 0, 1000)
    return {"state": info.state, "version": info.version, "cohorts": cohorts,
            "awards": [(a.award_id, a.rank, a.cohort, a.reward) for a in awards.awards]}


def _reference(seed: int) -> dict:
    evs = _events(seed)
    admitted, attempts = [], {}
    seen = set()
    for ev in evs:  # max_attempts 3: a player's 4th distinct event is not admitted (and does not enter)
        if ev.event_id in seen:
            continue
        seen.add(ev.event_id)
        if attempts.get(ev.player_id, 0) < 3:
            attempts[ev.player_id] = attempts.get(ev.player_id, 0) + 1
            admitted.append(ev)
    where = ref_place(SPEC, ["p20", "p21"] + [e.player_id for e in admitted], {})
    rows = final_rows(Policy.BEST_SCORE, admitted)
    order = ranking(Policy.BEST_SCORE, rows)
    return {"where": where, "local": ref_local(SPEC, where, order), "order": order, "rows": rows}


@pytest.mark.parametrize("board_shards", [1, 3])
def test_a_league_through_the_service_equals_the_reference_and_survives_restarts(tmp_path, board_shards):
    async def main():
        seed = 7 + board_shards
        ref = _reference(seed)
        data = tmp_path / "data"
        svc = await LocalService.open(data_dir=str(data), n_shards=3)
        try:
            live = await _league_run(svc, board_shards, seed)
            for cid, (members, count, entries, zones) in live["cohorts"].items():
                tier, number = parse_cohort_id(cid)
                assert members == [p for p, w in ref["where"].items() if w == (tier, number)]
                assert count == len(members)
                assert [e[2] for e in entries] == [p for p in ref["order"] if ref["where"].get(p) == (tier, number)]
                assert zones == [ref["local"][e[2]][2] for e in entries]
            with pytest.raises(PlayerNotFound):
                await svc.cohort(B, player_id="nobody")
            with pytest.raises(CohortNotFound):
                await svc.cohort(B, cohort="9-9")
            await svc.set_state(B, BoardState.FROZEN)
            await svc.set_state(B, BoardState.FINALIZED)
            after = await _observe(svc, B)
            want = ref_awards(PRIZES, ref["where"], ref["local"], ref["order"], True)
            assert [(a[0].split("/", 1)[1], a[1], a[2]) for a in after["awards"]] == [(p, r, c) for p, r, c, _ in want]
            victim = after["awards"][0][0].split("/", 1)[1]
            await svc.invalidate(Invalidation(B, _events(seed)[[e.player_id for e in _events(seed)].index(victim)]
                                              .event_id, "late", "mod"))
            assert (await _observe(svc, B))["awards"] == after["awards"]  # later corrections change no award
            await svc.next_season(B, "s2", None)
            await svc.submit([ScoreEvent(B2, f"n-{p}", p, 1, 1, 1) for p in ref["where"]])
            carried = await _observe(svc, B2)
            await svc.set_state(B, BoardState.ARCHIVED)  # from its archive: the same ranking, the same tiers
            await svc.next_season(B, "s3", None)
            b3 = "g:league:s3:eu"
            await svc.submit([ScoreEvent(b3, f"n-{p}", p, 1, 1, 1) for p in ref["where"]])
            again = await _observe(svc, b3)
            final = await _observe(svc, B)
        finally:
            await svc.close()
        assert again["cohorts"] == carried["cohorts"]
        # the tiers carried: promote zone up, demote zone down, by the ranking at next-season (after the invalidation)
        tiers = {p: int(cid.split("-")[0]) for cid, (members, *_) in carried["cohorts"].items() for p in members}
        assert set(tiers) == set(ref["where"])
        copy = tmp_path / "copy"
        shutil.copytree(data, copy)
        shutil.rmtree(copy / "snapshots", ignore_errors=True)
        for d in (data, copy):  # snapshot + tail, then the log alone
            svc = await LocalService.open(data_dir=str(d), n_shards=3)
            try:
                assert await _observe(svc, B) == final
                assert await _observe(svc, B2) == carried
            finally:
                await svc.close()
        return live

    asyncio.run(main())


def test_k_partitions_equal_one():
    async def run(board_shards):
        svc = await LocalService.open(data_dir=None, n_shards=3)
        try:
            got = await _league_run(svc, board_shards, 3)
            await svc.set_state(B, BoardState.FROZEN)
            await svc.set_state(B, BoardState.FINALIZED)
            return got, await _observe(svc, B)
        finally:
            await svc.close()

    one, three = asyncio.run(run(1)), asyncio.run(run(3))
    assert one == three


def test_corrections_wait_for_the_awards_and_a_crash_before_them_logs_them_at_start(tmp_path):
    async def main():
        svc = await LocalService.open(data_dir=str(tmp_path), n_shards=2)
        try:
            await svc.create_board(BoardSpec(B, Policy.BEST_SCORE, shards=2, prizes=(Prize(1, 2, '{"x":1}'),)))
            await svc.submit([ScoreEvent(B, f"e{i}", f"p{i}", i, 1, 1) for i in range(5)])
            await svc.set_state(B, BoardState.FROZEN)
            # the FINALIZED record alone (as if the server died before computing the awards)
            await svc.router.sequencer.submit_state(B, BoardState.FINALIZED)
            ctl = svc.router.registry.ctl(B)
            assert ctl.awards_due
            with pytest.raises(AwardsPending):  # no page may look like the last one meanwhile
                await svc.awards(B)
            with pytest.raises(AwardsPending):
                await svc.router.sequencer.enqueue(Submission.INVALIDATION, Invalidation(B, "e4", "x", "m"), 1)
            waiting = asyncio.ensure_future(svc.invalidate(Invalidation(B, "e4", "x", "m")))
            await asyncio.sleep(0.2)
            assert not waiting.done()  # it waits for the awards
            await svc.router.control.settle_awards(B)
            await waiting
            got = await svc.awards(B, 0, 10)
            assert [(a.player_id, a.rank) for a in got.awards] == [("p4", 1), ("p3", 2)]
        finally:
            await svc.close()
        # a start finds FINALIZED without awards: it logs them
        svc = await LocalService.open(data_dir=str(tmp_path), n_shards=2)
        try:
            await svc.create_board(BoardSpec(B2, Policy.BEST_SCORE, shards=1, prizes=(Prize(1, 1, '{"x":1}'),)))
            await svc.submit([ScoreEvent(B2, "f1", "q1", 3, 1, 1)])
            await svc.set_state(B2, BoardState.FROZEN)
            await svc.router.sequencer.submit_state(B2, BoardState.FINALIZED)
        finally:
            await svc.close()
        svc = await LocalService.open(data_dir=str(tmp_path), n_shards=2)
        try:
            assert [a.player_id for a in (await svc.awards(B2)).awards] == ["q1"]
            assert [(a.player_id, a.rank) for a in (await svc.awards(B, 0, 10)).awards] == [("p4", 1), ("p3", 2)]
        finally:
            await svc.close()

    asyncio.run(main())


def test_a_scheduled_finalize_logs_the_awards_behind_the_season_timer():
    async def main():
        svc = await LocalService.open(data_dir=None, n_shards=2)
        try:
            spec = BoardSpec(B, Policy.BEST_SCORE, shards=2, prizes=(Prize(1, 1, '{"x":1}'),))
            await svc.create_board(spec)
            await svc.submit([ScoreEvent(B, "e1", "p1", 5, 1, 1), ScoreEvent(B, "e2", "p2", 7, 1, 1)])
            closing = BoardSpec(B2, Policy.BEST_SCORE, shards=2, closes_at=1, finalize_after_s=0,
                                prizes=(Prize(1, 2, '{"x":2}'),))
            await svc.create_board(closing)  # closes_at long past: FROZEN and FINALIZED at once, by the schedule
            for _ in range(200):
                try:
                    got = await svc.awards(B2)
                    break
                except AwardsPending:
                    await asyncio.sleep(0.01)
            assert got.awards == () and got.next_cursor is None  # no rows: no awards, and the read says so
            assert svc.router.registry.ctl(B2).awards.complete
        finally:
            await svc.close()

    asyncio.run(main())


def test_a_big_board_is_ranked_for_its_awards_in_a_helper_process_with_the_same_awards():
    async def run(threshold):
        svc = await LocalService.open(data_dir=None, n_shards=2)
        try:
            svc.router.cfg.awards_process_rows = threshold
            got = await _league_run(svc, 3, 5)
            await svc.set_state(B, BoardState.FROZEN)
            await svc.set_state(B, BoardState.FINALIZED)
            return got, await _observe(svc, B), svc.router.control._helper is not None
        finally:
            await svc.close()

    here, there = asyncio.run(run(10**9)), asyncio.run(run(1))
    assert not here[2] and there[2]  # (the helper is spawned on demand and shut down with the router)
    assert here[:2] == there[:2] and there[1]["awards"]

"""Subscores (docs/api.md §14) through the router: k shards equal one and the
brute-force oracle on every read (top, player, around, ranked subset, tied
ranks), a batch with a bad event is refused whole before the log, and a
restart replays the same board."""

from __future__ import annotations

import asyncio
import shutil

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.core.errors import PlayerNotFound, PlayerNotRanked, ValidationFailed
from engine.core.model import INT64_MAX, INT64_MIN, BoardSpec, BoardState, Invalidation, Policy, ScoreEvent
from engine.runtime.local import LocalService
from tests.engine.test_subscores import MAX_TIME, comparator, oracle

BOARD = "g:m:s:subs"
players = st.sampled_from(["p-a", "p-b", "p-c", "p-d", "é", "𝔘"])
subscore_values = st.sampled_from([INT64_MIN, -1, 0, 1, INT64_MAX])


@st.composite
def workloads(draw):
    policy = draw(st.sampled_from([Policy.BEST_SCORE, Policy.FASTEST_TIME]))
    dirs = tuple(draw(st.lists(st.sampled_from(["desc", "asc"]), min_size=1, max_size=3)))
    n = draw(st.integers(1, 30))
    subs = st.tuples(*[subscore_values] * len(dirs))
    events = [ScoreEvent(BOARD, f"e{i}", draw(players), draw(st.integers(-1, 3)), draw(st.integers(0, 2)),
                         draw(st.integers(0, 2)), b"", draw(subs)) for i in range(n)]
    events += draw(st.lists(st.sampled_from(events), max_size=5))
    return policy, dirs, events


def tied(policy, dirs, rows):
    """Competition ranks by brute force: 1 + rows with a strictly better (primary, subscores)."""
    keys = [comparator(policy, dirs, v, 0, 0, s)[:-1] for _, v, s, _ in rows]
    return [1 + sum(k2 < k for k2 in keys) for k in keys]


async def _run(policy, dirs, events, n_shards, board_shards):
    svc = await LocalService.open(data_dir=None, n_shards=n_shards)
    try:
        await svc.create_board(BoardSpec(BOARD, policy, shards=board_shards, max_plausible_time_ms=MAX_TIME,
                                         subscores=dirs))
        half = len(events) // 2
        results = await svc.submit(events[:half]) + await svc.submit(events[half:])
        top = await svc.top(BOARD, 0, 1000, ties=True)
        everyone = sorted({e.player_id for e in events})
        views, windows = [], []
        for pid in everyone:
            try:
                v = await svc.player(BOARD, pid, ties=True)
                views.append((pid, v.rank, v.tied_rank, v.value, v.subscores))
            except PlayerNotFound:
                views.append((pid, None))
            try:
                page = await svc.around(BOARD, pid, 1, ties=True)
                windows.append([(e.rank, e.tied_rank, e.player_id, e.subscores) for e in page.entries])
            except (PlayerNotRanked, PlayerNotFound):
                windows.append(None)
        subset = (await svc.ranked_subset(BOARD, everyone[::2], ties=True)).entries
        exported = [e for chunk in [c async for c in svc.export(BOARD, 3, ties=True)] for e in chunk.entries()]
        checksum = (await svc.checksum(BOARD)).checksum
        for core in svc.cores:
            core._check()
        return {
            "outcomes": [(r.outcome.value, r.version) for r in results],
            "top": [(e.rank, e.tied_rank, e.player_id, e.value, e.subscores) for e in top.entries],
            "views": views, "windows": windows,
            "subset": [(e.rank, e.tied_rank, e.player_id, e.subscores) for e in subset],
            "export": [(e.rank, e.tied_rank, e.player_id, e.value, e.subscores) for e in exported],
            "checksum": checksum,
        }
    finally:
        await svc.close()


@settings(max_examples=30, deadline=None)
@given(workloads())
def test_k_shards_equal_one_shard_and_the_oracle_on_every_read(work):
    policy, dirs, events = work
    loop = asyncio.new_event_loop()
    try:
        runs = [loop.run_until_complete(_run(policy, dirs, events, n, k)) for n, k in [(1, 1), (3, 3), (2, 4)]]
    finally:
        loop.close()
    for other in runs[1:]:
        assert other == runs[0]
    expected = oracle(policy, dirs, events)
    ties = tied(policy, dirs, expected)
    assert runs[0]["top"] == [(i + 1, ties[i], pid, v, s) for i, (pid, v, s, _) in enumerate(expected)]
    assert runs[0]["export"] == runs[0]["top"]  # merged from the partitions' spill files, 3 rows a block
    rank_of = {pid: i for i, (pid, *_) in enumerate(expected)}
    for view in runs[0]["views"]:
        if view[0] in rank_of:
            i = rank_of[view[0]]
            assert view == (view[0], i + 1, ties[i], expected[i][1], expected[i][2])
    for pid, window in zip(sorted({e.player_id for e in events}), runs[0]["windows"]):
        if pid in rank_of:
            i = rank_of[pid]
            lo, hi = max(0, i - 1), min(len(expected), i + 2)
            assert window == [(j + 1, ties[j], expected[j][0], expected[j][2]) for j in range(lo, hi)]
    chosen = [x for x in expected if x[0] in set(sorted({e.player_id for e in events})[::2])]
    local_ties = tied(policy, dirs, chosen)
    assert runs[0]["subset"] == [(i + 1, local_ties[i], pid, s) for i, (pid, _, s, _) in enumerate(chosen)]


def test_a_batch_with_bad_subscores_is_refused_whole_before_the_log():
    async def go():
        svc = await LocalService.open(data_dir=None, n_shards=2)
        try:
            await svc.create_board(BoardSpec(BOARD, Policy.BEST_SCORE, shards=2, subscores=("desc", "asc")))
            await svc.create_board(BoardSpec("g:m:s:plain", Policy.BEST_SCORE))
            good = ScoreEvent(BOARD, "e1", "p", 1, 1, 1, b"", (1, 2))
            plain = ScoreEvent("g:m:s:plain", "e2", "p", 1, 1, 1)
            for bad, at in [([good, plain, good._replace(event_id="e3", subscores=(1,))], 2),
                            ([good._replace(subscores=()), good], 0),
                            ([plain, plain._replace(event_id="e4", subscores=(1,))], 1),
                            ([good, good._replace(event_id="e5", subscores=(1, 2, 3))], 1)]:
                with pytest.raises(ValidationFailed) as err:
                    await svc.submit(bad)
                assert err.value.field == f"events[{at}].subscores"
            assert (await svc.board(BOARD)).version == 0 and (await svc.board("g:m:s:plain")).version == 0
            got = await svc.submit([good, plain, ScoreEvent("g:m:s:none", "e9", "p", 1, 1, 1, b"", (5,))])
            assert [r.outcome.value for r in got] == ["APPLIED_FIRST_SCORE", "APPLIED_FIRST_SCORE",
                                                      "REJECTED_UNKNOWN_SEASON"]
            for spec in [BoardSpec("g:m:s:c", Policy.CUMULATIVE, subscores=("desc",)),
                         BoardSpec("g:m:s:d", Policy.BEST_SCORE, subscores=("up",)),
                         BoardSpec("g:m:s:e", Policy.BEST_SCORE, subscores=("asc",) * 4)]:
                with pytest.raises(ValidationFailed):
                    await svc.create_board(spec)
        finally:
            await svc.close()

    asyncio.run(go())


def test_a_restart_replays_a_subscores_board_to_the_same_rows_and_checksum(tmp_path):
    """From the snapshot that close() writes, and from the log alone."""
    events = [ScoreEvent(BOARD, f"e{i}", f"p{i % 5}", i % 3 + 1, i, i, b"", (i % 2 * INT64_MAX, INT64_MIN + i))
              for i in range(40)]

    async def state(svc):
        return ((await svc.top(BOARD, 0, 100)).entries, (await svc.checksum(BOARD)).checksum,
                (await svc.board(BOARD)).version)

    async def go():
        svc = await LocalService.open(data_dir=str(tmp_path), n_shards=2)
        await svc.create_board(BoardSpec(BOARD, Policy.FASTEST_TIME, shards=3, max_plausible_time_ms=MAX_TIME,
                                         subscores=("desc", "asc")))
        await svc.submit(events)
        await svc.submit(events[:5])  # redeliveries
        before = await state(svc)
        await svc.close()
        out = []
        for drop_snapshots in (False, True):
            if drop_snapshots:
                shutil.rmtree(tmp_path / "snapshots", ignore_errors=True)
            again = await LocalService.open(data_dir=str(tmp_path), n_shards=2)
            try:
                out.append(await state(again))
            finally:
                await again.close()
        return before, out

    before, after = asyncio.run(go())
    assert after == [before, before]
    assert before[0] and all(e.subscores is not None and len(e.subscores) == 2 for e in before[0])


def test_deltas_and_live_changes_carry_the_rows_subscores():
    async def go():
        svc = await LocalService.open(data_dir=None, n_shards=2)
        try:
            await svc.create_board(BoardSpec(BOARD, Policy.BEST_SCORE, shards=2, subscores=("asc",)))
            heard: list = []
            svc.subscribe(lambda board, deltas: heard.extend(deltas))
            await svc.submit([ScoreEvent(BOARD, "e1", "p", 5, 1, 1, b"", (INT64_MAX,)),
                              ScoreEvent(BOARD, "e2", "q", 5, 1, 1, b"", (0,))])
            await svc.submit([ScoreEvent(BOARD, "e3", "p", 5, 2, 2, b"", (INT64_MIN,))])  # a better subscore
            await svc.invalidate(Invalidation(BOARD, "e3"))
            got = await svc.changes(BOARD, 0)
            return got, heard, (await svc.top(BOARD, 0, 10)).entries
        finally:
            await svc.close()

    got, heard, top = asyncio.run(go())
    want = [("p", (INT64_MAX,)), ("q", (0,)), ("p", (INT64_MIN,)), ("p", (INT64_MAX,))]
    assert got.kind == "deltas"
    assert [(c.player_id, c.subscores) for d in got.deltas for c in d.changes] == want
    assert [(c.player_id, c.subscores) for d in heard for c in d.changes] == want
    assert [(e.player_id, e.subscores) for e in top] == [("q", (0,)), ("p", (INT64_MAX,))]


def test_an_archived_subscores_board_answers_every_read_as_before():
    events = [ScoreEvent(BOARD, f"e{i}", f"p{i % 6}", i % 2, i, i, b'{"k":1}' if i % 3 == 0 else b"",
                         ((i % 3 - 1) * INT64_MAX, INT64_MIN + i % 2)) for i in range(30)]

    async def reads(svc):
        out = {"top": (await svc.top(BOARD, 0, 100, ties=True)).entries,
               "subset": (await svc.ranked_subset(BOARD, ["p1", "p4", "p5"], ties=True)).entries,
               "export": [e for c in [c async for c in svc.export(BOARD, 4, ties=True)] for e in c.entries()],
               "checksum": (await svc.checksum(BOARD)).checksum,
               "history": [await svc.history(BOARD, f"p{i}") for i in range(6)]}
        for i in range(6):
            try:
                out[f"p{i}"] = (await svc.player(BOARD, f"p{i}", ties=True),
                                (await svc.around(BOARD, f"p{i}", 2, ties=True)).entries)
            except PlayerNotRanked:
                out[f"p{i}"] = (await svc.player(BOARD, f"p{i}", ties=True), None)
        return out

    async def go():
        svc = await LocalService.open(data_dir=None, n_shards=2)
        try:
            await svc.create_board(BoardSpec(BOARD, Policy.BEST_SCORE, shards=3, subscores=("asc", "desc")))
            await svc.submit(events)
            await svc.invalidate(Invalidation(BOARD, "e29"))
            before = await reads(svc)
            for state in (BoardState.FROZEN, BoardState.FINALIZED, BoardState.ARCHIVED):
                await svc.set_state(BOARD, state)
            return before, await reads(svc)
        finally:
            await svc.close()

    before, after = asyncio.run(go())
    assert before["top"] and all(e.subscores is not None for e in before["top"])
    # the journal keeps each event's subscores in front of its metadata: the history shows only the metadata
    assert [h.metadata for h in before["history"][0]] == [b'{"k":1}'] * 5
    assert [h.metadata for h in before["history"][1]] == [b""] * 5
    for key in before:
        assert after[key] == before[key], key

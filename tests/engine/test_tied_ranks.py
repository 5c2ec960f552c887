"""Tied display ranks (docs/api.md §13, ``?ties=competition``).

The competition rank of a ranked player is one plus the number of ranked
players whose primary value (score, total or time) is strictly better. These
tests hold every read that returns ranks (top pages at any offset, a player,
the window around a player, a ranked subset) to a brute-force oracle built
with ``sorted()``, for the three policies, with heavy value ties, and with
one partition or several partitions on several shard actors.
"""

from __future__ import annotations

import asyncio

from hypothesis import given, settings
from hypothesis import strategies as st

from engine.core.errors import EventNotFound, PlayerNotRanked
from engine.core.model import BoardSpec, Invalidation, Policy, RankedEntry, ScoreEvent
from engine.core.ranking import first_tied_in_prefix, with_tied_ranks
from engine.runtime.local import LocalService
from tests.engine import oracle

BOARD = "g:m:s:ties"
players = st.sampled_from(["p-a", "p-b", "p-c", "p-d", "p-e", "p-f", "p-g", "é", "𝔘"])


def competition(values_in_rank_order: list[int]) -> list[int]:
    """The oracle: 1 + how many values are strictly better, counted one by one."""
    out = []
    for v in values_in_rank_order:
        better = sum(1 for w in values_in_rank_order if w != v and values_in_rank_order.index(w) < values_in_rank_order.index(v))
        out.append(1 + better)
    return out


@given(st.lists(st.integers(0, 3), min_size=1, max_size=30).map(lambda vs: sorted(vs, reverse=True)),
       st.data())
def test_with_tied_ranks_equals_counting_strictly_better_values(values, data):
    prefix = [RankedEntry(i + 1, f"p{i}", v, 0) for i, v in enumerate(values)]
    expected = competition(values)
    start = data.draw(st.integers(0, len(prefix) - 1))
    page = with_tied_ranks(prefix[start:], first_tied_in_prefix(prefix, start))
    assert [e.tied_rank for e in page] == expected[start:]
    assert [e.rank for e in page] == [e.rank for e in prefix[start:]]  # rank keeps its strict meaning


@st.composite
def tied_workloads(draw):
    policy = draw(st.sampled_from(list(Policy)))
    n = draw(st.integers(1, 40))
    value = st.integers(1, 3) if policy is Policy.FASTEST_TIME else st.integers(-2, 2)  # heavy value ties
    events = [ScoreEvent(BOARD, f"e{i}", draw(players), draw(value), draw(st.integers(-3, 3)), draw(st.integers(-3, 3)))
              for i in range(n)]
    invalid = draw(st.lists(st.sampled_from([e.event_id for e in events]), max_size=2, unique=True))
    return policy, events, invalid


async def _reads(policy, events, invalid, n_shards, board_shards):
    svc = await LocalService.open(data_dir=None, n_shards=n_shards)
    try:
        await svc.create_board(BoardSpec(BOARD, policy, shards=board_shards, max_plausible_time_ms=3))
        await svc.submit(events)
        for eid in invalid:
            try:
                await svc.invalidate(Invalidation(BOARD, eid))
            except EventNotFound:
                pass
        tops = {}
        for offset in range(0, 10):
            page = await svc.top(BOARD, offset, 4, ties=True)
            tops[offset] = [(e.rank, e.tied_rank, e.player_id) for e in page.entries]
        views, windows = {}, {}
        for pid in sorted({e.player_id for e in events}):
            v = await svc.player(BOARD, pid, ties=True)
            views[pid] = (v.rank, v.tied_rank)
            try:
                w = await svc.around(BOARD, pid, 2, ties=True)
                windows[pid] = [(e.rank, e.tied_rank, e.player_id) for e in w.entries]
            except PlayerNotRanked:
                windows[pid] = None
        subset = await svc.ranked_subset(BOARD, ["p-b", "p-c", "é", "p-f"], ties=True)
        return tops, views, windows, [(e.rank, e.tied_rank, e.player_id) for e in subset.entries]
    finally:
        await svc.close()


def _expected(policy, events, invalid):
    rows = oracle.final_rows(policy, events, set(invalid), max_time=3)
    order = oracle.ranking(policy, rows)
    values = [rows[p][0] for p in order]
    tied = dict(zip(order, competition(values)))
    return rows, order, tied


@settings(max_examples=40, deadline=None)
@given(tied_workloads(), st.sampled_from([(1, 1), (3, 3), (2, 4)]))
def test_tied_ranks_of_every_read_equal_the_oracle(workload, shape):
    policy, events, invalid = workload
    # an invalidation only changes anything for an event that was applied: the oracle drops those ids too
    tops, views, windows, subset = asyncio.run(_reads(policy, events, invalid, *shape))
    rows, order, tied = _expected(policy, events, invalid)
    for offset, page in tops.items():
        assert page == [(offset + i + 1, tied[p], p) for i, p in enumerate(order[offset:offset + 4])]
    for pid, (rank, t) in views.items():
        if pid in rows:
            assert (rank, t) == (order.index(pid) + 1, tied[pid])
        else:
            assert (rank, t) == (None, None)
    for pid, window in windows.items():
        if pid not in rows:
            assert window is None
            continue
        r = order.index(pid)
        lo, hi = max(0, r - 2), min(len(order), r + 3)
        assert window == [(k + 1, tied[order[k]], order[k]) for k in range(lo, hi)]
    chosen = [p for p in order if p in {"p-b", "p-c", "é", "p-f"}]
    local = competition([rows[p][0] for p in chosen])
    assert subset == [(i + 1, local[i], p) for i, p in enumerate(chosen)]

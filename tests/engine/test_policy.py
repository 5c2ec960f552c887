"""The ``latest`` policy (docs/api.md §6, §14) against brute-force references.

A player's row is their most recent valid event: the latest ``achieved_at``,
then the later ``submitted_at``, then the greater event id by code point.
Timestamps come from a tiny range so that full ties (both timestamps equal)
are common and the event id decides; the ids are chosen so that their order
needs more than the first byte (shared prefixes, multi-byte UTF-8, an astral
character, a prefix of another id). A tiny journal tail sends the row's event
to the journal's store, where the kernel cannot reach it (the partition reads
its id before the batch).
"""

from __future__ import annotations

import asyncio

import msgpack
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.core.board import Board
from engine.core.columns import ScoreColumns
from engine.core.journal import Journal
from engine.core.model import INT64_MAX, INT64_MIN, BoardSpec, Outcome, Policy, RowStatus, ScoreEvent
from engine.core.partition import Partition
from engine.core.policy import key_for, latest_order
from engine.core.records import outcome_of
from tests.engine import oracle
from tests.engine.test_router import _run

BOARD = "b"
LATEST = Policy.LATEST
PLAYERS = ["p-a", "p-b", "é", "𝔘", "p"]
EVENT_IDS = ["e", "e-", "e-a", "e-aa", "e-ab", "e-b", "e-é", "e-e\u0301", "e-\u4e2d", "e-\U0001f600", "E", "e10",
             "e9", "e-\uffff", "e-\U00010000", "x" * 30 + "a", "x" * 30 + "b", "x" * 31]
values = st.one_of(st.integers(-2, 3), st.sampled_from([INT64_MIN, INT64_MAX]))
times = st.integers(0, 2)
settings.register_profile("latest", deadline=None, max_examples=150, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def latest_streams(draw, min_size=0):
    """Distinct events (ids drawn without repeats), then redeliveries, shuffled."""
    ids = draw(st.lists(st.sampled_from(EVENT_IDS), min_size=min_size, unique=True))
    events = [ScoreEvent(BOARD, eid, draw(st.sampled_from(PLAYERS)), draw(values), draw(times), draw(times))
              for eid in ids]
    arrival = events + (draw(st.lists(st.sampled_from(events), max_size=8)) if events else [])
    draw(st.randoms(use_true_random=False)).shuffle(arrival)
    return arrival


def applied(events: list[ScoreEvent], batch: int, tail: int) -> Partition:
    p = Partition(LATEST, 3, Journal(tail_rows=tail))
    for i in range(0, len(events), batch):
        p.apply_columns(ScoreColumns.from_events(events[i:i + batch], BOARD))
        p._check()
    return p


def rows_of(p: Partition) -> dict:
    """player -> (value, achieved_at, submitted_at, status) of every row."""
    return {r.player_id: (r.value, r.achieved_at, r.submitted_at, r.status) for r in p.all_rows()}


def reference(events: list[ScoreEvent], invalid: set = frozenset()) -> dict:
    rows = oracle.final_rows(LATEST, events, invalid=set(invalid))
    return {pid: (*row, RowStatus.ACTIVE) for pid, row in rows.items()}


def test_latest_order_is_achieved_then_submitted_then_event_id_by_code_point():
    assert latest_order(2, 0, "a") > latest_order(1, 9, "z")
    assert latest_order(1, 2, "a") > latest_order(1, 1, "z")
    assert latest_order(1, 1, "e-\U00010000") > latest_order(1, 1, "e-\uffff")  # code points, not UTF-16 units
    assert latest_order(1, 1, "e9") > latest_order(1, 1, "e10")
    # the rank key is best_score's: higher value, then earlier achieved_at, then lower player id
    key = key_for(LATEST)
    assert sorted([key(5, 2, 0, "b"), key(5, 1, 9, "c"), key(7, 3, 0, "d"), key(5, 2, 0, "a")]) == [
        key(7, 3, 0, "d"), key(5, 1, 9, "c"), key(5, 2, 0, "a"), key(5, 2, 0, "b")]


@settings(settings.get_profile("latest"))
@given(latest_streams(), st.sampled_from([1, 2, 5, 1000]), st.sampled_from([1, 3, 10**9]))
def test_latest_rows_and_strict_ranks_equal_the_reference_whatever_the_arrival(events, batch, tail):
    p = applied(events, batch, tail)
    expected = reference(events)
    assert rows_of(p) == expected
    order = oracle.ranking(LATEST, {pid: row[:3] for pid, row in expected.items()})
    top = p.top(0, 1000)
    assert [r.player_id for r in top] == order
    assert p.ranks(order) == list(range(1, len(order) + 1))


@settings(settings.get_profile("latest"))
@given(latest_streams(), st.sampled_from([1, 3, 1000]), st.sampled_from([1, 3, 10**9]))
def test_each_outcome_says_whether_the_event_became_the_row(events, batch, tail):
    """One event at a time, in arrival order: APPLIED_LATEST when the event is
    later than every event of its player seen so far, else REJECTED_NOT_LATEST;
    a redelivery is a duplicate. The board version counts the applied ones."""
    codes = []
    p = Partition(LATEST, 3, Journal(tail_rows=tail))
    for i in range(0, len(events), batch):
        codes += p.apply_columns(ScoreColumns.from_events(events[i:i + batch], BOARD)).codes.tolist()
    seen: set[str] = set()
    newest: dict[str, tuple] = {}
    want = []
    for e in events:
        if e.event_id in seen:
            want.append(Outcome.DUPLICATE_IGNORED)
            continue
        seen.add(e.event_id)
        order = latest_order(e.achieved_at, e.submitted_at, e.event_id)
        if e.player_id not in newest or order > newest[e.player_id]:
            newest[e.player_id] = order
            want.append(Outcome.APPLIED_LATEST)
        else:
            want.append(Outcome.REJECTED_NOT_LATEST)
    assert [outcome_of(c) for c in codes] == want
    assert p.changes == want.count(Outcome.APPLIED_LATEST)


@settings(settings.get_profile("latest"))
@given(latest_streams(min_size=1), st.sampled_from([1, 3, 10**9]), st.data())
def test_invalidation_falls_back_to_the_latest_remaining_valid_event(events, tail, data):
    """Invalidating events one by one (the row's or not, rejected ones
    included): after each, every row is the latest of its player's remaining
    valid events, or INVALIDATED when none is left; a snapshot round trip
    keeps it; then an event older than every other is APPLIED_LATEST for an
    invalidated player."""
    p = applied(events, 4, tail)
    distinct = list(dict.fromkeys(e.event_id for e in events))
    victims = data.draw(st.lists(st.sampled_from(distinct), min_size=1, max_size=len(distinct), unique=True))
    players = {e.player_id for e in events}
    for k, eid in enumerate(victims):
        before = p.changes
        p.invalidate(eid, f"c{k}")
        p._check()
        gone = set(victims[:k + 1])
        expected = reference(events, gone)
        got = rows_of(p)
        for pid in players:
            if pid in expected:
                assert got[pid] == expected[pid]
            else:
                assert got[pid][3] is RowStatus.INVALIDATED
        assert p.changes - before in (0, 1)
        p.invalidate(eid, f"again{k}")  # idempotent
        assert rows_of(p) == got
    q = Partition.from_state(LATEST, 3, msgpack.unpackb(msgpack.packb(p.to_state())))
    q._check()
    assert rows_of(q) == rows_of(p) and q.checksum_sum() == p.checksum_sum()
    for x in (p, q):
        for pid in sorted(players):
            if rows_of(x)[pid][3] is RowStatus.INVALIDATED:
                outcome, change = x.apply(ScoreEvent(BOARD, f"old-{pid}", pid, 1, -10, -10))
                assert outcome is Outcome.APPLIED_LATEST and change is not None
                assert rows_of(x)[pid] == (1, -10, -10, RowStatus.ACTIVE)
        x._check()
    assert q.checksum_sum() == p.checksum_sum()


def test_invalidating_the_row_event_walks_back_through_rejected_events():
    p = Partition(LATEST, 3, Journal(tail_rows=1))  # every row but the newest is in the store
    events = [ScoreEvent(BOARD, "e3", "p", 30, 3, 3), ScoreEvent(BOARD, "e1", "p", 10, 1, 1),
              ScoreEvent(BOARD, "e2", "p", 20, 2, 2), ScoreEvent(BOARD, "e2b", "p", 25, 2, 2)]
    assert [p.apply(e)[0] for e in events] == [Outcome.APPLIED_LATEST] + [Outcome.REJECTED_NOT_LATEST] * 3
    assert p.get("p")[:3] == ("p", 30, 3)
    assert p.invalidate("e1", "c1").change is None  # not the row's event: nothing changes
    assert p.invalidate("e3", "c2").row[1:3] == (25, 2)  # e2b > e2 on the event id
    assert p.invalidate("e2b", "c3").row[1:3] == (20, 2)
    last = p.invalidate("e2", "c4")
    assert last.row.status is RowStatus.INVALIDATED and last.row.key is None and len(p) == 0
    assert p.apply(ScoreEvent(BOARD, "e0", "p", 5, 0, 0))[0] is Outcome.APPLIED_LATEST
    assert p.get("p")[1:3] == (5, 0) and p.rank("p") == 1
    p._check()


def test_a_full_tie_with_a_stored_row_is_decided_on_its_event_id():
    """The row's event is flushed to the journal's store before the tied event
    arrives: the kernel compares against the stored id, read for it."""
    for tail in (1, 2, 10**9):
        p = Partition(LATEST, 3, Journal(tail_rows=tail))
        p.apply(ScoreEvent(BOARD, "m", "p", 1, 5, 5))
        p.apply(ScoreEvent(BOARD, "filler-1", "q", 1, 5, 5))
        p.apply(ScoreEvent(BOARD, "filler-2", "q", 1, 5, 5))
        assert p.apply(ScoreEvent(BOARD, "l", "p", 2, 5, 5))[0] is Outcome.REJECTED_NOT_LATEST
        assert p.apply(ScoreEvent(BOARD, "n", "p", 3, 5, 5))[0] is Outcome.APPLIED_LATEST
        assert p.apply(ScoreEvent(BOARD, "mm", "p", 4, 5, 5))[0] is Outcome.REJECTED_NOT_LATEST  # "mm" < "n"
        got = p.apply_columns(ScoreColumns.from_events(
            [ScoreEvent(BOARD, "o", "p", 5, 5, 5), ScoreEvent(BOARD, "nz", "p", 6, 5, 5)], BOARD))
        assert [outcome_of(c) for c in got.codes.tolist()] == [Outcome.APPLIED_LATEST, Outcome.REJECTED_NOT_LATEST]
        assert p.get("p").value == 5
        p._check()


@settings(settings.get_profile("latest"))
@given(latest_streams(), st.randoms(use_true_random=False))
def test_board_final_state_never_depends_on_arrival_order(events, rnd):
    """Through the Board facade (admission's dedup window too): any shuffle with
    more redeliveries reaches the same rows and ranks (not the same row
    versions: how many times a row changed depends on the order)."""
    a = Board(BoardSpec("g:m:s:latest", LATEST))
    a.apply_batch([e._replace(board_id="g:m:s:latest") for e in events])
    shuffled = events + [rnd.choice(events) for _ in range(3)] if events else []
    rnd.shuffle(shuffled)
    b = Board(BoardSpec("g:m:s:latest", LATEST))
    for e in shuffled:
        b.apply(e._replace(board_id="g:m:s:latest"))
    a._check()
    b._check()
    assert [(e.rank, e.player_id, e.value, e.achieved_at) for e in a.top(0, 100).entries] == \
        [(e.rank, e.player_id, e.value, e.achieved_at) for e in b.top(0, 100).entries]
    assert rows_of(a.partition) == rows_of(b.partition)


@st.composite
def latest_workloads(draw):
    ids = draw(st.lists(st.sampled_from(EVENT_IDS), min_size=1, unique=True))
    events = [ScoreEvent("g:m:s:eq", eid, draw(st.sampled_from(PLAYERS)), draw(st.integers(-2, 4)), draw(times),
                         draw(times)) for eid in ids]
    events += draw(st.lists(st.sampled_from(events), max_size=6))
    draw(st.randoms(use_true_random=False)).shuffle(events)
    invalid = draw(st.lists(st.sampled_from(ids), max_size=4, unique=True))
    return events, invalid


@settings(max_examples=30, deadline=None)
@given(latest_workloads())
def test_k_partitions_equal_one_partition(work):
    """A latest board split over 1, 2, 3 and 4 partitions (1 to 3 in-process
    shard actors) answers the same outcomes, versions, ranks, views, windows,
    invalidation results and checksum."""
    events, invalid = work
    loop = asyncio.new_event_loop()
    try:
        runs = [loop.run_until_complete(_run(LATEST, events, invalid, n, k)) for n, k in [(1, 1), (2, 2), (3, 3),
                                                                                         (2, 4)]]
    finally:
        loop.close()
    for other in runs[1:]:
        assert other == runs[0]
    expected = reference(events, {eid for eid in invalid})
    order = oracle.ranking(LATEST, {pid: row[:3] for pid, row in expected.items()})
    assert [(rank, pid) for rank, pid, _, _ in runs[0]["top"]] == list(enumerate(order, start=1))
    assert [v for _, _, v, _ in runs[0]["top"]] == [expected[pid][0] for pid in order]

"""Subscores (docs/api.md §14) in the engine core, against a brute-force oracle.

A board declares 1-3 subscores, each "desc" or "asc"; the comparator is the
primary value, then each subscore in its direction, then the policy's tie
keys (§6), and "ranks strictly better" uses that whole order. The oracle
below sorts Python tuples; the engine compares raw int64 columns (the rows'
kernel and the rank index), so the values include both int64 extremes.
"""

from __future__ import annotations

import msgpack
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.core.board import Board
from engine.core.checksum import combine, row_digest
from engine.core.columns import ScoreColumns
from engine.core.dedup import fingerprint, fingerprints
from engine.core.model import INT64_MAX, INT64_MIN, BoardSpec, Outcome, Policy, RowStatus, ScoreEvent
from engine.core.partition import Partition
from engine.core.placement import part_of

BOARD = "g:m:s:subs"
MAX_TIME = 3
players = st.sampled_from(["p-a", "p-b", "p-c", "p-d", "é", "𝔘", "P-a"])
values = st.integers(min_value=-1, max_value=4)
times = st.integers(min_value=0, max_value=2)
subscore_values = st.sampled_from([INT64_MIN, INT64_MIN + 1, -1, 0, 1, INT64_MAX - 1, INT64_MAX])
directions = st.lists(st.sampled_from(["desc", "asc"]), min_size=1, max_size=3).map(tuple)
sub_policies = st.sampled_from([Policy.BEST_SCORE, Policy.FASTEST_TIME])

settings.register_profile("flowrank-subscores", parent=settings.default, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow], max_examples=120)
settings.load_profile("flowrank-subscores")


@st.composite
def boards(draw, min_size=0, max_size=40):
    """(policy, directions, events): distinct ids with their content, then
    redeliveries (same id, same content) mixed in."""
    policy, dirs = draw(sub_policies), draw(directions)
    n = draw(st.integers(min_size, max_size))
    subs = st.tuples(*[subscore_values] * len(dirs))
    base = [ScoreEvent(BOARD, f"e{i}", draw(players), draw(values), draw(times), draw(times), b"", draw(subs))
            for i in range(n)]
    dups = draw(st.lists(st.sampled_from(base), max_size=10)) if base else []
    return policy, dirs, base + dups


def comparator(policy: Policy, dirs, value: int, achieved: int, submitted: int, subs) -> tuple:
    """The §14 order as a plain tuple, smaller = better (the brute-force reference)."""
    primary = value if policy is Policy.FASTEST_TIME else -value
    tie = submitted if policy is Policy.FASTEST_TIME else achieved
    return (primary, *[s if d == "asc" else -s for s, d in zip(subs, dirs)], tie)


def oracle(policy: Policy, dirs, events, invalid=frozenset()) -> list[tuple]:
    """The ranked rows, best first: (player, value, subscores, tie) of each
    player's best valid event (first content of each id; invalid timing never
    counts), ordered by the whole comparator then the player id."""
    first: dict[str, ScoreEvent] = {}
    for ev in events:
        first.setdefault(ev.event_id, ev)
    best: dict[str, tuple] = {}
    for ev in first.values():
        if ev.event_id in invalid or (policy is Policy.FASTEST_TIME and not 0 < ev.value <= MAX_TIME):
            continue
        key = comparator(policy, dirs, ev.value, ev.achieved_at, ev.submitted_at, ev.subscores)
        if ev.player_id not in best or key < best[ev.player_id][0]:
            best[ev.player_id] = (key, ev)
    ranked = sorted(best.items(), key=lambda kv: (kv[1][0], kv[0]))
    return [(pid, ev.value, tuple(ev.subscores), key[-1]) for pid, (key, ev) in ranked]


def spec(policy: Policy, dirs) -> BoardSpec:
    return BoardSpec(BOARD, policy, max_plausible_time_ms=MAX_TIME, subscores=dirs)


def build(policy: Policy, dirs, events, **kw) -> Board:
    b = Board(spec(policy, dirs), **kw)
    b.apply_batch(events)
    b._check()
    return b


def ranked(part_rows, policy: Policy) -> list[tuple]:
    tie = (lambda r: r.submitted_at) if policy is Policy.FASTEST_TIME else (lambda r: r.achieved_at)
    return [(r.player_id, r.value, r.subscores, tie(r)) for r in part_rows]


@given(boards())
def test_rows_and_strict_ranks_equal_the_brute_force_order(board):
    policy, dirs, events = board
    b = build(policy, dirs, events)
    expected = oracle(policy, dirs, events)
    p = b.partition
    top = p.top(0, 10_000)
    assert ranked(top, policy) == expected
    ids = [x[0] for x in expected]
    assert p.ranks(ids) == list(range(1, len(ids) + 1))  # strict and gap-free
    assert p.count_better_many([r.key for r in top]) == list(range(len(ids)))
    for r in top:  # a wire key is the comparator's tuple, then the player
        assert r.key == (*comparator(policy, dirs, r.value, r.achieved_at, r.submitted_at, r.subscores), r.player_id)


@given(boards(), st.randoms(use_true_random=False))
def test_arrival_order_and_redelivery_change_nothing(board, rnd):
    policy, dirs, events = board
    shuffled = list(events) + [rnd.choice(events) for _ in range(3)] if events else []
    rnd.shuffle(shuffled)
    a, b = build(policy, dirs, events), build(policy, dirs, shuffled)
    assert ranked(a.partition.top(0, 10_000), policy) == ranked(b.partition.top(0, 10_000), policy)
    # one event at a time (the kernel's in-batch order) agrees with the batch
    c = Board(spec(policy, dirs))
    for ev in shuffled:
        c.apply(ev)
    c._check()
    assert ranked(c.partition.top(0, 10_000), policy) == ranked(a.partition.top(0, 10_000), policy)


@given(boards(), st.integers(1, 4))
def test_k_partitions_rank_as_one(board, k):
    policy, dirs, events = board
    one = build(policy, dirs, events).partition
    parts = [Partition(policy, MAX_TIME, subscores=dirs) for _ in range(k)]
    b = Board(spec(policy, dirs))  # admission decides the verdicts once for the whole board
    cols = ScoreColumns.from_events(events, BOARD)
    verdicts = b.admission.decide_columns(cols).verdicts if len(cols) else np.zeros(0, np.uint8)
    where = np.array([part_of(pid, k) for pid in cols.player_ids], np.int64)
    for n, part in enumerate(parts):
        rows = np.flatnonzero(where == n)
        if len(rows):
            part.apply_columns(cols.take(rows), verdicts[rows])
        part._check()
    merged = sorted((r for part in parts for r in part.top(0, 10_000)), key=lambda r: r.key)
    assert [(r.player_id, r.key) for r in merged] == [(r.player_id, r.key) for r in one.top(0, 10_000)]
    for rank, r in enumerate(merged, start=1):  # the exact-rank coordinator's sum
        assert sum(part.count_better_than(r.key) for part in parts) + 1 == rank
    assert combine(part.checksum_sum() for part in parts) == combine([one.checksum_sum()])


@given(boards(), st.integers(0, 40))
def test_snapshot_and_replay_reproduce_rows_and_checksum(board, cut):
    policy, dirs, events = board
    full = build(policy, dirs, events)
    head, tail = events[:cut], events[cut:]
    first = build(policy, dirs, head)
    state = msgpack.unpackb(msgpack.packb(first.to_state()), strict_map_key=False)
    restored = Board.from_state(first.spec, state)
    assert restored.partition.subscores == dirs
    restored._check()
    restored.apply_batch(tail)
    restored._check()
    assert restored.checksum() == full.checksum() == build(policy, dirs, events).checksum()
    assert ranked(restored.partition.top(0, 10_000), policy) == ranked(full.partition.top(0, 10_000), policy)


@given(boards(min_size=1), st.data())
def test_invalidation_recomputes_the_best_remaining_under_the_whole_order(board, data):
    policy, dirs, events = board
    b = build(policy, dirs, events)
    applied = [eid for eid in dict.fromkeys(e.event_id for e in events) if b.partition.owns_event(eid)]
    if not applied:
        return
    victims = data.draw(st.lists(st.sampled_from(applied), max_size=4, unique=True))
    for eid in victims:
        b.invalidate(eid)
        b._check()
    never = {e.event_id for e in events if not b.partition.owns_event(e.event_id)}
    expected = oracle(policy, dirs, events, invalid=set(victims) | never)
    assert ranked(b.partition.top(0, 10_000), policy) == expected
    active = {r.player_id for r in b.partition.all_rows() if r.status is RowStatus.ACTIVE}
    assert active == {x[0] for x in expected}


@pytest.mark.parametrize("policy", [Policy.BEST_SCORE, Policy.FASTEST_TIME])
@pytest.mark.parametrize("dirs", [("desc",), ("asc",)])
def test_a_same_score_event_with_a_better_subscore_replaces_the_best(policy, dirs):
    b = Board(spec(policy, dirs))
    better, worse = (INT64_MAX, INT64_MIN) if dirs == ("desc",) else (INT64_MIN, INT64_MAX)
    first = b.apply(ScoreEvent(BOARD, "e1", "p", 2, 1, 1, b"", (worse,))).outcome
    assert first in (Outcome.APPLIED_FIRST_SCORE, Outcome.APPLIED_NEW_BEST_TIME)
    # later timestamps (worse tie keys), the same primary, a better subscore: a new best
    got = b.apply(ScoreEvent(BOARD, "e2", "p", 2, 2, 2, b"", (better,))).outcome
    assert got in (Outcome.APPLIED_NEW_BEST, Outcome.APPLIED_NEW_BEST_TIME)
    # earlier timestamps (better tie keys) do not beat a better subscore
    got = b.apply(ScoreEvent(BOARD, "e3", "p", 2, 0, 0, b"", (worse,))).outcome
    assert got in (Outcome.REJECTED_NOT_AN_IMPROVEMENT, Outcome.REJECTED_NOT_FASTER)
    assert b.partition.get("p").subscores == (better,)
    b._check()


@pytest.mark.parametrize("retention", [1_000, 1])
def test_subscores_are_part_of_an_events_content_for_deduplication(retention):
    """Within the dedup window (the table) and past it (the partition's journal)."""
    b = Board(spec(Policy.BEST_SCORE, ("desc", "asc")), dedup_retention=retention)
    ev = ScoreEvent(BOARD, "e1", "p", 5, 1, 1, b'{"m":1}', (INT64_MIN, INT64_MAX))
    assert b.apply(ev).outcome is Outcome.APPLIED_FIRST_SCORE
    b.apply(ScoreEvent(BOARD, "filler", "q", 1, 1, 1, b"", (0, 0)))  # pushes e1 out of a window of 1
    assert b.apply(ev).outcome is Outcome.DUPLICATE_IGNORED
    assert b.apply(ev._replace(subscores=(INT64_MIN, INT64_MAX - 1))).outcome is Outcome.REJECTED_EVENT_ID_CONFLICT
    assert b.apply(ev._replace(subscores=(INT64_MIN + 1, INT64_MAX))).outcome is Outcome.REJECTED_EVENT_ID_CONFLICT
    assert b.partition.get("p").subscores == (INT64_MIN, INT64_MAX)
    assert b.partition.get("p").metadata == b'{"m":1}'
    hist = b.partition.player_history("p")
    assert [h[-1] for h in hist] == [b'{"m":1}'] * len(hist)  # the journal's subscores are not metadata


def test_events_without_subscores_keep_their_fingerprint_and_checksum():
    ev = ScoreEvent(BOARD, "e1", "p", 5, 1, 2, b'{"m":1}')
    plain = fingerprint("p", 5, 1, 2, b'{"m":1}')
    assert fingerprint("p", 5, 1, 2, b'{"m":1}', ()) == plain
    assert int(fingerprints(ScoreColumns.from_events([ev]))[0]) == plain
    with_subs = ScoreColumns.from_events([ev._replace(subscores=(0,))])
    assert int(fingerprints(with_subs)[0]) == fingerprint("p", 5, 1, 2, b'{"m":1}', (0,)) != plain
    assert fingerprint("p", 5, 1, 2, b"", (0,)) != fingerprint("p", 5, 1, 2, b"", (0, 0))
    assert row_digest("p", 5, 1, "ACTIVE", 1, None, None) == row_digest("p", 5, 1, "ACTIVE", 1)
    assert row_digest("p", 5, 1, "ACTIVE", 1, None, (1,)) != row_digest("p", 5, 1, "ACTIVE", 1)


def test_a_board_without_subscores_pays_nothing_for_them():
    p = Partition(Policy.BEST_SCORE, MAX_TIME)
    p.apply_columns(ScoreColumns.from_events([ScoreEvent(BOARD, f"e{i}", f"p{i}", i, 1, 1) for i in range(500)]))
    assert p.sc.size == 0 and p.dirs.size == 0 and p.k == 0
    assert p.get("p1").subscores is None and len(p.get("p1").key) == 3
    q = Partition(Policy.BEST_SCORE, MAX_TIME, subscores=("desc", "asc"))
    q.apply_columns(ScoreColumns.from_events(
        [ScoreEvent(BOARD, f"e{i}", f"p{i}", i, 1, 1, b"", (i, -i)) for i in range(500)]))
    assert q.nbytes() - p.nbytes() == 16 * len(q.players)  # the subscores' own 8 bytes each


def test_a_batch_without_the_boards_subscores_is_refused_whole():
    p = Partition(Policy.BEST_SCORE, MAX_TIME, subscores=("desc",))
    with pytest.raises(ValueError):
        p.apply_columns(ScoreColumns.from_events([ScoreEvent(BOARD, "e1", "p", 1, 1, 1)]))
    assert len(p) == 0 and len(p.journal) == 0


def latest_oracle(dirs, events, invalid=frozenset()) -> list[tuple]:
    """A ``latest`` board with subscores: each player's row is their latest valid
    event (achieved_at, then submitted_at, then the greater event id by code
    point), ranked by the value, the subscores in their directions, then the
    row's achieved_at and the player id."""
    first: dict[str, ScoreEvent] = {}
    for ev in events:
        first.setdefault(ev.event_id, ev)
    latest: dict[str, tuple] = {}
    for ev in first.values():
        if ev.event_id in invalid:
            continue
        order = (ev.achieved_at, ev.submitted_at, ev.event_id)
        if ev.player_id not in latest or order > latest[ev.player_id][0]:
            latest[ev.player_id] = (order, ev)
    rows = sorted(((comparator(Policy.LATEST, dirs, ev.value, ev.achieved_at, ev.submitted_at, ev.subscores), pid, ev)
                   for pid, (_, ev) in latest.items()), key=lambda r: (r[0], r[1]))
    return [(pid, ev.value, tuple(ev.subscores), key[-1]) for key, pid, ev in rows]


@given(boards(min_size=1), st.randoms(use_true_random=False), st.data())
def test_a_latest_board_with_subscores_equals_the_reference_under_any_arrival(board, rnd, data):
    """§14: ``latest`` may declare subscores too; its row is the latest event
    whatever their order, and they rank it; invalidating the row's event falls
    back to the latest remaining valid one, with its subscores."""
    _, dirs, events = board
    shuffled = list(events)
    rnd.shuffle(shuffled)
    b = build(Policy.LATEST, dirs, shuffled)
    assert ranked(b.partition.top(0, 10_000), Policy.LATEST) == latest_oracle(dirs, events)
    gone = data.draw(st.sampled_from(sorted({ev.event_id for ev in events})))
    b.invalidate(gone)
    b._check()
    assert ranked(b.partition.top(0, 10_000), Policy.LATEST) == latest_oracle(dirs, events, {gone})

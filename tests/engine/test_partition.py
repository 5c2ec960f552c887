"""The columnar partition against a brute-force ``sorted()`` oracle.

Value + time ties are decided by the player id's code points (ids that share
long prefixes, non-ASCII and astral ids, a lone surrogate), values span the
whole int64 range of either sign, and arrival is shuffled with redeliveries.
Ranks, neighbours and counts are checked against the oracle's order, and
every structure's ``_check()`` runs after each batch.
"""

from __future__ import annotations

import random

import msgpack
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.core.columns import ScoreColumns
from engine.core.model import INT64_MAX, INT64_MIN, Outcome, Policy, ScoreEvent
from engine.core.journal import Journal
from engine.core.partition import Partition
from engine.core.players import PlayerTable
from engine.core.records import outcome_of
from engine.core.rank_index import CAP, RankIndex
from tests.engine import oracle

BOARD = "b"
# Ids whose order needs more than the first bytes: shared prefixes, multi-byte
# UTF-8 (é, CJK, an astral emoji), a prefix of another id, a lone surrogate.
TRICKY_IDS = ["p", "p-", "p-a", "p-aa", "p-ab", "p-é", "p-e\u0301", "p-\u4e2d", "p-\U0001f600", "p-\ud800",
              "x" * 40 + "a", "x" * 40 + "b", "x" * 41, "Z", "z", "\x00", ""]
EXTREMES = [INT64_MIN, INT64_MIN + 1, -1, 0, 1, INT64_MAX - 1, INT64_MAX]
policies = st.sampled_from(list(Policy))
values = st.one_of(st.integers(-3, 3), st.sampled_from(EXTREMES))


@st.composite
def streams(draw, min_size=0):
    n = draw(st.integers(min_size, 40))
    events = []
    for i in range(n):
        pid = draw(st.sampled_from(TRICKY_IDS))
        events.append(ScoreEvent(BOARD, f"e{i}", pid, draw(values), draw(st.integers(0, 2)), draw(st.integers(0, 2))))
    redelivered = draw(st.lists(st.sampled_from(events), max_size=10)) if events else []
    allev = events + redelivered
    draw(st.randoms()).shuffle(allev)
    return allev


def applied(policy: Policy, events: list[ScoreEvent], batch: int, tail: int = 3) -> Partition:
    """Apply with the partition's own fallback dedup (no admission window).
    ``tail``: journal rows kept in memory; the tiny default sends nearly every
    row through the store (flushes, runs, merges, the player chains)."""
    p = Partition(policy, 3, Journal(tail_rows=tail))
    for i in range(0, len(events), batch):
        p.apply_columns(ScoreColumns.from_events(events[i:i + batch], BOARD))
        p._check()
    return p


def oracle_rows(policy, events, invalid=frozenset()):
    # cumulative totals outside int64 are refused event by event, which the
    # simple oracle does not model: keep to streams where no prefix overflows
    return oracle.final_rows(policy, events, invalid=set(invalid), max_time=3)


def no_overflow(policy, events) -> bool:
    if policy is not Policy.CUMULATIVE:
        return True
    totals: dict = {}
    seen = set()
    for e in events:
        if e.event_id in seen:
            continue
        seen.add(e.event_id)
        t = totals.get(e.player_id, 0) + e.value
        if not INT64_MIN <= t <= INT64_MAX:
            return False
        totals[e.player_id] = t
    return True


@settings(deadline=None, max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(policies, streams(), st.sampled_from([1, 3, 1000]))
def test_order_matches_oracle_with_code_point_ties_and_extremes(policy, events, batch):
    if not no_overflow(policy, events):
        return
    p = applied(policy, events, batch)
    rows = oracle_rows(policy, events)
    expected = oracle.ranking(policy, rows)
    top = p.top(0, 1000)
    assert [r.player_id for r in top] == expected
    for r in top:
        assert r.value == rows[r.player_id][0]
    # exact ranks, and counts for keys of players that live elsewhere
    assert p.ranks(expected + ["nobody"]) == list(range(1, len(expected) + 1)) + [None]
    keys = [r.key for r in top]
    for k, key in enumerate(keys):
        assert p.count_better_than(key) == k
        foreign = (key[0], key[1], key[2] + "\x00")  # just after this player
        assert p.count_better_than(foreign) == k + 1
        before, after, better = p.neighbours(key, 2, 2)
        assert better == k
        assert [r.player_id for r in before] == expected[max(0, k - 2):k]
        assert [r.player_id for r in after] == expected[k + 1:k + 3]


@settings(deadline=None, max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(policies, streams(min_size=1), st.randoms())
def test_final_state_independent_of_arrival_order_and_batching(policy, events, rnd):
    # a redelivery repeats its event's content; any order, any batching
    shuffled = list(events)
    rnd.shuffle(shuffled)
    if not (no_overflow(policy, events) and no_overflow(policy, shuffled)):
        return
    a = applied(policy, events, 1000, tail=10**9)
    b = applied(policy, shuffled, rnd.choice([1, 2, 7]), tail=rnd.choice([1, 2, 5, 10**9]))
    assert [r.key for r in a.top(0, 1000)] == [r.key for r in b.top(0, 1000)]
    assert [r.value for r in a.top(0, 1000)] == [r.value for r in b.top(0, 1000)]


@settings(deadline=None, max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(policies, streams(min_size=1), st.data())
def test_invalidation_and_snapshot_round_trip(policy, events, data):
    if not no_overflow(policy, events):
        return
    p = applied(policy, events, 5)
    owned = [e.event_id for e in events if p.owns_event(e.event_id)]
    victims = data.draw(st.lists(st.sampled_from(owned), max_size=3, unique=True)) if owned else []
    never = {e.event_id for e in events if not p.owns_event(e.event_id)}
    accepted = invalidations_accepted(policy, events, never, victims)
    for i, eid in enumerate(victims):
        assert p.invalidate(eid, f"c{i}").refused == (eid not in accepted)
        p._check()
    rows = oracle_rows(policy, events, accepted | never)
    expected = oracle.ranking(policy, rows)
    assert [r.player_id for r in p.top(0, 1000)] == expected
    q = Partition.from_state(policy, 3, msgpack.unpackb(msgpack.packb(p.to_state())))
    q._check()
    assert q.checksum_sum() == p.checksum_sum()
    assert [r.key for r in q.top(0, 1000)] == [r.key for r in p.top(0, 1000)]
    # snapshots from before the journal moved to disk (every row a column), with and without the owner table
    legacy = applied(policy, events, 5, tail=10**9)
    for i, eid in enumerate(victims):
        legacy.invalidate(eid, f"c{i}")
    for keep_owner in (True, False):
        r = Partition.from_state(policy, 3, format1(legacy.to_state(), keep_owner))
        r._check()
        assert r.checksum_sum() == p.checksum_sum()
        for e in events:
            assert q.owns_event(e.event_id) == p.owns_event(e.event_id) == r.owns_event(e.event_id)
        for x in (p, q, r):
            assert [h for e in events for h in x.player_history(e.player_id)] == \
                [h for e in events for h in legacy.player_history(e.player_id)]
    # and they keep working the same after the round trip
    more = [e for e in events if p.owns_event(e.event_id) and e.event_id not in victims][:2]
    for x in (p, q, r):
        for i, e in enumerate(more):
            x.invalidate(e.event_id, f"d{i}")
        x.apply_columns(ScoreColumns.from_events(events[:7], BOARD))
        x._check()
    assert p.checksum_sum() == q.checksum_sum() == r.checksum_sum()


def invalidations_accepted(policy, events, never: set, victims: list) -> set:
    """The victims whose invalidation goes through, in order: cumulative
    refuses one that would take the sum of the player's other valid deltas
    outside int64."""
    if policy is not Policy.CUMULATIVE:
        return set(victims)
    first = {}
    for e in events:
        first.setdefault(e.event_id, e)
    accepted: set = set()
    for eid in victims:
        pid = first[eid].player_id
        rest = sum(e.value for e in first.values()
                   if e.player_id == pid and e.event_id not in never | accepted | {eid})
        if INT64_MIN <= rest <= INT64_MAX:
            accepted.add(eid)
    return accepted


def test_invalidation_leaving_int64_is_refused_audited_and_changes_nothing():
    p = Partition(Policy.CUMULATIVE, 3, Journal(tail_rows=1))
    for e in (ScoreEvent(BOARD, "big", "p", INT64_MAX, 1, 1), ScoreEvent(BOARD, "minus", "p", -5, 2, 2),
              ScoreEvent(BOARD, "plus", "p", 5, 3, 3)):
        assert p.apply(e)[0] is Outcome.APPLIED
    before = p.checksum_sum()
    refused = p.invalidate("minus", "c1")  # INT64_MAX + 5 without it
    assert refused.refused and refused.change is None and refused.row.value == INT64_MAX
    assert p.checksum_sum() == before
    assert p.player_history("p")[-1][5] == "REJECTED_TOTAL_OUT_OF_RANGE"
    # invalidating the offsetting event first makes room
    assert not p.invalidate("plus", "c2").refused
    done = p.invalidate("minus", "c3")
    assert not done.refused and done.row.value == INT64_MAX and done.change is not None
    # a snapshot replays the refusal's audit the same way
    q = Partition.from_state(Policy.CUMULATIVE, 3, msgpack.unpackb(msgpack.packb(p.to_state())))
    assert q.checksum_sum() == p.checksum_sum() and q.player_history("p") == p.player_history("p")


def format1(state: dict, keep_owner: bool) -> dict:
    """A partition snapshot in the journal's first format: every row as columns."""
    j = state["journal"]
    assert j["base"] == 0, "every row still in the tail"
    n = len(np.frombuffer(j["eoffs"], np.int64)) - 1
    inv = np.zeros(n, np.uint8)
    inv[list(j["invalid"])] = 1
    old = {k: j["tail"][k] for k in ("pid", "kind", "out", "val", "ach", "sub")}
    old.update(inv=inv.tobytes(), eoffs=j["eoffs"], earena=j["earena"])
    if keep_owner:
        old.update(owner=j["owner"], owned=j["owned"])
    return {**state, "journal": old}


def test_outcomes_one_at_a_time_equal_the_batch():
    rnd = random.Random(5)
    events = [ScoreEvent(BOARD, f"e{rnd.randrange(60)}", rnd.choice(TRICKY_IDS), rnd.randrange(-3, 4), rnd.randrange(3),
                         rnd.randrange(3)) for _ in range(300)]
    for policy in Policy:
        one = Partition(policy, 3)
        singles = [one.apply(e)[0] for e in events]
        many = Partition(policy, 3)
        codes = many.apply_columns(ScoreColumns.from_events(events)).codes.tolist()
        assert [outcome_of(c) for c in codes] == singles
        assert one.checksum_sum() == many.checksum_sum()
        assert one.player_history("p-a") == many.player_history("p-a")


def test_cumulative_total_out_of_range_is_refused_and_changes_nothing():
    p = Partition(Policy.CUMULATIVE, 3)
    p.apply(ScoreEvent(BOARD, "a", "p", INT64_MAX, 1, 1))
    outcome, change = p.apply(ScoreEvent(BOARD, "b", "p", 1, 2, 2))
    assert outcome is Outcome.REJECTED_TOTAL_OUT_OF_RANGE and change is None
    assert p.get("p").value == INT64_MAX
    outcome, _ = p.apply(ScoreEvent(BOARD, "c", "p", INT64_MIN, 3, 3))
    assert outcome is Outcome.APPLIED and p.get("p").value == -1


def test_redelivery_past_the_window_is_a_duplicate_or_a_conflict():
    p = Partition(Policy.CUMULATIVE, 3)
    ev = ScoreEvent(BOARD, "e", "p", 5, 1, 1)
    assert p.apply(ev)[0] is Outcome.APPLIED
    assert p.apply(ev)[0] is Outcome.DUPLICATE_IGNORED
    assert p.apply(ev._replace(value=6))[0] is Outcome.REJECTED_EVENT_ID_CONFLICT
    assert p.get("p").value == 5


def test_player_table_interns_and_survives_growth():
    t = PlayerTable()
    ids = [f"p{i}" for i in range(5000)] + TRICKY_IDS
    idx = t.intern(ids)
    assert idx.tolist() == list(range(len(ids)))
    assert t.intern(list(reversed(ids))).tolist() == list(reversed(range(len(ids))))
    assert t.ids_of([0, 4999, 5005]) == ["p0", "p4999", TRICKY_IDS[5]]
    t._check()
    u = PlayerTable.from_state(t.to_state())
    u._check()
    assert u.lookup(ids).tolist() == idx.tolist()


def test_rank_index_splits_and_empties_blocks():
    t = PlayerTable()
    n = CAP * 9 + 5
    ids = t.intern([f"{i:06d}" for i in range(n)])
    ri = RankIndex(blocks=1)
    zeros = np.zeros(n, np.int64)
    order = np.random.default_rng(1).permutation(n)
    ri.insert_many(zeros[order], zeros[order], ids[order], t.arena, t.offs)  # ties on bytes only
    ri._check(t.arena, t.offs)
    assert ri.slice(0, n)[2].tolist() == list(range(n))
    gone = order[: n - 3]
    ri.remove_many(zeros[gone], zeros[gone], ids[gone], t.arena, t.offs)
    ri._check(t.arena, t.offs)
    assert sorted(ri.slice(0, 10)[2].tolist()) == sorted(order[n - 3:].tolist())
    try:
        ri.remove_many(zeros[:1], zeros[:1], ids[gone[:1]], t.arena, t.offs)
    except AssertionError as exc:
        assert "not in the index" in str(exc)
    else:
        raise AssertionError("removing a missing key must fail loudly")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), rounds=st.integers(1, 12), values=st.integers(1, 6))
def test_rank_index_churn_matches_sorted_list(seed, rounds, values):
    """Keys moving as scores improve (remove the old key, insert a better
    one), in batches: after every batch the index holds exactly the model's
    keys in the model's order, every block's recorded last key is right
    (``_check``), counts match ``bisect`` and blocks stay well filled (the
    churn drains blocks, which then join neighbours; full blocks hand keys on
    before they split)."""
    import bisect

    rnd = random.Random(seed)
    t = PlayerTable()
    n = CAP * 6 + rnd.randrange(CAP)
    ids = t.intern([f"p{i:05d}" for i in range(n)])
    ri = RankIndex(blocks=1)
    keys: dict[int, tuple[int, int]] = {}
    model: list[tuple[int, int, bytes]] = []  # (primary, tie, id bytes): the comparator, byte ties
    name = {int(i): f"p{int(i):05d}".encode() for i in ids}
    for _ in range(rounds):
        batch = rnd.sample(range(n), rnd.randrange(1, n // 2))
        out = [x for x in batch if x in keys]
        if out:
            a = np.array(out)
            ri.remove_many(np.array([keys[x][0] for x in out]), np.array([keys[x][1] for x in out]), ids[a],
                           t.arena, t.offs)
            for x in out:
                model.remove((*keys[x], name[x]))
        new = {x: (rnd.randrange(-values, values + 1), rnd.randrange(3)) for x in batch}
        a = np.array(batch)
        ri.insert_many(np.array([new[x][0] for x in batch]), np.array([new[x][1] for x in batch]), ids[a],
                       t.arena, t.offs)
        for x in batch:
            keys[x] = new[x]
            bisect.insort(model, (*new[x], name[x]))
        ri._check(t.arena, t.offs)
        got = ri.slice(0, len(ri))
        assert [name[int(i)] for i in got[2]] == [m[2] for m in model]
        probe = rnd.sample(sorted(keys), min(20, len(keys)))
        counts = ri.count_less_many(np.array([keys[x][0] for x in probe]), np.array([keys[x][1] for x in probe]),
                                    ids[np.array(probe)], t.arena, t.offs)
        assert counts.tolist() == [bisect.bisect_left(model, (*keys[x], name[x])) for x in probe]
    blocks = int(ri.meta[0])
    assert len(ri) == 0 or blocks <= 2 * (len(ri) // CAP) + 3, f"{blocks} blocks for {len(ri)} keys"


# ------------------------------------------------------------------ metadata

METAS = [b"", b"", b'{"a":1}', b'{"b":[2,"x"]}', b'{"k":"\xc3\xa9"}']


@st.composite
def meta_streams(draw, min_size=0, distinct_keys=False):
    """Events with metadata (some without), and redeliveries of some (same
    content, metadata included). ``distinct_keys``: no two events of a player
    tie under any comparator (times are the event's number)."""
    n = draw(st.integers(min_size, 30))
    events = []
    for i in range(n):
        pid = draw(st.sampled_from(TRICKY_IDS[:6]))
        a, s = (i, i) if distinct_keys else (draw(st.integers(0, 2)), draw(st.integers(0, 2)))
        events.append(ScoreEvent(BOARD, f"e{i}", pid, draw(st.integers(-3, 3)), a, s, draw(st.sampled_from(METAS))))
    redelivered = draw(st.lists(st.sampled_from(events), max_size=8)) if events else []
    allev = events + redelivered
    draw(st.randoms()).shuffle(allev)
    return allev


def row_metadata(p: Partition) -> dict:
    return {r.player_id: r.metadata or b"" for r in p.all_rows() if r.key is not None}


@settings(deadline=None, max_examples=120, suppress_health_check=[HealthCheck.too_slow])
@given(policies, meta_streams(min_size=1), st.sampled_from([1, 3, 1000]), st.data())
def test_metadata_follows_the_row_through_invalidation_and_snapshots(policy, events, batch, data):
    p = applied(policy, events, batch)
    assert row_metadata(p) == oracle.final_metadata(policy, events, max_time=3)
    for r in p.top(0, 1000):  # reads carry it: ranked rows, single rows, changes
        assert p.get(r.player_id).metadata == r.metadata
    owned = [e.event_id for e in events if p.owns_event(e.event_id)]
    never = {e.event_id for e in events if not p.owns_event(e.event_id)}
    victims = data.draw(st.lists(st.sampled_from(owned), max_size=4, unique=True)) if owned else []
    for i, eid in enumerate(victims):
        inv = p.invalidate(eid, f"c{i}")
        if inv.change is not None:
            assert inv.change.metadata == inv.row.metadata
        p._check()
    want = oracle.final_metadata(policy, events, set(victims) | never, max_time=3)
    assert row_metadata(p) == want
    q = Partition.from_state(policy, 3, msgpack.unpackb(msgpack.packb(p.to_state())))
    q._check()
    assert row_metadata(q) == want and q.checksum_sum() == p.checksum_sum()
    # a format-2 snapshot (before metadata): loads with none, and what comes after has it
    old = msgpack.unpackb(msgpack.packb(p.to_state()))
    old.pop("meta")
    old["format"] = 2
    for key in ("moffs", "marena", "meta_from"):
        old["journal"].pop(key)
    for key in ("meta", "moffs"):
        old["journal"]["store"].pop(key)
    r = Partition.from_state(policy, 3, old)
    r._check()
    assert row_metadata(r) == {pid: b"" for pid in want}
    more = [e._replace(event_id=f"again-{e.event_id}") for e in events[:5]]
    r.apply_columns(ScoreColumns.from_events(more, BOARD))
    r._check()
    stripped = [e._replace(metadata=b"") for e in events]  # what the format-2 journal knew
    assert row_metadata(r) == oracle.final_metadata(policy, stripped + more, set(victims) | never, max_time=3)


@settings(deadline=None, max_examples=120, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from([Policy.BEST_SCORE, Policy.FASTEST_TIME]), meta_streams(min_size=1, distinct_keys=True),
       st.randoms())
def test_best_metadata_is_independent_of_arrival_order_and_duplicates(policy, events, rnd):
    shuffled = events + rnd.sample(events, min(3, len(events)))
    rnd.shuffle(shuffled)
    a = applied(policy, events, 1000, tail=10**9)
    b = applied(policy, shuffled, rnd.choice([1, 2, 7]), tail=rnd.choice([1, 2, 10**9]))
    assert row_metadata(a) == row_metadata(b) == oracle.final_metadata(policy, events, max_time=3)


def test_redelivery_with_other_metadata_is_a_conflict_in_the_tail_and_on_disk():
    for tail in (10**9, 1):
        p = Partition(Policy.BEST_SCORE, 3, Journal(tail_rows=tail))
        ev = ScoreEvent(BOARD, "e", "p", 5, 1, 1, b'{"a":1}')
        assert p.apply(ev)[0] is Outcome.APPLIED_FIRST_SCORE
        p.apply(ScoreEvent(BOARD, "other", "q", 1, 1, 1))  # a flush in between when tail == 1
        assert p.apply(ev)[0] is Outcome.DUPLICATE_IGNORED
        assert p.apply(ev._replace(metadata=b'{"a":2}'))[0] is Outcome.REJECTED_EVENT_ID_CONFLICT
        assert p.apply(ev._replace(metadata=b""))[0] is Outcome.REJECTED_EVENT_ID_CONFLICT
        assert p.get("p").metadata == b'{"a":1}'


def test_a_new_best_without_metadata_clears_it_and_costs_nothing_without_any():
    p = Partition(Policy.BEST_SCORE, 3)
    p.apply(ScoreEvent(BOARD, "e1", "p", 5, 1, 1, b'{"a":1}'))
    assert p.get("p").metadata == b'{"a":1}' and p.get("p").change().metadata == b'{"a":1}'
    p.apply(ScoreEvent(BOARD, "e2", "p", 4, 1, 1, b'{"b":1}'))  # not better: keeps the best's
    assert p.get("p").metadata == b'{"a":1}'
    p.apply(ScoreEvent(BOARD, "e3", "p", 6, 1, 1))
    assert p.get("p").metadata is None and not p.meta
    p._check()
    # the checksum of rows without metadata is the one from before metadata existed
    plain = Partition(Policy.BEST_SCORE, 3)
    plain.apply(ScoreEvent(BOARD, "x", "p", 6, 1, 1))
    from engine.core.checksum import row_digest
    r = plain.get("p")
    assert plain.checksum_sum() == row_digest(r.player_id, r.value, r.achieved_at, r.status.value, r.row_version)
    with_meta = Partition(Policy.BEST_SCORE, 3)
    with_meta.apply(ScoreEvent(BOARD, "x", "p", 6, 1, 1, b"{}"))
    assert with_meta.checksum_sum() != plain.checksum_sum()

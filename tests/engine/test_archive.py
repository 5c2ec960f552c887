"""engine.archive: build + read round trip against a sorted() oracle, player
lookups (non-ASCII ids, shared prefixes, lone surrogates, absent players),
tied ranks, determinism, the trailer digest and format refusal."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine import checksum as checksum_mod
from engine.archive import ArchiveRows, ArchiveView, digest_ok, encode
from engine.errors import UnsupportedFormat
from engine.model import Policy, RowStatus
from engine.policy import key_for


def rows_of(items):
    """items: [(pid, value, achieved, submitted, row_version, active)]"""
    cols = list(zip(*items)) if items else [[], [], [], [], [], []]
    return ArchiveRows.of(list(cols[0]), *cols[1:])


def build(items, policy=Policy.BEST_SCORE, version=7, board="g:m:s:x") -> tuple[bytes, ArchiveView]:
    data = b"".join(encode(board, policy, version, rows_of(items)))
    return data, ArchiveView(data)


def oracle(items, policy):
    key = key_for(policy)
    ranked = sorted((it for it in items if it[5]), key=lambda it: key(it[1], it[2], it[3], it[0]))
    return ranked


def tied(ranked, i):
    return 1 + sum(1 for r in ranked if r[1] != ranked[i][1] and ranked.index(r) < i)


TRICKY = ["a", "ab", "abc", "abd", "ä", "a\u00e4", "日本", "日本語", "\U0001f600", "p\ud800x", "Z", "z", " x", "x" * 128]


def random_items(rng: random.Random, n: int, ids=None):
    ids = ids or [f"p{i}" for i in range(n)]
    return [(pid, rng.randrange(-3, 4), rng.randrange(3), rng.randrange(3), rng.randrange(1, 5), rng.random() < 0.8)
            for pid in ids]


@pytest.mark.parametrize("policy", list(Policy))
@pytest.mark.parametrize("seed", range(5))
def test_round_trip_matches_the_oracle(policy, seed):
    rng = random.Random(seed)
    items = random_items(rng, 40, ids=TRICKY + [f"q{i}" for i in range(30)])
    print("seed", seed)
    _, view = build(items, policy)
    view._check()
    ranked = oracle(items, policy)
    assert view.info.ranked == len(ranked) and len(view) == len(items)
    got = view.top(0, 1000)
    assert [(e.rank, e.player_id, e.value, e.achieved_at) for e in got] == [
        (i + 1, r[0], r[1], r[2]) for i, r in enumerate(ranked)]
    assert view.top(5, 3) == got[5:8]
    assert view.top(len(ranked), 10) == []
    for i in range(len(ranked)):
        assert view.tied_rank(i) == tied(ranked, i)
    for it in items:
        i = view.find(it[0])
        assert i >= 0
        p = view.player(7, i)
        assert (p.player_id, p.value, p.achieved_at, p.row_version) == (it[0], it[1], it[2], it[4])
        assert int(view.submitted[i]) == it[3]
        assert p.status is (RowStatus.ACTIVE if it[5] else RowStatus.INVALIDATED)
        assert p.rank == (ranked.index(it) + 1 if it[5] else None)


def test_lookups_of_tricky_and_absent_ids():
    rng = random.Random(1)
    items = random_items(rng, len(TRICKY), ids=TRICKY)
    _, view = build(items)
    for pid in TRICKY:
        assert view.player_id(view.find(pid)) == pid
    for absent in ["", "a ", "abcd", "日", "x" * 127, "p\ud800", "zz", "\U0001f601"]:
        assert view.find(absent) == -1
    assert view.find_many(TRICKY + ["nobody"]) == [view.find(p) for p in TRICKY] + [-1]


def test_invalidated_rows_follow_in_player_id_order_and_are_found():
    items = [("b", 5, 0, 0, 1, False), ("a", 9, 0, 0, 2, False), ("c", 1, 0, 0, 1, True)]
    _, view = build(items)
    assert [view.player_id(i) for i in range(3)] == ["c", "a", "b"]
    assert view.player(0, view.find("a")).rank is None
    assert view.subset(["a", "b", "c"])[0].player_id == "c" and len(view.subset(["a", "b", "c"])) == 1


def test_subset_ranks_locally_in_board_order():
    rng = random.Random(3)
    items = random_items(rng, 50)
    _, view = build(items, Policy.FASTEST_TIME)
    ranked = oracle(items, Policy.FASTEST_TIME)
    pick = [it[0] for it in rng.sample(items, 20)] + ["absent", items[0][0]]
    want = [r[0] for r in ranked if r[0] in set(pick)]
    got = view.subset(pick)
    assert [e.player_id for e in got] == want
    assert [e.rank for e in got] == list(range(1, len(want) + 1))


def test_same_rows_in_any_order_give_the_same_bytes():
    rng = random.Random(5)
    items = random_items(rng, 60, ids=TRICKY + [f"q{i}" for i in range(46)])
    a, _ = build(items)
    rng.shuffle(items)
    b, _ = build(items)
    assert a == b


def test_checksum_is_the_api_checksum_of_the_rows():
    rng = random.Random(2)
    items = random_items(rng, 30)
    _, view = build(items)
    total = sum(checksum_mod.row_digest(pid, v, a, "ACTIVE" if on else "INVALIDATED", rv)
                for pid, v, a, _s, rv, on in items)
    assert view.info.checksum == checksum_mod.render(total)


def test_digest_detects_damage_and_a_newer_format_is_refused():
    data, view = build(random_items(random.Random(4), 20))
    read = lambda b: (lambda at, n: b[at:at + n])  # noqa: E731
    assert digest_ok(read(data), len(data))
    assert digest_ok(read(data), len(data), chunk=7)
    bad = bytearray(data)
    bad[len(bad) // 2] ^= 1
    assert not digest_ok(read(bytes(bad)), len(bad))
    assert not digest_ok(read(data[:-1]), len(data) - 1)
    newer = data.replace(b'"format":1', b'"format":9', 1)
    with pytest.raises(UnsupportedFormat):
        ArchiveView(newer)
    with pytest.raises(UnsupportedFormat):
        ArchiveView(b"NOTANARCHIVE" + data[12:])


def test_empty_board():
    _, view = build([])
    assert len(view) == 0 and view.top(0, 10) == [] and view.find("a") == -1 and view.subset(["a"]) == []


def test_extreme_values_order_without_overflow():
    lo, hi = -(1 << 63), (1 << 63) - 1
    items = [("a", lo, 0, 0, 1, True), ("b", hi, 0, 0, 1, True), ("c", 0, 0, 0, 1, True)]
    _, view = build(items)
    assert [e.player_id for e in view.top(0, 3)] == ["b", "c", "a"]
    _, view = build(items, Policy.FASTEST_TIME)
    assert [e.player_id for e in view.top(0, 3)] == ["a", "c", "b"]


def test_metadata_column_round_trips():
    rows = rows_of([("a", 1, 0, 0, 1, True), ("b", 2, 0, 0, 1, True), ("c", 0, 0, 0, 1, False)])
    rows = rows._replace(metadata=[b'{"k":1}', None, "{\"\u00e9\":2}".encode()])
    view = ArchiveView(b"".join(encode("g:m:s:x", Policy.BEST_SCORE, 1, rows)))
    assert view.metadata(view.find("a")) == b'{"k":1}'
    assert view.metadata(view.find("b")) is None
    assert view.metadata(view.find("c")) == "{\"\u00e9\":2}".encode()


@settings(deadline=None, max_examples=60)
@given(st.lists(st.tuples(st.text(min_size=1, max_size=6), st.integers(-3, 3), st.integers(0, 2), st.integers(0, 2),
                          st.integers(1, 3), st.booleans()), max_size=30, unique_by=lambda t: t[0]),
       st.sampled_from(list(Policy)))
def test_property_archive_agrees_with_the_oracle(items, policy):
    _, view = build(items, policy)
    view._check()
    ranked = oracle(items, policy)
    assert [e.player_id for e in view.top(0, 100)] == [r[0] for r in ranked]
    for i in range(len(ranked)):
        assert view.tied_rank(i) == tied(ranked, i)


def test_rows_from_partitions_wire_columns_equal_the_whole_board():
    """Router side: the rows op answers each partition's columns (engine.partition
    Partition.columns); together they encode to the same bytes as the whole board."""
    from engine.archive import rows_from_wire
    from engine.columns import ScoreColumns
    from engine.partition import Partition

    rng = random.Random(8)
    items = random_items(rng, 40, ids=TRICKY + [f"q{i}" for i in range(26)])
    parts = [Partition(Policy.BEST_SCORE, 10**9) for _ in range(3)]
    for k, p in enumerate(parts):
        mine = [it for j, it in enumerate(items) if j % 3 == k]
        p.apply_columns(ScoreColumns.from_events([_event(it) for it in mine], "g:m:s:x"))
    wire = [p.columns() for p in parts] + [Partition(Policy.BEST_SCORE, 10**9).columns()]  # an empty partition too
    rows = rows_from_wire(wire)
    assert rows.n == len(items)
    got = b"".join(encode("g:m:s:x", Policy.BEST_SCORE, 7, rows))
    want = b"".join(encode("g:m:s:x", Policy.BEST_SCORE, 7, rows_of([(pid, v, a, s, 1, True)
                                                                      for pid, v, a, s, _, _ in items])))
    assert got == want
    assert rows_from_wire([]).n == 0


def _event(it):
    from engine.model import ScoreEvent

    pid, v, a, s, _, _ = it
    return ScoreEvent("g:m:s:x", f"e-{pid}", pid, v, a, s)

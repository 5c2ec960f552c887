"""engine.core.archive: build + read round trip against a sorted() oracle, player
lookups (non-ASCII ids, shared prefixes, lone surrogates, absent players),
tied ranks, determinism, the trailer digest and format refusal."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.core import checksum as checksum_mod
from engine.core.archive import ArchiveRows, ArchiveView, digest_ok, encode
from engine.core.errors import UnsupportedFormat
from engine.core.model import Policy, RowStatus
from engine.core.policy import key_for


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
    newer = data.replace(b'"format":2', b'"format":9', 1)
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
    """Router side: the rows op answers each partition's columns (engine.core.partition
    Partition.columns); together they encode to the same bytes as the whole board."""
    from engine.core.archive import rows_from_wire
    from engine.core.columns import ScoreColumns
    from engine.core.partition import Partition

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
    from engine.core.model import ScoreEvent

    pid, v, a, s, _, _ = it
    return ScoreEvent("g:m:s:x", f"e-{pid}", pid, v, a, s)


# ------------------------------------------------------------------ history


def _archive_with_history(parts, policy, board="g:m:s:x"):
    """What the router builds: every partition's rows and whole journal (engine.router.control.BoardControl._history_of)."""
    import numpy as np

    from engine.core.archive import ArchiveHistory, rows_from_wire

    rows = rows_from_wire([p.columns() for p in parts])
    hist = ArchiveHistory.of_parts([(*p.players.bytes_of(np.arange(len(p.players))), p.journal.columns(0, len(p.journal)))
                                    for p in parts])
    data = b"".join(encode(board, policy, 9, rows, hist))
    return data, ArchiveView(data)


def _live_history(parts, pid):
    from engine.core.model import HistoryEntry

    for p in parts:
        got = p.player_history(pid)
        if got:
            return [HistoryEntry(h[0], h[1], h[2], h[3], h[5], h[6], h[7]) for h in got]
    return []


def _play(policy, seed, n_parts=3, tail=4, ids=None, events=300):
    """Partitions driven like a board: batches with redeliveries, conflicts and
    held events (verdicts decided before apply), implausible times, metadata on
    some events, invalidations (some repeated), decisions applied and rejected."""
    import numpy as np

    from engine.core import records as R
    from engine.core.columns import ScoreColumns
    from engine.core.journal import Journal
    from engine.core.model import Outcome, ScoreEvent
    from engine.core.partition import KIND_DECISION, Partition
    from engine.core.placement import part_of

    rng = random.Random(seed)
    print("seed", seed)
    ids = ids or TRICKY + [f"q{i}" for i in range(10)] + ["only-held", "only-dup"]
    parts = [Partition(policy, 50, Journal(tail_rows=tail)) for _ in range(n_parts)]
    verdicts_of = [R.CODE[Outcome.DUPLICATE_IGNORED], R.CODE[Outcome.REJECTED_EVENT_ID_CONFLICT],
                   R.CODE[Outcome.HELD_FOR_CORRECTION]]
    applied: list[tuple[int, str]] = []
    k = 0
    while k < events:
        batch = []
        for _ in range(rng.randrange(1, 12)):
            pid = rng.choice(ids)
            meta = b'{"k":%d,"s":"\xc3\xa9"}' % k if rng.random() < 0.4 else b""
            batch.append((ScoreEvent("g:m:s:x", f"e{k}-{pid}", pid, rng.randrange(-5, 60), rng.randrange(5),
                                     rng.randrange(5), meta),
                          verdicts_of[2] if pid == "only-held" else verdicts_of[0] if pid == "only-dup"
                          else rng.choice(verdicts_of) if rng.random() < 0.2 else R.APPLY))
            k += 1
        by_part: dict = {}
        for ev, v in batch:
            by_part.setdefault(part_of(ev.player_id, n_parts), []).append((ev, v))
        for n, got in by_part.items():
            parts[n].apply_columns(ScoreColumns.from_events([e for e, _ in got]),
                                   np.array([v for _, v in got], np.uint8))
            applied += [(n, e.event_id) for e, v in got if v == R.APPLY]
        if rng.random() < 0.3 and applied:
            n, eid = rng.choice(applied)
            if parts[n].owns_event(eid):  # an implausible time never reached the comparator
                parts[n].invalidate(eid, f"corr-{k}")
        if rng.random() < 0.1:
            pid = rng.choice([i for i in ids if not i.startswith("only-")])
            ev = ScoreEvent("g:m:s:x", f"held-{k}", pid, rng.randrange(60), 1, 1, b'{"d":1}')
            p = parts[part_of(pid, n_parts)]
            p.apply(ev, kind=KIND_DECISION) if rng.random() < 0.5 else p.record_rejection(ev)
    return parts


@pytest.mark.parametrize("policy", list(Policy))
@pytest.mark.parametrize("seed", range(4))
def test_history_round_trips_every_players_events(policy, seed):
    parts = _play(policy, seed)
    data, view = _archive_with_history(parts, policy)
    view._check()
    ids = TRICKY + [f"q{i}" for i in range(10)] + ["only-held", "only-dup"]
    total = 0
    for pid in ids + ["never", "q", "日", "p\ud800", "only-hel"]:
        want = _live_history(parts, pid)
        assert view.history(pid) == want, pid
        total += len(want)
    assert total == view.history_events == sum(len(p.journal) for p in parts)
    hist = [h for pid in ids for h in view.history(pid)]
    assert any(h.invalidated for h in hist) and any(h.metadata for h in hist)
    assert {"DUPLICATE_IGNORED", "REJECTED_EVENT_ID_CONFLICT", "HELD_FOR_CORRECTION"} <= {h.outcome for h in hist}
    # a player whose every event was held or a duplicate has no row, only a history
    for pid in ("only-held", "only-dup"):
        assert view.history(pid) and view.find(pid) == -1 and view.history_slot(pid) >= len(view)
    # the history section is part of the bytes: the same journal gives the same archive
    again, _ = _archive_with_history(parts, policy)
    assert again == data


def test_history_of_many_events_per_player_and_players_without_events():
    from engine.core.journal import Journal
    from engine.core.model import Policy as P, ScoreEvent
    from engine.core.partition import Partition

    p = Partition(P.CUMULATIVE, 10**9, Journal(tail_rows=64))
    for k in range(40):  # 2,000 events of one player, flushed to the journal's store in 64-row chunks
        p.apply_columns(__import__("engine.core.columns", fromlist=["ScoreColumns"]).ScoreColumns.from_events(
            [ScoreEvent("g:m:s:x", f"e{k}-{i}", "whale", i, k, k, b'{"i":%d}' % i if i % 3 else b"")
             for i in range(50)]))
    p.invalidate("e3-7", "c-1")
    p.invalidate("e3-7", "c-2")  # already invalidated: audited again
    _, view = _archive_with_history([p], P.CUMULATIVE)
    got = view.history("whale")
    assert got == _live_history([p], "whale") and len(got) == 2002
    assert [h.outcome for h in got[-2:]] == ["INVALIDATED", "ALREADY_INVALIDATED"]
    assert [h.event_id for h in got if h.invalidated] == ["e3-7"]
    # rows without events cannot exist on a shard, but an archive of rows and an empty history answers []
    rows = rows_of([("a", 1, 0, 0, 1, True), ("b", 2, 0, 0, 1, False)])
    from engine.core.archive import ArchiveHistory
    from engine.core.journal import JournalColumns
    import numpy as np

    empty = ArchiveHistory(np.zeros(0, np.uint8), np.zeros(1, np.int64), np.zeros(0, np.int64), JournalColumns.empty())
    view = ArchiveView(b"".join(encode("g:m:s:x", Policy.BEST_SCORE, 1, rows, empty)))
    view._check()
    assert view.history("a") == [] and view.history("zz") == [] and view.history_events == 0


def test_an_archive_without_history_says_so():
    _, view = build(random_items(random.Random(6), 10))
    assert view.hist is None and view.history("p1") is None and view.history_events == 0


def test_history_from_partitions_split_in_chunks_equals_one_read():
    """The router reads each journal in chunks (JournalColumns.concat of
    Journal.columns windows): any chunking gives the same archive."""
    import numpy as np

    from engine.core.archive import ArchiveHistory, rows_from_wire
    from engine.core.journal import JournalColumns

    parts = _play(Policy.BEST_SCORE, 11, tail=5)
    rows = rows_from_wire([p.columns() for p in parts])
    whole = b"".join(encode("g:m:s:x", Policy.BEST_SCORE, 9, rows, ArchiveHistory.of_parts(
        [(*p.players.bytes_of(np.arange(len(p.players))), p.journal.columns(0, len(p.journal))) for p in parts])))
    for step in (1, 3, 7, 1000):
        chunked = []
        for p in parts:
            cols = [JournalColumns.from_wire(p.history_chunk(s, step)[0].to_wire())
                    for s in range(0, len(p.journal), step)]
            chunked.append((*p.players.bytes_of(np.arange(len(p.players))), JournalColumns.concat(cols)))
        assert b"".join(encode("g:m:s:x", Policy.BEST_SCORE, 9, rows, ArchiveHistory.of_parts(chunked))) == whole

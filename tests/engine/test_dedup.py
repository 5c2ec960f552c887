"""engine.core.dedup: the array-backed dedup table against a dict reference model."""

from __future__ import annotations

import random
from collections import OrderedDict

import msgpack
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.core import records as R
from engine.core.admission import Admission
from engine.core.columns import ScoreColumns
from engine.core.dedup import (
    DedupTable,
    DedupWindow,
    Seen,
    build_grown,
    content_fingerprint32,
    fingerprint,
    id_fingerprint,
)
from engine.core.model import BoardSpec, Outcome, Policy, ScoreEvent

FP = fingerprint("p", 1, 2, 2)
OTHER = fingerprint("p", 2, 2, 2)


class Model:
    """The dict window this table replaced, over the 32-bit content folds."""

    def __init__(self, retention: int):
        self.retention = retention
        self.d: OrderedDict[str, int] = OrderedDict()

    def check(self, event_id: str, fp: int) -> Seen:
        known = self.d.get(event_id)
        if known is None:
            return Seen.NEW
        return Seen.DUPLICATE if known == content_fingerprint32(fp) else Seen.CONFLICT

    def remember(self, event_id: str, fp: int) -> None:
        self.d[event_id] = content_fingerprint32(fp)  # a known id keeps its place
        if len(self.d) > self.retention:
            self.d.popitem(last=False)

    def state(self, board_id: str) -> bytes:
        rows = []
        for event_id, c in self.d.items():
            f = id_fingerprint(board_id, event_id)
            rows.append([f & 0xFFFFFFFF, (f >> 32) & 0xFFFFFFFF, f >> 64, c])
        return np.array(rows, dtype="<u4").reshape(-1, 4).tobytes()


def same(t: DedupTable, m: Model, universe) -> None:
    t._check()
    assert len(t) == len(m.d)
    assert t.to_state()["entries"] == m.state(t.board_id)  # same ids, same order, same content
    for event_id in universe:
        assert (event_id in t) == (event_id in m.d)


# ------------------------------------------------------------------ units


def test_duplicate_and_conflict():
    t = DedupTable(10, "b")
    assert t.check("e1", FP) is Seen.NEW
    t.remember("e1", FP)
    assert t.check("e1", FP) is Seen.DUPLICATE
    assert t.check("e1", OTHER) is Seen.CONFLICT
    assert t.check("e2", FP) is Seen.NEW
    assert "e1" in t and "e2" not in t and len(t) == 1
    t._check()


def test_eviction_is_oldest_first_at_the_retention():
    t = DedupTable(3, "b")
    for i in range(5):
        t.remember(f"e{i}", FP)
        t._check()
    assert [f"e{i}" in t for i in range(5)] == [False, False, True, True, True]
    # remembering a known id again keeps its place (dict assignment): e2 is still the oldest
    t.remember("e2", OTHER)
    t.remember("e5", FP)
    assert "e2" not in t and "e3" in t and len(t) == 3
    assert t.capacity == 3


def test_evicted_counts_what_the_retention_dropped_across_snapshots():
    """``evicted`` is 0 only while the table holds every id ever admitted
    (Board then skips the journal's search for redeliveries older than the
    window): retention evictions count, and a snapshot keeps the count (one
    that did not record it counts as 1)."""
    t = DedupTable(3, "b")
    for i in range(3):
        t.remember(f"e{i}", FP)
    t.remember("e1", OTHER)  # a known id: no eviction
    assert t.evicted == 0
    for i in range(3, 5):
        t.remember(f"e{i}", FP)
    assert t.evicted == 2 and "e0" not in t and "e1" not in t
    state = t.to_state()
    assert DedupTable.from_state(3, state, "b").evicted == 2
    assert DedupTable.from_state(1, state, "b").evicted == 4  # a smaller retention drops two more
    fresh = DedupTable(3, "b")
    fresh.remember("x", FP)
    assert DedupTable.from_state(3, fresh.to_state(), "b").evicted == 0
    assert DedupTable.from_state(3, {"v": 1, "entries": fresh.to_state()["entries"]}, "b").evicted == 1
    assert DedupTable.from_state(3, ["x", FP], "b").evicted == 1


def test_a_table_at_its_retention_makes_room_instead_of_growing():
    """A batch remembered on a full table evicts its oldest ids (memory must
    not grow with events); the journal recognises ids older than the window."""
    t = DedupTable(4, "b")
    t.remember_many([f"e{i}" for i in range(4)], [FP] * 4)
    assert t.capacity == 4 and t.evicted == 0
    t.remember_many(["n1", "n2"], [FP, FP])
    assert t.capacity == 4 and len(t) == 4 and t.evicted == 2
    assert [e in t for e in ("e0", "e1", "e2", "e3", "n1", "n2")] == [False, False, True, True, True, True]
    t._check()


def test_check_many_sees_duplicates_within_the_batch():
    t = DedupTable(10, "b")
    t.remember("old", FP)
    ids = ["old", "old", "n1", "n1", "n1", "n2", "", "n2"]
    fps = [FP, OTHER, FP, FP, OTHER, FP, FP, OTHER]
    seen = t.check_many(ids, fps)
    assert seen.dtype == np.int8
    assert [Seen(int(v)) for v in seen] == [
        Seen.DUPLICATE, Seen.CONFLICT, Seen.NEW, Seen.DUPLICATE, Seen.CONFLICT, Seen.NEW, Seen.NEW, Seen.CONFLICT,
    ]
    assert len(t) == 1  # changes nothing
    assert len(t.check_many([], [])) == 0
    with pytest.raises(ValueError):
        t.check_many(["a"], [])


def test_remember_many_is_remember_in_order():
    t, m = DedupTable(4, "b"), Model(4)
    ids = [f"e{i % 7}" for i in range(40)]
    fps = [fingerprint("p", i % 3, 0, 0) for i in range(40)]
    t.remember_many(ids, np.array(fps, dtype=np.uint64))
    for e, f in zip(ids, fps):
        m.remember(e, f)
    same(t, m, set(ids))


def test_state_round_trip_through_msgpack():
    t = DedupTable(5, "board-é")
    for i in range(8):
        t.remember(f"e{i}", fingerprint("p", i, 0, 0))
    state = msgpack.unpackb(msgpack.packb(t.to_state()), raw=False)
    assert isinstance(state["entries"], bytes) and len(state["entries"]) == 5 * 16
    u = DedupTable.from_state(5, state, "board-é")
    assert u.to_state() == t.to_state()
    u._check()
    assert u.check("e7", fingerprint("p", 7, 0, 0)) is Seen.DUPLICATE
    u.remember("e8", FP)  # a loaded table grows and evicts as usual
    assert "e3" not in u and len(u) == 5
    # a smaller retention keeps the newest ids
    v = DedupTable.from_state(2, state, "board-é")
    assert len(v) == 2 and "e6" in v and "e7" in v and "e5" not in v
    # an empty table round trips, and allocates nothing
    e = DedupTable.from_state(5, DedupTable(5).to_state())
    assert len(e) == 0 and e.capacity == 0


def test_state_rejects_unknown_versions_and_repeated_ids():
    with pytest.raises(ValueError):
        DedupTable.from_state(5, {"v": 99, "entries": b""})
    t = DedupTable(5)
    t.remember("x", FP)
    entries = t.to_state()["entries"]
    with pytest.raises(ValueError):
        DedupTable.from_state(5, {"v": 1, "entries": entries * 2})


def test_legacy_dict_window_state_loads():
    legacy = ["e1", FP, "e2", OTHER, "e3", FP]  # what DedupWindow.to_state wrote before
    t = DedupTable.from_state(2, legacy, "b")
    assert len(t) == 2 and "e1" not in t
    assert t.check("e2", OTHER) is Seen.DUPLICATE and t.check("e3", OTHER) is Seen.CONFLICT
    t._check()
    # through Admission, as a router snapshot written before the table holds it
    spec = BoardSpec("b", Policy.BEST_SCORE)
    a = Admission.from_state(spec, 10, {"state": "OPEN", "freeze_position": None, "dedup": legacy, "held": [], "decided": []})
    cols = ScoreColumns.from_events([ScoreEvent("b", "e2", "p", 2, 2, 2)], "b")
    assert a.decide_columns(cols).verdicts.tolist() == [R.CODE[Outcome.DUPLICATE_IGNORED]]


def test_unicode_long_empty_and_surrogate_ids():
    ids = ["", "é", "𝔘", "a\u0301", "\ud800", "x" * 100_000, "x" * 100_001, "\x00", "\x1f"]
    t = DedupTable(100, "b")
    for i, e in enumerate(ids):
        assert t.check(e, FP) is Seen.NEW
        t.remember(e, fingerprint("p", i, 0, 0))
    for i, e in enumerate(ids):
        assert t.check(e, fingerprint("p", i, 0, 0)) is Seen.DUPLICATE
        assert t.check(e, OTHER) is Seen.CONFLICT
    # the batch path hashes the same bytes
    assert list(t.check_many(ids, [fingerprint("p", i, 0, 0) for i in range(len(ids))])) == [1] * len(ids)
    t._check()


def test_ids_are_keyed_by_board():
    assert id_fingerprint("a", "e1") != id_fingerprint("b", "e1")
    a = DedupTable(5, "a")
    a.remember("e1", FP)
    assert "e1" not in DedupTable.from_state(5, a.to_state(), "b")


def test_fingerprints_are_pinned():
    # Snapshots store these: they must not change across versions or processes.
    assert id_fingerprint("g:m:s", "evt-1") == 0xF84879127B22880ACAE67721
    assert content_fingerprint32(fingerprint("p", 1, 2, 3)) == 0xF4DCA79D ^ 0x0276F1CA == 0xF6AA5657
    t = DedupTable(5, "g:m:s")
    t.remember("evt-1", fingerprint("p", 1, 2, 3))
    assert t.to_state()["entries"].hex() == "2177e6ca0a88227b127948f85756aaf6"


def test_allocation_is_lazy_and_bounded_by_the_retention():
    t = DedupTable(5_000_000, "b")
    assert t.nbytes < 100
    for i in range(10):
        t.remember(f"e{i}", FP)
    assert t.capacity == 64 and t.nbytes < 2_000
    t = DedupTable(1000, "b")
    t.remember_many([f"e{i}" for i in range(3000)], [FP] * 3000)
    assert len(t) == 1000 and t.capacity == 1000
    assert t.nbytes <= 24 * 1000 + 64  # 16 B ring + 8 B of slots per id, plus meta
    t._check()


def _tables(t: DedupTable) -> tuple[bytes, bytes, list]:
    n = len(t)
    return t._ent[:n].tobytes(), t._slots.tobytes(), t._meta.tolist()


@settings(deadline=None, max_examples=60)
@given(first=st.integers(48, 200), added=st.lists(st.integers(0, 400), max_size=120),
       retention=st.sampled_from([100, 150, 1000]))
def test_a_growth_built_ahead_equals_growing_inline(first, added, retention):
    """Ids remembered (new ones, and known ids with new content) between the plan and the swap: the
    table then is the one an inline growth gives, slot for slot, and still behaves as the dict window."""
    ahead, inline, m = DedupTable(retention, "b"), DedupTable(retention, "b"), Model(retention)
    for t in (ahead, inline, m):
        for i in range(first):
            t.remember(f"e{i}", FP)
    plan = ahead.grow_plan()
    if ahead.capacity >= retention or len(ahead) < 0.75 * ahead.capacity:
        assert plan is None
        return
    assert plan is not None and plan.capacity > ahead.capacity
    built = build_grown(plan)
    room = ahead.capacity - len(ahead)
    for k, i in enumerate(added[:room]):  # no more than fit: a ring that fills grows inline (the next test)
        for t in (ahead, inline, m):
            t.remember(f"e{i}", OTHER if k % 2 else FP)
    assert ahead.finish_grow(plan, built)
    inline._reshape(plan.capacity)
    assert _tables(ahead) == _tables(inline)
    same(ahead, m, [f"e{i}" for i in range(401)])
    for i in range(400, 400 + plan.capacity):  # and it goes on as any table does, to the retention
        ahead.remember(f"e{i}", FP)
        m.remember(f"e{i}", FP)
    same(ahead, m, [f"e{i}" for i in range(400, 400 + plan.capacity)])


def test_a_growth_built_ahead_is_dropped_when_stale():
    """A ring rebuilt (grown inline because it filled first) or an id rewritten (an erasure's rekey)
    after the plan: the build is stale, the swap refused, and the table is left as it was."""
    t = DedupTable(10_000, "b")
    t.remember_many([f"e{i}" for i in range(100)], [FP] * 100)
    assert t.capacity == 128
    plan = t.grow_plan()
    assert plan is not None and plan.n == 100 and plan.capacity == 256
    built = build_grown(plan)
    t.remember_many([f"x{i}" for i in range(40)], [FP] * 40)  # fills the ring: grows inline
    assert t.capacity == 256
    before = _tables(t)
    assert not t.finish_grow(plan, built) and _tables(t) == before
    t._check()
    t2 = DedupTable(10_000, "b")
    t2.remember_many([f"e{i}" for i in range(100)], [FP] * 100)
    plan = t2.grow_plan()
    built = build_grown(plan)
    old = t2.words_many(["e3"])
    assert t2.rekey(old, np.array([[1, 2, 3]], np.uint32)) == 1
    before = _tables(t2)
    assert not t2.finish_grow(plan, built) and _tables(t2) == before and "e3" not in t2
    t2._check()
    assert t2.finish_grow(t2.grow_plan(), build_grown(t2.grow_plan())) and t2.capacity == 256
    t2._check()


def test_no_growth_is_planned_below_three_quarters_or_at_the_retention():
    t = DedupTable(200, "b")
    assert t.grow_plan() is None  # empty
    t.remember_many([f"e{i}" for i in range(47)], [FP] * 47)
    assert t.capacity == 64 and t.grow_plan() is None
    t.remember("e47", FP)
    assert t.grow_plan() is not None
    t.remember_many([f"f{i}" for i in range(200)], [FP] * 200)
    assert t.capacity == 200 and t.grow_plan() is None  # at the retention: it evicts, never grows


def test_dedup_window_is_the_table():
    assert DedupWindow is DedupTable


def test_seeded_random_run_against_the_model():
    seed = random.randrange(1 << 30)
    print(f"seed {seed}")
    rng = random.Random(seed)
    t, m = DedupTable(50, "b"), Model(50)
    universe = [f"e{i}" for i in range(120)]
    fps = [fingerprint("p", i, 0, 0) for i in range(3)]
    for step in range(20_000):
        e, f = rng.choice(universe), rng.choice(fps)
        r = rng.random()
        if r < 0.6:
            assert t.check(e, f) is m.check(e, f), (seed, step)
            t.remember(e, f)
            m.remember(e, f)
        else:
            assert t.check(e, f) is m.check(e, f), (seed, step)
        if step % 1000 == 0:
            same(t, m, universe)
    same(t, m, universe)


# ------------------------------------------------------------------ property

ids = st.sampled_from(["a", "b", "c", "d", "e", "f", "g", "h", "", "é", "𝔘"])
fps = st.sampled_from([FP, OTHER, 0, (1 << 64) - 1, 1 << 32 | 1])  # the last two fold to the same 32 bits
ops = st.one_of(
    st.tuples(st.just("remember"), ids, fps),
    st.tuples(st.just("check"), ids, fps),
    st.tuples(st.just("check_many"), st.lists(st.tuples(ids, fps), max_size=6), fps),
    st.tuples(st.just("remember_many"), st.lists(st.tuples(ids, fps), max_size=6), fps),
    st.tuples(st.just("reload"), ids, fps),
)


@settings(deadline=None, max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(retention=st.integers(1, 6), steps=st.lists(ops, max_size=60))
def test_table_behaves_as_the_dict_window(retention, steps):
    t, m = DedupTable(retention, "board"), Model(retention)
    universe = ["a", "b", "c", "d", "e", "f", "g", "h", "", "é", "𝔘", "z"]
    for op, arg, fp in steps:
        if op == "remember":
            t.remember(arg, fp)
            m.remember(arg, fp)
        elif op == "check":
            assert t.check(arg, fp) is m.check(arg, fp)
        elif op == "check_many":
            batch = [e for e, _ in arg]
            got = [Seen(int(v)) for v in t.check_many(batch, [f for _, f in arg])]
            shadow = Model(1 << 30)
            shadow.d = OrderedDict(m.d)
            want = []
            for e, f in arg:
                want.append(shadow.check(e, f))
                if want[-1] is Seen.NEW:
                    shadow.remember(e, f)
            assert got == want
        elif op == "remember_many":
            t.remember_many([e for e, _ in arg], [f for _, f in arg])
            for e, f in arg:
                m.remember(e, f)
        elif op == "reload":
            t = DedupTable.from_state(retention, msgpack.unpackb(msgpack.packb(t.to_state())), "board")
        same(t, m, universe)

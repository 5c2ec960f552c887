"""engine.core.players: ids as UTF-8 arenas, interning (staged lookups) against a
dict, and ids decoded only when read."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.core.partition import distinct
from engine.core.players import BatchIds, PlayerTable, encode_ids

# ids that share long prefixes, are empty, hold NUL (the separator encode_ids tries first),
# are non-ASCII or lone surrogates (kept, as they order by code point)
IDS = st.lists(st.one_of(st.sampled_from(["", "\x00", "a\x00b", "p-0001", "p-00010", "é", "\ud800x", "日本"]),
                         st.text(max_size=12)), max_size=30)


def _reference(ids: list[str]) -> tuple[bytes, list[int]]:
    enc = [s.encode("utf-8", "surrogatepass") for s in ids]
    return b"".join(enc), np.concatenate([[0], np.cumsum([len(e) for e in enc], dtype=np.int64)]).tolist()


@settings(max_examples=300, deadline=None)
@given(IDS)
def test_encode_ids_is_the_concatenated_utf8_with_offsets(ids):
    buf, offs = encode_ids(ids)
    raw, bounds = _reference(ids)
    assert buf.tobytes() == raw and offs.tolist() == bounds
    assert buf.dtype == np.uint8 and buf.flags.writeable  # numba compiles read-only arrays separately


@settings(max_examples=150, deadline=None)
@given(st.lists(IDS, min_size=1, max_size=6))
def test_interning_in_batches_matches_a_dict(batches):
    """Indexes are dense and in order of first appearance, the same id always
    gets the same index, and lookups find exactly the interned ids; a table
    that starts at 128 slots makes first slots collide and probe runs form."""
    t, model = PlayerTable(), {}
    for ids in batches:
        unknown = [i for i in ids if i not in model]
        looked = t.lookup(ids).tolist()
        assert looked == [model.get(i, -1) for i in ids]
        got = t.intern(ids).tolist()
        for i in ids:
            model.setdefault(i, len(model))
        assert got == [model[i] for i in ids]
        assert len(t) == len(model) and (not unknown or max(got) == len(model) - 1)
    assert [t.id_of(k) for k in range(len(t))] == list(model)
    names = t.names(np.arange(len(t), dtype=np.int32))
    assert len(names) == len(t) and list(names) == list(model) and names[1:3] == list(model)[1:3]


def test_batch_ids_encode_players_and_events():
    ids = BatchIds.of(["p1", "é"], ["e1", "e22"])
    assert ids.players.tobytes() == "p1é".encode() and ids.player_offs.tolist() == [0, 2, 4]
    assert ids.events.tobytes() == b"e1e22" and ids.event_offs.tolist() == [0, 2, 5]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 2**31 - 1) | st.integers(0, 20), max_size=300))
def test_distinct_is_first_appearance_order(values):
    a = np.array(values, np.int32)
    assert distinct(a).tolist() == list(dict.fromkeys(values))


def test_a_scrubbed_player_is_unreachable_and_comes_back_as_a_new_index():
    """PlayerTable.scrub (issue 28): the id's bytes become zero bytes, the old
    id is not found, interning it again gives a new index; a legitimate
    ``"\\x00"`` is not confused with a scrubbed one-byte id; growth (a rehash)
    and a snapshot keep scrubbed players out of the slot table."""
    t = PlayerTable()
    ids = ["p-ava", "é-ben", "c", "\x00", "p-dan"]
    t.intern(ids)
    t.scrub(np.array([0, 2, 1]))
    t._check()
    assert t.lookup(ids).tolist() == [-1, -1, -1, 3, 4]
    assert t.id_of(0) == "\x00" * 5 and t.id_of(1) == "\x00" * 6 and t.id_of(2) == "\x00"
    assert t.arena[: t.offs[3]].tobytes() == bytes(12)
    t.scrub(np.array([2, 0]))  # again: nothing changes
    t._check()
    assert t.intern(["c", "p-ava"]).tolist() == [5, 6]  # new players, new indexes
    assert t.lookup(["\x00", "c"]).tolist() == [3, 5]
    state = t.to_state()
    back = PlayerTable.from_state(state)
    back._check()
    assert back.to_state() == state and back.lookup(ids + ["c"]).tolist() == [6, -1, 5, 3, 4, 5]
    more = [f"q{k}" for k in range(3000)]  # the slot table doubles several times
    assert back.intern(more).tolist() == list(range(7, 3007))
    back._check()
    assert back.lookup(["é-ben", "\x00" * 6]).tolist() == [-1, -1]
    assert PlayerTable().to_state().keys() == {"arena", "offs"}  # a table never scrubbed keeps its state as it was


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(IDS, st.lists(st.integers(0, 60), max_size=8)), min_size=1, max_size=6))
def test_interning_and_scrubbing_match_a_dict(steps):
    """Batches of interning, each followed by scrubbing some indexes, against
    a dict of the live ids: lookups find exactly the live ones, every index
    is new when first interned, scrubbed players hold zero bytes; the slot
    table (128 slots first: collisions, probe runs, backward shifts) checks
    after each step and after a snapshot."""
    t, live, n, gone = PlayerTable(), {}, 0, set()
    for ids, victims in steps:
        got = t.intern(ids).tolist()
        for i, g in zip(ids, got):
            if i not in live:
                assert g == n
                live[i], n = n, n + 1
            assert g == live[i]
        idx = [v for v in victims if v < n]
        t.scrub(np.array(idx, np.int64))
        gone |= set(idx)
        live = {i: k for i, k in live.items() if k not in gone}
        t._check()
        assert len(t) == n and t.lookup(list(live)).tolist() == list(live.values())
        assert all(set(t.id_of(k)) <= {"\x00"} for k in gone)
    back = PlayerTable.from_state(t.to_state())
    back._check()
    assert back.lookup(list(live)).tolist() == list(live.values()) and back.gone.tolist() == sorted(gone)

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

"""Stable placement: the column form agrees with the id-by-id one."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from engine.core.placement import part_of, parts_of


@settings(max_examples=200)
@given(st.lists(st.text(min_size=1, max_size=12), max_size=30), st.integers(1, 9))
def test_parts_of_is_part_of_for_each_id(ids, shards):
    got = parts_of(ids, shards)
    assert got.dtype.name == "int64" and got.tolist() == [part_of(p, shards) for p in ids]


def test_parts_of_with_a_lone_surrogate_hashes_as_part_of():
    ids = ["p\ud800", "p-ava", "\U0001f600"]
    assert parts_of(ids, 7).tolist() == [part_of(p, 7) for p in ids]

"""engine.core.export: blocks, the k-way merge of sorted column chunks, tied ranks,
each against a brute-force oracle (sorted() of the union)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.core.export import Block, Chunk, Merge, TiedRanks, concat

IDS = st.text(alphabet=st.sampled_from(["a", "b", "z", "é", "ü", "✓", "😀", "0", "~"]), min_size=1, max_size=4)


def _key(row):
    primary, tie, pid = row[0], row[1], row[4]
    return (primary, tie, pid.encode("utf-8"))  # the comparator: code-point order is UTF-8 byte order


@st.composite
def partitions(draw):
    """k partitions of unique players, each sorted by the exact key, cut into random blocks.
    Few distinct (primary, tie): long runs of equal keys across partitions."""
    ids = draw(st.lists(IDS, unique=True, max_size=60))
    k = draw(st.integers(1, 4))
    rows = []
    for pid in ids:
        primary = draw(st.integers(-3, 3))
        tie = draw(st.integers(0, 2))
        meta = draw(st.sampled_from([None, b'{"a":1}', b'{"k":"\xc3\xa9"}']))
        rows.append((primary, tie, -primary, tie * 10, pid, meta, draw(st.integers(0, k - 1))))
    parts = []
    for s in range(k):
        mine = sorted((r for r in rows if r[6] == s), key=_key)
        cuts = sorted(draw(st.lists(st.integers(1, max(1, len(mine) - 1)), max_size=4, unique=True))) \
            if len(mine) > 1 else []
        bounds = [0, *[c for c in cuts if 0 < c < len(mine)], len(mine)]
        blocks = [_block(mine[a:b]) for a, b in zip(bounds, bounds[1:]) if b > a]
        parts.append((mine, blocks))
    return rows, parts


def _block(rows) -> Block:
    return Block.of([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows], [r[3] for r in rows],
                    [r[4] for r in rows], [r[5] for r in rows])


def _run(parts) -> list[Block]:
    merge = Merge([len(mine) for mine, _ in parts])
    feeds = [iter(blocks) for _, blocks in parts]
    out = []
    while True:
        for s in merge.wants():
            merge.feed(s, next(feeds[s]))
        got = merge.take()
        if got is None:
            break
        out.append(got)
    assert merge.done
    for f in feeds:
        assert next(f, None) is None  # every block was read
    return out


def _rows_of(b: Block) -> list[tuple]:
    return list(zip(b.primary.tolist(), b.tie.tolist(), b.value.tolist(), b.achieved.tolist(), b.player_ids(),
                    b.metadata()))


@settings(deadline=None, max_examples=300)
@given(partitions())
def test_the_merge_of_sorted_column_chunks_equals_sorted_of_the_union(data):
    rows, parts = data
    got = [r for b in _run(parts) for r in _rows_of(b)]
    want = [r[:6] for r in sorted(rows, key=_key)]
    assert got == want


@settings(deadline=None, max_examples=200)
@given(partitions(), st.integers(1, 7))
def test_tied_ranks_over_any_chunking_are_one_plus_the_strictly_better_values(data, width):
    rows, parts = data
    merged = concat(_run(parts)) if rows else Block.empty()
    tied, out = TiedRanks(), []
    for a in range(0, merged.rows, width):
        out += tied.of(a + 1, merged.value[a:a + width]).tolist()
    values = merged.value.tolist()
    # primary value: value here is -primary, so "strictly better" is a smaller primary
    prim = merged.primary.tolist()
    assert out == [1 + sum(1 for q in prim if q < p) for p in prim]
    assert len(values) == len(out)


@settings(deadline=None)
@given(st.lists(st.tuples(st.integers(-2**63, 2**63 - 1), st.integers(-2**63, 2**63 - 1), IDS,
                          st.sampled_from([None, b"{}", b'{"x":[1,2]}'])), max_size=20))
def test_a_block_survives_encoding(rows):
    b = Block.of([r[0] for r in rows], [r[1] for r in rows], [r[0] for r in rows], [r[1] for r in rows],
                 [r[2] for r in rows], [r[3] for r in rows])
    back = Block.decode(b.encode())
    assert _rows_of(back) == _rows_of(b)
    assert back.id_offsets.tolist() == b.id_offsets.tolist() and back.meta_offsets.tolist() == b.meta_offsets.tolist()
    if rows:
        half = len(rows) // 2
        assert _rows_of(b.slice(half, len(rows))) == _rows_of(b)[half:]
        idx = np.arange(len(rows))[::-1].copy()
        assert _rows_of(b.take(idx)) == _rows_of(b)[::-1]


def test_merge_refuses_misuse():
    m = Merge([2, 0])
    assert m.wants() == [0]
    with pytest.raises(RuntimeError):
        m.take()
    with pytest.raises(ValueError):
        m.feed(0, Block.of([1, 2, 3], [0, 0, 0], [0, 0, 0], [0, 0, 0], ["a", "b", "c"]))
    m.feed(0, Block.of([1, 2], [0, 0], [0, 0], [0, 0], ["a", "b"]))
    assert m.take().player_ids() == ["a", "b"] and m.take() is None and m.done


def test_a_chunk_lists_its_entries():
    c = Chunk(7, 3, Block.of([-5, -5], [1, 2], [5, 5], [1, 2], ["x", "y"], [None, b'{"a":1}']),
              np.array([3, 3]))
    assert len(c) == 2
    assert [(e.rank, e.player_id, e.value, e.achieved_at, e.tied_rank, e.metadata) for e in c.entries()] == [
        (3, "x", 5, 1, 3, None), (4, "y", 5, 2, 3, b'{"a":1}')]

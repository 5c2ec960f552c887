"""engine.core.changes: the ring of versioned deltas (docs/api.md §9): contiguous or nothing."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.core.changes import ChangeRing
from engine.core.model import Delta, RowChange, RowStatus


def test_change_ring_never_returns_a_gapped_replay():
    r = ChangeRing(3)
    for v in range(1, 8):
        r.push(Delta(v, ()))
    assert [d.version for d in r.since(4)] == [5, 6, 7]
    assert r.since(3) is None and r.since(8) is None and r.since(-1) is None
    assert r.since(7) == []
    with pytest.raises(ValueError):
        r.push(Delta(9, ()))
    r._check()



@settings(deadline=None, max_examples=200)
@given(st.integers(0, 6), st.lists(st.integers(0, 4), max_size=12))
def test_change_ring_columns_chunks_equal_single_deltas(retention, sizes):
    chunks, single = ChangeRing(retention), ChangeRing(retention)
    v = 0
    for k, size in enumerate(sizes):
        pids = [f"p{k}-{i}" for i in range(size)]
        vals = np.arange(size, dtype=np.int64) + k
        if k % 2:
            chunks.push_columns(pids, vals, vals * 2)
        else:
            chunks.push_many([Delta(v + i + 1, (RowChange(p, int(x), int(x) * 2, RowStatus.ACTIVE),))
                              for i, (p, x) in enumerate(zip(pids, vals))])
        single.push_many([Delta(v + i + 1, (RowChange(p, int(x), int(x) * 2, RowStatus.ACTIVE),))
                          for i, (p, x) in enumerate(zip(pids, vals))])
        v += size
        chunks._check()
        assert chunks.version == single.version == v
        assert len(chunks) == len(single)
        for since in range(-1, v + 2):
            assert chunks.since(since) == single.since(since)

"""engine.core.columns: score batches as columns, metadata as one arena + offsets."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from engine.core import records as R
from engine.core.columns import ScoreColumns, meta_columns
from engine.core.model import ScoreEvent

metas = st.sampled_from([b"", b"", b"{}", b'{"a":1}', b'{"k":"\xc3\xa9\xf0\x9f\x98\x80"}', b'{"x":"' + b"y" * 1000 + b'"}'])


@st.composite
def batches(draw):
    n = draw(st.integers(0, 30))
    return [ScoreEvent("b", f"e{i}", f"p{draw(st.integers(0, 5))}", draw(st.integers(-5, 5)), i, i, draw(metas))
            for i in range(n)]


@given(batches(), st.data())
def test_columns_keep_each_events_metadata_through_take_and_the_log_record(events, data):
    cols = ScoreColumns.from_events(events, "b")
    assert cols.events() == events
    assert (cols.moffs is None) == (not any(e.metadata for e in events))  # nothing to carry: no arena at all
    rows = np.array(data.draw(st.lists(st.integers(0, max(0, len(events) - 1)), max_size=len(events)))
                    if events else [], np.int64)
    assert cols.take(rows).events() == [events[i] for i in rows.tolist()]
    rec = R.scores_record(cols, 0, np.zeros(len(events), np.uint8))
    assert rec[0] == (R.SCORES_META if cols.moffs is not None else R.SCORES)
    back, _ = R.columns_of(rec)
    assert back.events() == events


def test_meta_columns_offsets():
    arena, offs = meta_columns([b"", b"ab", b"", b"c"])
    assert arena.tobytes() == b"abc" and offs.tolist() == [0, 0, 2, 2, 3]
    assert meta_columns([]) == (None, None)

"""gateway.export_format: the numba writers give, byte for byte, what :mod:`csv`
and :func:`orjson.dumps` write for the same rows (any id, int64 values, every
timestamp of the years 0001-9999, metadata, tied ranks)."""

from __future__ import annotations

import csv
import io

import numpy as np
import orjson
from hypothesis import example, given, settings
from hypothesis import strategies as st

from engine.core.export import Block, Chunk
from engine.core.timefmt import MAX_MS, MIN_MS, format_timestamp
from gateway.export_format import csv_bytes, jsonl_bytes

I64 = st.integers(-2**63, 2**63 - 1)
IDS = st.text(st.sampled_from(list('ab,"\\\r\n\t\x01 éü✓😀\u2028\x7f')), min_size=1, max_size=6)
METAS = st.sampled_from([None, b"{}", b'{"a":"x,\\"y"}', '{"n":"é✓","z":[1,2.5,null]}'.encode()])
ROWS = st.lists(st.tuples(IDS, I64, st.integers(MIN_MS, MAX_MS), METAS, st.integers(1, 2**40)), max_size=25)


def _chunk(rows, first: int) -> Chunk:
    block = Block.of([0] * len(rows), [0] * len(rows), [r[1] for r in rows], [r[2] for r in rows],
                     [r[0] for r in rows], [r[3] for r in rows])
    return Chunk(3, first, block, np.array([r[4] for r in rows], np.int64))


@settings(deadline=None, max_examples=300)
@given(ROWS, st.integers(1, 2**40))
@example([("p", -2**63, MIN_MS, None, 1), ("q", 2**63 - 1, MAX_MS, b"{}", 2), ("r", 0, -1, None, 3),
          ("s", 7, 951_782_400_000, None, 4), ("t", -7, 0, None, 5)], 1)
def test_csv_is_what_the_csv_module_writes(rows, first):
    for ties in (False, True):
        out = io.StringIO()
        csv.writer(out, lineterminator="\r\n").writerows(
            [first + k, pid, v, format_timestamp(t), (m or b"").decode()] + ([tr] if ties else [])
            for k, (pid, v, t, m, tr) in enumerate(rows))
        assert csv_bytes(_chunk(rows, first), ties) == out.getvalue().encode()


@settings(deadline=None, max_examples=300)
@given(ROWS, st.integers(1, 2**40))
def test_jsonl_is_what_orjson_writes(rows, first):
    for ties in (False, True):
        want = b""
        for k, (pid, v, t, m, tr) in enumerate(rows):
            row: dict = {"rank": first + k}
            if ties:
                row["tied_rank"] = tr
            row |= {"player_id": pid, "value": v, "achieved_at": format_timestamp(t)}
            if m:
                row["metadata"] = orjson.Fragment(m)
            want += orjson.dumps(row) + b"\n"
        assert jsonl_bytes(_chunk(rows, first), ties) == want

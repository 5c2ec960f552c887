"""engine.core.xxh3 against the xxhash package (the reference), on every input
length the kernel hashes and on random bytes and seeds; longer inputs are
flagged, never hashed wrongly."""

from __future__ import annotations

import numpy as np
import xxhash
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.core.dedup import DedupTable
from engine.core.xxh3 import MAX_SHORT, xxh3_128_many


def _arena(items: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    offs = np.zeros(len(items) + 1, np.int64)
    offs[1:] = np.cumsum([len(x) for x in items])
    return np.frombuffer(bytearray(b"".join(items)), np.uint8), offs


def _check(items: list[bytes], seed: int) -> None:
    lo, hi, long = xxh3_128_many(*_arena(items), seed)
    assert long == sum(len(x) > MAX_SHORT for x in items)
    for x, item in enumerate(items):
        if len(item) <= MAX_SHORT:
            assert (int(hi[x]) << 64) | int(lo[x]) == xxhash.xxh3_128_intdigest(item, seed), len(item)


def test_every_length_the_kernel_hashes():
    rnd = np.random.default_rng(7)
    for seed in (0, 1, 2**63, 2**64 - 1, 0x9E3779B185EBCA87):
        _check([rnd.integers(0, 256, n, dtype=np.uint8).tobytes() for n in range(MAX_SHORT + 1)], seed)
        _check([b"\xff" * n for n in range(MAX_SHORT + 1)], seed)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(max_size=MAX_SHORT + 40), max_size=20), st.integers(0, 2**64 - 1))
def test_random_items_and_seeds(items, seed):
    _check(items, seed)


def test_dedup_words_match_one_id_at_a_time_for_every_kind_of_id():
    t = DedupTable(100, "board-é")
    ids = ["", "e1", "é" * 60, "x" * 241, "y" * 1000, "\ud800lone", "日本語-イベント", "z" * 240]
    assert t.words_many(ids).tolist() == [list(t._words(e)) for e in ids]

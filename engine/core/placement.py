"""Where a board's players live: stable hashing, never Python's ``hash()``.

A board created with ``shards=k`` has partitions 0..k-1; a player belongs to
partition ``h(player_id) mod k``. Partition ``i`` of a board lives on shard
actor ``(h(board_id) + i) mod n_actors``, so ``shards=1`` keeps a board whole
on one actor chosen by its id (key-level partitioning) and a k-way board
spreads over k consecutive actors. xxh3 of the UTF-8 bytes is stable across
processes, machines and restarts.

>>> part_of("p-ava", 1)
0
>>> actor_of("arena-clash:solo:S7:global", 0, 4) == actor_of("arena-clash:solo:S7:global", 4, 4)
True
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import xxhash

_h = xxhash.xxh3_64_intdigest


def stable_hash(text: str) -> int:
    try:
        # strict UTF-8 gives the same bytes as "surrogatepass" for every string
        # without lone surrogates and takes CPython's fast encoder path
        data = text.encode()
    except UnicodeEncodeError:
        data = text.encode("utf-8", "surrogatepass")
    return _h(data)


def part_of(player_id: str, shards: int) -> int:
    """The partition of a board with ``shards`` partitions that holds the player."""
    return 0 if shards == 1 else stable_hash(player_id) % shards


def parts_of(player_ids: Sequence[str], shards: int) -> np.ndarray:
    """:func:`part_of` for a column of player ids, as int64. One C-level pass
    (``map`` of encode and xxh3), no Python frame per id.

    >>> parts_of(["p-ava", "p-bo", "p-cy"], 3).tolist() == [part_of(p, 3) for p in ["p-ava", "p-bo", "p-cy"]]
    True
    """
    n = len(player_ids)
    if shards == 1:
        return np.zeros(n, np.int64)
    try:
        hashes = np.fromiter(map(_h, map(str.encode, player_ids)), np.uint64, n)
    except UnicodeEncodeError:  # a lone surrogate somewhere: the id-by-id path encodes it as stable_hash does
        hashes = np.fromiter(map(stable_hash, player_ids), np.uint64, n)
    return (hashes % np.uint64(shards)).astype(np.int64)


def actor_of(board_id: str, part: int, n_actors: int) -> int:
    """The shard actor that hosts partition ``part`` of a board."""
    return (stable_hash(board_id) + part) % n_actors


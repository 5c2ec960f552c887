"""Pure merges that turn per-partition answers into board answers.

A partition answers with *entries* ``(key, value, achieved_at)`` already in
rank order (``key = (primary, tie, player_id)``). Every board-level read is
one of these merges, so one partition and k partitions give the same
answer by construction (the shard-equivalence property tests check it).
"""

from __future__ import annotations

import heapq
from itertools import islice
from typing import Iterable, Sequence

from engine.model import RankedEntry

Entry = tuple  # (key, value, achieved_at)


def entries_of(rows) -> list[Entry]:
    return [(r.key, r.value, r.achieved_at) for r in rows]


def ranked(entries: Iterable[Entry], first_rank: int) -> list[RankedEntry]:
    return [RankedEntry(first_rank + i, e[0][2], e[1], e[2]) for i, e in enumerate(entries)]


def merge_top(per_partition: Sequence[Sequence[Entry]], offset: int, limit: int) -> list[RankedEntry]:
    """Board ranks offset+1 .. offset+limit from each partition's best
    ``offset + limit`` entries. O((offset + limit) log k)."""
    merged = heapq.merge(*per_partition, key=_key) if len(per_partition) > 1 else iter(per_partition[0])
    return ranked(islice(merged, offset, offset + limit), offset + 1)


def merge_window(
    rank: int,
    me: Entry,
    befores: Sequence[Sequence[Entry]],
    afters: Sequence[Sequence[Entry]],
    radius: int,
) -> list[RankedEntry]:
    """The around-player window [rank - radius, rank + radius], clamped.

    ``befores``/``afters``: each partition's entries just before / after the
    player's key, in rank order (up to ``radius`` each).
    """
    before = list(heapq.merge(*befores, key=_key))[-radius:] if radius else []
    after = list(islice(heapq.merge(*afters, key=_key), radius)) if radius else []
    return ranked([*before, me, *after], rank - len(before))


def rank_locally(entries: Iterable[Entry]) -> list[RankedEntry]:
    """A subset (friends, explicit ids) ranked 1..k by the board comparator."""
    return ranked(sorted(entries, key=_key), 1)


def _key(e: Entry):
    return e[0]

"""Pure merges that turn per-partition answers into board answers.

A partition answers with *entries* ``(key, value, achieved_at[, metadata[,
subscores]])`` already in rank order (``key = (primary, tie, player_id)``, or
``(primary, *subscores signed, tie, player_id)`` on a board with subscores,
docs/api.md §14: the key's length never matters here, tuples compare as such). Every board-level read is
one of these merges, so one partition and k partitions give the same
answer by construction (the shard-equivalence property tests check it).
"""

from __future__ import annotations

import heapq
from itertools import islice
from typing import Iterable, Sequence

from engine.core.model import RankedEntry

Entry = tuple  # (key, value, achieved_at[, metadata bytes or None[, subscores tuple or None]])


def entries_of(rows) -> list[Entry]:
    return [(r.key, r.value, r.achieved_at, r.metadata, r.subscores) for r in rows]


def ranked(entries: Iterable[Entry], first_rank: int) -> list[RankedEntry]:
    return [RankedEntry(first_rank + i, e[0][-1], e[1], e[2], None, e[3] if len(e) > 3 else None,
                        tuple(e[4]) if len(e) > 4 and e[4] is not None else None)
            for i, e in enumerate(entries)]


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


def with_tied_ranks(entries: Sequence[RankedEntry], first_tied: int) -> list[RankedEntry]:
    """The same entries (consecutive ranks, in rank order) with their
    competition rank (1, 1, 3): an entry shares the tied rank of the entry
    before it when their primary values (and subscores, on a board with
    them: docs/api.md §14) are equal, else its tied rank is its rank. ``first_tied`` is the first entry's: one plus the number of ranked
    players whose primary value is strictly better. The primary value is the
    entry's ``value`` under every policy (score, total or time). O(len).

    >>> es = [RankedEntry(4, "a", 9, 0), RankedEntry(5, "b", 9, 1), RankedEntry(6, "c", 7, 0)]
    >>> [e.tied_rank for e in with_tied_ranks(es, 3)]
    [3, 3, 6]
    """
    out: list[RankedEntry] = []
    tied, prev = first_tied, None
    for e in entries:
        cur = (e.value, e.subscores)
        if prev is not None and cur != prev:
            tied = e.rank
        prev = cur
        out.append(e._replace(tied_rank=tied))
    return out


def first_tied_in_prefix(prefix: Sequence[RankedEntry], i: int) -> int:
    """Tied rank of ``prefix[i]`` when ``prefix`` starts at rank 1: one plus
    the index of the first entry with the same value. O(run of equal values)."""
    j, v = i, (prefix[i].value, prefix[i].subscores)
    while j > 0 and (prefix[j - 1].value, prefix[j - 1].subscores) == v:
        j -= 1
    return j + 1


def better_primary_probe(wire_primary: int, mid: Sequence[int] = ()) -> tuple:
    """A wire key just before every key whose primary is ``wire_primary``
    (and whose subscores are ``mid``, signed as in a wire key, on a board with
    them): counting the keys before it counts the rows whose primary value
    (and subscores) are strictly better (player ids are never empty, ties are
    int64)."""
    return (wire_primary, *mid, -(1 << 63), "")


def _key(e: Entry):
    return e[0]

"""The rank mirror: every row of one board, over all its partitions, beside the router.

An exact rank read asks the shard actor that owns the player's partition for
the row, and every other one for a count of the keys before it (one round
when the router guessed the key, :mod:`engine.core.rank_keys`). Each of
those calls costs a shard actor Ray's per-call work, and at 4 partitions it
is what bounded the route (docs/performance.md, Stop 28). A mirror answers
the read with no shard call at all: it holds the board's rows (value,
``achieved_at``, row version, status, metadata) and their rank index, in one
:class:`~engine.core.partition.Partition` over every partition's players.

It is a projection of the board's delta ring (:class:`engine.core.changes.ChangeRing`),
never of events: it is built from one consistent cut of the shard actors'
rows at a version, then follows every delta after it in version order
(:meth:`RankMirror.catch_up`), through
:meth:`~engine.core.partition.Partition.overwrite_rows`. Every change of a
row steps the board's version once and is a delta of the ring (live updates
are built on that, docs/api.md §9), so a mirror at the board's version is the
board at that version: the same rows, the same ranks. When the deltas it
needs are gone, or the ring was reset (a restart, a resync, an erasure,
whose unranked rows leave without a delta), it cannot follow, and the caller
drops it and builds a new one.

Boards it cannot mirror: ``fastest_time`` (a delta does not carry the
``submitted_at`` its tie needs) and boards with subscores; their reads keep
the shard actors' path.

>>> from engine.core.model import Policy
>>> from engine.core.changes import ChangeRing
>>> import numpy as np
>>> ring = ChangeRing(100)
>>> m = RankMirror.build(Policy.BEST_SCORE, 0, [], ring.version, ring.epoch)
>>> ring.push_columns(["ann", "ben"], np.array([5, 9]), np.array([1, 2]))
>>> m.catch_up(ring), m.version
(True, 2)
>>> got = m.read("ann"); got.rank, got.row.value, got.row.row_version
(2, 5, 1)
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

import numpy as np

from engine.core.changes import ChangeRing
from engine.core.model import Delta, Policy
from engine.core.partition import Partition, Row
from engine.core.ranking import better_primary_probe


class MirrorRead(NamedTuple):
    """A player's row as the mirror holds it, its exact rank (None: not
    ranked) and, when asked, its competition rank."""

    row: Row
    rank: int | None
    tied_rank: int | None = None


def mirrors(policy: Policy, subscores: Sequence[str]) -> bool:
    """Whether a board with this policy and these subscores can have a mirror."""
    return policy is not Policy.FASTEST_TIME and not subscores


class RankMirror:
    """One board's rows at ``version`` (of the ring's ``epoch``)."""

    __slots__ = ("rows", "version", "epoch")

    def __init__(self, rows: Partition, version: int, epoch: int) -> None:
        self.rows = rows
        self.version = version
        self.epoch = epoch

    @classmethod
    def build(cls, policy: Policy, max_plausible_time_ms: int, chunks: Sequence[list], version: int,
              epoch: int) -> "RankMirror":
        """A mirror of the rows in ``chunks`` (each a partition's
        :meth:`~engine.core.partition.Partition.columns`, all from one cut at
        ``version``). O(n log n); pure: a worker thread may run it."""
        if not mirrors(policy, ()):
            raise ValueError(f"a {policy.value} board has no rank mirror")
        return cls(Partition.from_row_columns(policy, max_plausible_time_ms, chunks), version, epoch)

    def catch_up(self, ring: ChangeRing) -> bool:
        """Follow the ring's deltas from this mirror's version to the ring's.
        False when it cannot (deltas gone, or the ring reset since the mirror
        was built): the mirror is then no longer usable. Columnar: a batch's
        changes are one :meth:`~engine.core.partition.Partition.overwrite_rows`."""
        if ring.epoch != self.epoch:
            return False
        chunks = ring.chunks_since(self.version, held=True)
        if chunks is None:
            return False
        rows = self.rows
        for _first, chunk in chunks:
            if isinstance(chunk, Delta):
                for ch in chunk.changes:
                    rows.overwrite_rows([ch.player_id], np.array([ch.value or 0], np.int64),
                                        np.array([ch.achieved_at or 0], np.int64), ch.status, [ch.metadata])
            else:
                ids = chunk.player_ids
                rows.overwrite_rows(ids if isinstance(ids, list) else ids[0:len(ids)], chunk.values, chunk.achieved,
                                    chunk.status, chunk.metadata)
        self.version = ring.version
        return True

    def read(self, player_id: str, ties: bool = False) -> MirrorRead | None:
        """The player's row and exact rank, None when the board has no row
        for them. O(log n)."""
        got = self.rows.row_and_rank(player_id)
        if got is None:
            return None
        row, rank = got
        tied = 1 + self.rows.count_better_than(better_primary_probe(row.key[0])) if ties and row.key else None
        return MirrorRead(row, rank, tied)

    def __len__(self) -> int:
        """Ranked rows."""
        return len(self.rows)

    def nbytes(self) -> int:
        return self.rows.nbytes()

    def _check(self) -> None:
        """The rows' invariants (a mirror has no journal: a latest board's rows name no event)."""
        self.rows._check_rows()

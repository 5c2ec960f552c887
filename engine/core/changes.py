"""The bounded ring of per-version row changes (docs/api.md §9, Test I).

``since(v)`` returns the contiguous deltas v+1 .. current when every one
of them is still retained, and None otherwise (the caller then sends a
snapshot). It never returns a gapped replay.
"""

from __future__ import annotations

from collections import deque
from typing import NamedTuple, Protocol

import numpy as np

from engine.core.model import Delta, RowChange, RowStatus


class Names(Protocol):
    """Player ids of a chunk of changes: a list, or ids decoded only when read
    (:class:`engine.core.players.InternedNames`)."""

    def __len__(self) -> int: ...

    def __getitem__(self, at: slice, /) -> list[str]: ...


class ChangeColumns(NamedTuple):
    """A batch's changes as the ring holds them: one version each, in order
    (every row ``ACTIVE`` or every row ``status``)."""

    player_ids: "Names | list[str]"
    values: np.ndarray
    achieved: np.ndarray
    status: RowStatus
    metadata: list | None  # None: no row has metadata; else bytes-or-None per row
    subscores: np.ndarray | None


class ChangeRing:
    """Deltas kept in chunks: one per ``push`` (a Delta) or per
    ``push_columns`` (a batch's changes as columns, made into Delta records
    only when a reader asks). Memory is O(retention); a batch costs O(1)
    Python objects however many rows it changed."""

    __slots__ = ("retention", "_chunks", "_held", "version", "_pins", "epoch")

    def __init__(self, retention: int, version: int = 0):
        if retention < 0:
            raise ValueError("delta retention must be >= 0")
        self.retention = retention
        # (first version, Delta) or (first version, (player ids, values, achieved, status))
        self._chunks: deque[tuple[int, object]] = deque()
        self._held = 0  # versions the chunks cover
        self.version = version  # the version the newest retained delta reached
        self._pins: list[int] = []  # versions whose later deltas are kept past the retention (pin)
        self.epoch = 0  # resets so far: a reader that followed the deltas before one cannot go on

    def push(self, delta: Delta) -> None:
        """Append the delta that brought the board to ``delta.version``. O(1)."""
        if delta.version != self.version + 1:
            raise ValueError(f"delta {delta.version} does not follow version {self.version}")
        self._append(delta.version, delta, 1)

    def push_many(self, deltas: list[Delta]) -> None:
        """``push`` each delta in order. O(k)."""
        for d in deltas:
            self.push(d)

    def push_columns(self, player_ids: "Names", values: np.ndarray, achieved: np.ndarray,
                     status: RowStatus = RowStatus.ACTIVE, metadata: list | None = None,
                     subscores: np.ndarray | None = None) -> None:
        """One delta per row, versions ``version + 1 ..``, each changing one
        player's row to (value, achieved, status, metadata: None for all or
        one bytes-or-None per row, subscores: None on a board without them,
        else an int64 row per change). O(1) Python objects."""
        k = len(player_ids)
        if k:
            self._append(self.version + 1, (player_ids, values, achieved, status, metadata, subscores), k)

    def _append(self, first: int, chunk, k: int) -> None:
        self.version = first + k - 1
        if self.retention == 0 and not self._pins:
            return
        self._chunks.append((first, chunk))
        self._held += k
        self._trim()

    def _trim(self) -> None:
        floor = min(self._pins) if self._pins else None  # a chunk reaching past a pin stays
        while self._chunks and self._held - _size(self._chunks[0][1]) >= self.retention:
            first, chunk = self._chunks[0]
            if floor is not None and first + _size(chunk) - 1 > floor:
                return
            self._held -= _size(self._chunks.popleft()[1])

    def pin(self, version: int) -> None:
        """Keep every delta after ``version`` past the retention until
        :meth:`unpin` (a reader that took a cut at ``version`` and needs the
        changes since, however long it takes: a rank mirror being built).
        Memory then grows with the changes until the pin goes."""
        self._pins.append(version)

    def unpin(self, version: int) -> None:
        if version in self._pins:
            self._pins.remove(version)
        self._trim()

    def reset(self, version: int) -> None:
        """Forget every delta (e.g. after a restart): the ring starts at ``version``
        (a pinned reader's ``since`` then answers None)."""
        self._chunks.clear()
        self._held = 0
        self.version = version
        self.epoch += 1

    def since(self, version: int) -> list[Delta] | None:
        """Deltas version+1 .. current, or None if any of them is gone.

        ``version == current`` gives an empty list; a version in the future
        or below the oldest retained base gives None. O(k) for k deltas.
        """
        chunks = self.chunks_since(version)
        if chunks is None:
            return None
        out: list[Delta] = []
        for first, chunk in chunks:
            if isinstance(chunk, Delta):
                out.append(chunk)
                continue
            pids, vals, achs, status, metas, subs = chunk
            k = len(pids)
            ms = metas if metas is not None else [None] * k
            ss = [tuple(x) for x in subs.tolist()] if subs is not None else [None] * k
            out.extend(Delta(first + i, (RowChange(p, v, a, status, m, s),)) for i, p, v, a, m, s in zip(
                range(k), pids, vals.tolist(), achs.tolist(), ms, ss))
        return out

    def chunks_since(self, version: int, held: bool = False) -> list[tuple[int, "Delta | ChangeColumns"]] | None:
        """The deltas ``version + 1 ..`` current as stored: ``(first version,
        chunk)`` where a chunk is one :class:`Delta` or a batch's changes as
        :class:`ChangeColumns` (cut to start after ``version``); None when any
        of them is gone, as :meth:`since`. O(chunks) Python objects, whatever
        the number of changes (a columnar reader: a rank mirror). ``held``:
        answer from every delta still held, even past the retention (a
        batch's chunk is held whole: a reader that follows each batch never
        misses one, whatever the retention)."""
        if version == self.version:
            return []
        if version > self.version or version < 0:
            return None
        if version < self.version - self._held or (
                not held and version < self.version - len(self) and not self._pinned(version)):
            return None
        out: list[tuple[int, Delta | ChangeColumns]] = []
        for first, chunk in self._chunks:
            k = _size(chunk)
            if first + k - 1 <= version:
                continue
            if isinstance(chunk, Delta):
                out.append((first, chunk))
                continue
            pids, vals, achs, status, metas, subs = chunk  # type: ignore[misc]
            lo = max(0, version + 1 - first)
            out.append((first + lo, ChangeColumns(pids[lo:] if lo else pids, vals[lo:], achs[lo:], status,
                                                  None if metas is None else metas[lo:],
                                                  None if subs is None else subs[lo:])))
        return out

    def _pinned(self, version: int) -> bool:
        return any(p <= version for p in self._pins)

    def __len__(self) -> int:
        return min(self._held, max(self.retention, 0)) if not self._pins else self._held

    def _check(self) -> None:
        assert self._held >= len(self) and (self._pins or len(self) <= max(self.retention, 0))
        expect = None
        for first, chunk in self._chunks:
            assert expect is None or first == expect
            expect = first + _size(chunk)
        if self._chunks:
            assert expect == self.version + 1


def _size(chunk) -> int:
    return 1 if isinstance(chunk, Delta) else len(chunk[0])

"""The bounded ring of per-version row changes (docs/api.md §9, Test I).

``since(v)`` returns the contiguous deltas v+1 .. current when every one
of them is still retained, and None otherwise (the caller then sends a
snapshot). It never returns a gapped replay.
"""

from __future__ import annotations

from collections import deque
from typing import Protocol

import numpy as np

from engine.core.model import Delta, RowChange, RowStatus


class Names(Protocol):
    """Player ids of a chunk of changes: a list, or ids decoded only when read
    (:class:`engine.core.players.InternedNames`)."""

    def __len__(self) -> int: ...

    def __getitem__(self, at: slice, /) -> list[str]: ...


class ChangeRing:
    """Deltas kept in chunks: one per ``push`` (a Delta) or per
    ``push_columns`` (a batch's changes as columns, made into Delta records
    only when a reader asks). Memory is O(retention); a batch costs O(1)
    Python objects however many rows it changed."""

    __slots__ = ("retention", "_chunks", "_held", "version")

    def __init__(self, retention: int, version: int = 0):
        if retention < 0:
            raise ValueError("delta retention must be >= 0")
        self.retention = retention
        # (first version, Delta) or (first version, (player ids, values, achieved, status))
        self._chunks: deque[tuple[int, object]] = deque()
        self._held = 0  # versions the chunks cover
        self.version = version  # the version the newest retained delta reached

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
        if self.retention == 0:
            return
        self._chunks.append((first, chunk))
        self._held += k
        while self._chunks and self._held - _size(self._chunks[0][1]) >= self.retention:
            self._held -= _size(self._chunks.popleft()[1])

    def reset(self, version: int) -> None:
        """Forget every delta (e.g. after a restart): the ring starts at ``version``."""
        self._chunks.clear()
        self._held = 0
        self.version = version

    def since(self, version: int) -> list[Delta] | None:
        """Deltas version+1 .. current, or None if any of them is gone.

        ``version == current`` gives an empty list; a version in the future
        or below the oldest retained base gives None. O(k) for k deltas.
        """
        if version == self.version:
            return []
        if version > self.version or version < 0:
            return None
        oldest_base = self.version - len(self)
        if version < oldest_base:
            return None
        out: list[Delta] = []
        for first, chunk in self._chunks:
            k = _size(chunk)
            if first + k - 1 <= version:
                continue
            if isinstance(chunk, Delta):
                out.append(chunk)
                continue
            pids, vals, achs, status, metas, subs = chunk  # type: ignore[misc]
            lo = max(0, version + 1 - first)
            ms = metas[lo:] if metas is not None else [None] * (k - lo)
            ss = [tuple(x) for x in subs[lo:].tolist()] if subs is not None else [None] * (k - lo)
            out.extend(Delta(first + i, (RowChange(p, v, a, status, m, s),)) for i, p, v, a, m, s in zip(
                range(lo, k), pids[lo:], vals[lo:].tolist(), achs[lo:].tolist(), ms, ss))
        return out

    def __len__(self) -> int:
        return min(self._held, self.retention)

    def _check(self) -> None:
        assert self._held >= len(self) and len(self) <= max(self.retention, 0)
        expect = None
        for first, chunk in self._chunks:
            assert expect is None or first == expect
            expect = first + _size(chunk)
        if self._chunks:
            assert expect == self.version + 1


def _size(chunk) -> int:
    return 1 if isinstance(chunk, Delta) else len(chunk[0])

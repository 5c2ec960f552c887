"""The bounded ring of per-version row changes (docs/api.md §9, Test I).

``since(v)`` returns the contiguous deltas v+1 .. current when every one
of them is still retained, and None otherwise (the caller then sends a
snapshot). It never returns a gapped replay.
"""

from __future__ import annotations

from collections import deque

from engine.model import Delta


class ChangeRing:
    __slots__ = ("retention", "_deltas", "version")

    def __init__(self, retention: int, version: int = 0):
        if retention < 0:
            raise ValueError("delta retention must be >= 0")
        self.retention = retention
        self._deltas: deque[Delta] = deque()
        self.version = version  # the version the newest retained delta reached

    def push(self, delta: Delta) -> None:
        """Append the delta that brought the board to ``delta.version``. O(1)."""
        if delta.version != self.version + 1:
            raise ValueError(f"delta {delta.version} does not follow version {self.version}")
        self.version = delta.version
        if self.retention == 0:
            return
        self._deltas.append(delta)
        if len(self._deltas) > self.retention:
            self._deltas.popleft()

    def push_many(self, deltas: list[Delta]) -> None:
        """``push`` each delta in order. O(k)."""
        for d in deltas:
            self.push(d)

    def reset(self, version: int) -> None:
        """Forget every delta (e.g. after a restart): the ring starts at ``version``."""
        self._deltas.clear()
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
        oldest_base = self._deltas[0].version - 1 if self._deltas else self.version
        if version < oldest_base:
            return None
        start = version - oldest_base
        return [self._deltas[i] for i in range(start, len(self._deltas))]

    def __len__(self) -> int:
        return len(self._deltas)

    def _check(self) -> None:
        assert len(self._deltas) <= max(self.retention, 0)
        for a, b in zip(self._deltas, list(self._deltas)[1:]):
            assert b.version == a.version + 1
        if self._deltas:
            assert self._deltas[-1].version == self.version

"""Per-board event-id deduplication with a content fingerprint (docs/api.md §7).

The window remembers the most recent ``retention`` event ids of a board,
each with a 64-bit fingerprint of its content, so a redelivery is told
apart from a reused id carrying different content. Ids older than the
window are forgotten; the partition's history and the monotonic guards
are the fallback for those (see :mod:`engine.partition`).

Fingerprints use xxh3 over a canonical encoding, never Python's salted
``hash()``, so they survive snapshots and process restarts.
"""

from __future__ import annotations

from enum import Enum

import xxhash

_xxh64 = xxhash.xxh3_64_intdigest


def fingerprint(player_id: str, value: int, achieved_at: int, submitted_at: int) -> int:
    """Stable 64-bit fingerprint of an event's content."""
    text = f"{player_id}\x1f{value}\x1f{achieved_at}\x1f{submitted_at}"
    try:
        # strict UTF-8 gives the same bytes as "surrogatepass" for every
        # string without lone surrogates, and is ~5x cheaper (CPython's
        # encoder takes its fast path only with the default error handler)
        data = text.encode()
    except UnicodeEncodeError:
        data = text.encode("utf-8", "surrogatepass")
    return _xxh64(data)


class Seen(Enum):
    NEW = 0
    DUPLICATE = 1
    CONFLICT = 2


class DedupWindow:
    """Bounded map event id -> fingerprint, evicting the oldest ids first.

    ``check`` and ``remember`` are O(1) amortised. Memory is one dict entry
    per remembered id (the id string is shared with the caller's event).
    """

    __slots__ = ("retention", "_seen")

    def __init__(self, retention: int):
        if retention < 1:
            raise ValueError("dedup retention must be at least 1")
        self.retention = retention
        self._seen: dict[str, int] = {}

    def check(self, event_id: str, fp: int) -> Seen:
        known = self._seen.get(event_id)
        if known is None:
            return Seen.NEW
        return Seen.DUPLICATE if known == fp else Seen.CONFLICT

    def remember(self, event_id: str, fp: int) -> None:
        seen = self._seen
        seen[event_id] = fp
        if len(seen) > self.retention:
            # dicts keep insertion order: the first key is the oldest id.
            del seen[next(iter(seen))]

    def add(self, event_id: str, fp: int) -> None:
        """Remember without evicting yet (see ``trim``): lets a caller undo."""
        self._seen[event_id] = fp

    def discard(self, event_id: str) -> None:
        self._seen.pop(event_id, None)

    def trim(self) -> None:
        """Evict the oldest ids beyond the retention. O(evicted)."""
        seen = self._seen
        while len(seen) > self.retention:
            del seen[next(iter(seen))]

    def __len__(self) -> int:
        return len(self._seen)

    def __contains__(self, event_id: str) -> bool:
        return event_id in self._seen

    def to_state(self) -> list:
        """Flat ``[id, fp, id, fp, ...]`` oldest first, for snapshots."""
        out: list = []
        for k, v in self._seen.items():
            out.append(k)
            out.append(v)
        return out

    @classmethod
    def from_state(cls, retention: int, state: list) -> "DedupWindow":
        w = cls(retention)
        it = iter(state)
        w._seen = dict(zip(it, it))
        while len(w._seen) > retention:
            del w._seen[next(iter(w._seen))]
        return w

    def _check(self) -> None:
        assert len(self._seen) <= self.retention
        for k, v in self._seen.items():
            assert isinstance(k, str) and isinstance(v, int)

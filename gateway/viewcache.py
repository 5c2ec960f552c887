"""A small cache of hot read views for ``?max_staleness_ms=N`` (docs/api.md §8).

Keyed by route + parameters; each entry remembers when (monotonic clock) it
was fetched. A read that allows N ms of staleness is served from an entry
younger than N ms (and younger than ``max_age_ms``), else fetched fresh and
stored. Default reads never come here: they stay exact.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from typing import Awaitable, Callable, Hashable


class ViewCache:
    def __init__(self, max_entries: int = 1024, max_age_ms: int = 10_000, clock: Callable[[], float] = time.monotonic):
        self._max = max_entries
        self._max_age = max_age_ms
        self._clock = clock
        self._data: OrderedDict[Hashable, tuple[float, dict]] = OrderedDict()

    async def get(self, key: Hashable, max_staleness_ms: int, fetch: Callable[[], Awaitable[dict]]) -> dict:
        """A copy of the cached body plus ``stale_ms``; O(1) apart from ``fetch``."""
        now = self._clock()
        hit = self._data.get(key)
        allowed = min(max_staleness_ms, self._max_age)
        if hit is not None:
            age_ms = int((now - hit[0]) * 1000)
            if age_ms <= allowed:
                self._data.move_to_end(key)
                return {**hit[1], "stale_ms": age_ms}
        body = await fetch()
        if self._max > 0 and allowed > 0:
            self._data[key] = (self._clock(), body)
            self._data.move_to_end(key)
            while len(self._data) > self._max:
                self._data.popitem(last=False)
        return {**body, "stale_ms": 0}

    async def get_bytes(self, key: Hashable, max_staleness_ms: int, fetch: Callable[[], Awaitable[bytes]]) -> bytes:
        """:meth:`get` for bodies already encoded as a JSON object: the cached
        bytes with ``"stale_ms"`` spliced in as the last key (what ``get``
        returns, encoded); O(len(body)) for the copy."""
        now = self._clock()
        key = ("bytes", key)
        hit = self._data.get(key)
        allowed = min(max_staleness_ms, self._max_age)
        if hit is not None:
            age_ms = int((now - hit[0]) * 1000)
            if age_ms <= allowed:
                self._data.move_to_end(key)
                return _with_stale(hit[1], age_ms)
        body = await fetch()
        if self._max > 0 and allowed > 0:
            self._data[key] = (self._clock(), body)
            self._data.move_to_end(key)
            while len(self._data) > self._max:
                self._data.popitem(last=False)
        return _with_stale(body, 0)

    def __len__(self) -> int:
        return len(self._data)


def _with_stale(body: bytes, age_ms: int) -> bytes:
    """``{...}`` → ``{...,"stale_ms":N}`` (``{}`` → ``{"stale_ms":N}``)."""
    sep = b"" if body == b"{}" else b","
    return b"%s%s\"stale_ms\":%d}" % (body[:-1], sep, age_ms)

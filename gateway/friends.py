"""Friends providers (docs/api.md §8): where a player's eligible set comes from.

The gateway only ever asks "which player ids are this player's friends"; the
answer feeds ``engine.ranked_subset`` and is never put in a response.

* :class:`NoFriends` — every player has an empty list (no provider configured).
* :class:`StaticFriends` — ``--friends-file`` JSON ``{"p-ava": ["p-ben", ...]}``.
* :class:`HttpFriends` — ``--friends-url``: ``GET {url}/players/{id}/friends``
  answering ``{"friend_ids": [...]}``, with a short timeout and a short-TTL
  cache (clock injected). A 404 means "no friends"; a timeout or a 5xx is
  503 OVERLOADED (retry later), never a 500.
"""

from __future__ import annotations

import json
import time
from collections import OrderedDict
from pathlib import Path
from typing import Callable, Protocol
from urllib.parse import quote

import httpx

from engine.core.errors import Overloaded

from gateway.validation import id_problem


class FriendsProvider(Protocol):
    async def friends_of(self, player_id: str) -> list[str]: ...

    async def aclose(self) -> None: ...


def _clean(ids: object, limit: int) -> list[str]:
    """Valid, distinct ids in their given order, at most ``limit``."""
    if not isinstance(ids, list):
        return []
    seen: dict[str, None] = {}
    for x in ids:
        if id_problem(x) is None and x not in seen:
            seen[x] = None
            if len(seen) >= limit:
                break
    return list(seen)


class NoFriends:
    async def friends_of(self, player_id: str) -> list[str]:
        return []

    async def aclose(self) -> None:
        return None


class StaticFriends:
    def __init__(self, mapping: dict[str, list[str]], limit: int = 10_000):
        if not isinstance(mapping, dict):
            raise ValueError("friends file must hold a JSON object of player id -> list of ids")
        self._map = {k: _clean(v, limit) for k, v in mapping.items() if isinstance(k, str)}

    @classmethod
    def from_file(cls, path: str, limit: int = 10_000) -> "StaticFriends":
        return cls(json.loads(Path(path).read_text("utf-8")), limit)

    async def friends_of(self, player_id: str) -> list[str]:
        return list(self._map.get(player_id, ()))

    async def aclose(self) -> None:
        return None


class HttpFriends:
    def __init__(
        self,
        base_url: str,
        timeout_s: float = 1.0,
        ttl_s: float = 30.0,
        max_entries: int = 10_000,
        limit: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
        transport: httpx.AsyncBaseTransport | None = None,
    ):
        self._base = base_url.rstrip("/")
        self._client = httpx.AsyncClient(timeout=timeout_s, transport=transport)
        self._ttl = ttl_s
        self._max = max_entries
        self._limit = limit
        self._clock = clock
        self._cache: OrderedDict[str, tuple[float, list[str]]] = OrderedDict()

    async def friends_of(self, player_id: str) -> list[str]:
        now = self._clock()
        hit = self._cache.get(player_id)
        if hit is not None and now - hit[0] < self._ttl:
            self._cache.move_to_end(player_id)
            return list(hit[1])
        url = f"{self._base}/players/{quote(player_id, safe='')}/friends"
        try:
            resp = await self._client.get(url)
        except httpx.HTTPError:
            raise Overloaded("The friends service did not answer in time.", retry_after=1) from None
        if resp.status_code == 404:
            ids: list[str] = []
        elif resp.status_code != 200:
            raise Overloaded("The friends service is unavailable.", retry_after=1)
        else:
            try:
                ids = _clean(resp.json().get("friend_ids"), self._limit)
            except (ValueError, AttributeError):
                raise Overloaded("The friends service answered garbage.", retry_after=1) from None
        self._cache[player_id] = (now, ids)
        self._cache.move_to_end(player_id)
        while len(self._cache) > self._max:
            self._cache.popitem(last=False)
        return list(ids)

    async def aclose(self) -> None:
        await self._client.aclose()


def build_friends(friends_file: str | None, friends_url: str | None, timeout_s: float, ttl_s: float,
                  max_entries: int, limit: int) -> FriendsProvider:
    if friends_file:
        return StaticFriends.from_file(friends_file, limit)
    if friends_url:
        return HttpFriends(friends_url, timeout_s=timeout_s, ttl_s=ttl_s, max_entries=max_entries, limit=limit)
    return NoFriends()

"""Per-credential token buckets (docs/api.md §2: "over its rate: 429 with Retry-After").

Pure and clock-injected: the caller passes ``now`` (monotonic seconds), so
tests drive time by hand.

>>> b = TokenBucket(rate_per_s=1.0, burst=2.0, now=0.0)
>>> b.take(0.0), b.take(0.0), b.take(0.0)
(0.0, 0.0, 1.0)
>>> b.take(1.0)
0.0
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from typing import Callable

from engine.core.errors import RateLimited

from gateway.auth import Principal


class TokenBucket:
    """``burst`` tokens, refilled at ``rate_per_s``; O(1) per request."""

    __slots__ = ("rate", "burst", "tokens", "stamp")

    def __init__(self, rate_per_s: float, burst: float, now: float):
        self.rate = float(rate_per_s)
        self.burst = max(float(burst), 1.0)
        self.tokens = self.burst
        self.stamp = now

    def take(self, now: float, cost: float = 1.0) -> float:
        """Spend ``cost`` tokens: 0.0 when allowed, else seconds until it would be."""
        if now > self.stamp:
            self.tokens = min(self.burst, self.tokens + (now - self.stamp) * self.rate)
            self.stamp = now
        if self.tokens >= cost:
            self.tokens -= cost
            return 0.0
        return (cost - self.tokens) / self.rate if self.rate > 0 else math.inf


class RateLimiter:
    """One bucket per (credential, kind); kind is ``"read"`` or ``"write"``.

    A key entry with ``rate_per_s``/``burst`` gets one bucket of that size for
    all its traffic; otherwise the read and write defaults apply. Buckets are
    kept in an LRU of at most ``max_buckets`` (credentials are few; this only
    bounds memory).
    """

    def __init__(
        self,
        read: tuple[float, float],
        write: tuple[float, float],
        clock: Callable[[], float] = time.monotonic,
        max_buckets: int = 100_000,
    ):
        self._defaults = {"read": read, "write": write}
        self._clock = clock
        self._buckets: OrderedDict[tuple[str, str], TokenBucket] = OrderedDict()
        self._max = max_buckets

    def check(self, principal: Principal, kind: str) -> None:
        """Spend one token or raise :class:`RateLimited` with ``retry_after`` ≥ 1 s."""
        now = self._clock()
        if principal.rate_per_s is not None or principal.burst is not None:
            dflt_rate, _ = self._defaults[kind]
            rate = principal.rate_per_s if principal.rate_per_s is not None else dflt_rate
            burst = principal.burst if principal.burst is not None else 2 * rate
            key = (principal.name, "own")
        else:
            rate, burst = self._defaults[kind]
            key = (principal.name, kind)
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = TokenBucket(rate, burst, now)
            if len(self._buckets) > self._max:
                self._buckets.popitem(last=False)
        else:
            self._buckets.move_to_end(key)
        wait = bucket.take(now)
        if wait > 0:
            retry = max(1, math.ceil(wait)) if math.isfinite(wait) else 60
            raise RateLimited(f"Rate limit of {rate:g} requests/s for this key exceeded.", retry_after=retry)

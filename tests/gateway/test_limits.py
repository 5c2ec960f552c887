"""Token buckets with an injected clock, and 429 + Retry-After over HTTP."""

from __future__ import annotations

import httpx
import pytest

from engine.core.errors import RateLimited
from gateway.app import create_app
from gateway.auth import Principal, Role
from gateway.limits import RateLimiter, TokenBucket
from tests.gateway.conftest import H, settings


class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t


def test_bucket_refills_and_caps():
    b = TokenBucket(rate_per_s=10, burst=3, now=0.0)
    assert [b.take(0.0) for _ in range(3)] == [0.0, 0.0, 0.0]
    assert b.take(0.0) == pytest.approx(0.1)
    assert b.take(0.1) == 0.0
    assert b.take(100.0) == 0.0 and b.tokens == pytest.approx(2.0)  # capped at burst


def test_limiter_separates_reads_writes_and_credentials():
    clock = Clock()
    lim = RateLimiter(read=(100, 5), write=(1, 2), clock=clock)
    gs = Principal("gs", Role.GAME_SERVER)
    other = Principal("gs2", Role.GAME_SERVER)
    lim.check(gs, "write")
    lim.check(gs, "write")
    with pytest.raises(RateLimited) as ei:
        lim.check(gs, "write")
    assert ei.value.retry_after >= 1 and isinstance(ei.value.retry_after, int)
    lim.check(gs, "read")  # reads have their own bucket
    lim.check(other, "write")  # and every credential its own
    clock.t += 1.0
    lim.check(gs, "write")


def test_key_entry_rate_overrides_defaults():
    clock = Clock()
    lim = RateLimiter(read=(1, 1), write=(1, 1), clock=clock)
    fast = Principal("web", Role.READER, rate_per_s=1000, burst=None)  # burst defaults to 2 x rate
    for _ in range(2000):
        lim.check(fast, "read")
    with pytest.raises(RateLimited):
        lim.check(fast, "read")


@pytest.mark.anyio
async def test_http_429_with_retry_after(engines):
    clock = Clock()
    engine = await engines()
    app = create_app(settings(write_rate_per_s=1, write_burst=2, read_rate_per_s=1, read_burst=3), engine, clock=clock)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
        codes = [(await c.get("/v1/boards", headers=H("reader"))).status_code for _ in range(4)]
        assert codes == [200, 200, 200, 429]
        r = await c.get("/v1/boards", headers=H("reader"))
        assert r.status_code == 429 and r.json()["error"]["code"] == "RATE_LIMITED"
        assert int(r.headers["Retry-After"]) >= 1
        # health endpoints are never limited
        assert [(await c.get("/healthz")).status_code for _ in range(10)] == [200] * 10
        clock.t += 1.0
        assert (await c.get("/v1/boards", headers=H("reader"))).status_code == 200

"""Overload: rate limits, a full ingest queue, bounded memory and read latency.

* A burst far above a credential's rate → 429 RATE_LIMITED with Retry-After
  for that credential only; other credentials keep getting 200.
* A tiny ``max_queued_events`` and a stalled fsync (the fault hook blocks the
  log writer) → the write burst beyond the queue gets 503 OVERLOADED with
  Retry-After, the depth shows in /metrics, and once the disk moves again
  every admitted request is answered 200, nothing crashed.
* RSS after a large burst stays within a generous bound; p99 of admitted
  reads during a write flood stays under a generous ceiling (both printed).
"""

from __future__ import annotations

import asyncio
import os
import re
import threading
import time

import psutil
import pytest

from tests.reliability.common import BOARD, H, event, open_app

pytestmark = pytest.mark.anyio


async def test_burst_above_rate_is_429_with_retry_after_for_that_key_only():
    kw = dict(read_rate_per_s=5.0, read_burst=5.0, write_rate_per_s=2.0, write_burst=2.0)
    async with open_app(settings_kw=kw) as a:
        await a.seed(0)
        started = time.monotonic()
        reads = await asyncio.gather(*(a.client.get(f"/v1/boards/{BOARD}/top", headers=H("reader"))
                                       for _ in range(200)))
        elapsed = time.monotonic() - started
        codes = [r.status_code for r in reads]
        # the burst, plus what the bucket refilled while the 200 requests ran (a cold
        # process loads its compiled kernels on the first reads), never more
        assert elapsed < 5, elapsed  # else the bound below would say little
        allowed = 5 + int(5.0 * elapsed) + 1
        assert codes.count(200) <= allowed and codes.count(429) >= 200 - allowed, (codes, elapsed)
        assert set(codes) <= {200, 429}
        limited = next(r for r in reads if r.status_code == 429)
        assert limited.json()["error"]["code"] == "RATE_LIMITED"
        assert int(limited.headers["Retry-After"]) >= 1
        # Another credential has its own bucket.
        r = await a.client.get(f"/v1/boards/{BOARD}/top", headers=H("moderator"))
        assert r.status_code == 200
        # Writes: the limited requests changed nothing.
        before = await a.fingerprint()
        posts = await asyncio.gather(*(a.client.post("/v1/events", json={"events": [event(i)]},
                                                     headers=H("game_server")) for i in range(50)))
        ok = [r for r in posts if r.status_code == 200]
        assert all(r.status_code in (200, 429) for r in posts)
        assert 1 <= len(ok) <= 3
        assert all(r.headers.get("Retry-After") for r in posts if r.status_code == 429)
        after = await a.fingerprint()
        assert after[0] == before[0] + len(ok)


def _gauge(text: str, name: str) -> float | None:
    m = re.search(rf"^{name}(?:{{[^}}]*}})? ([0-9.e+-]+)$", text, re.M)
    return float(m.group(1)) if m else None


async def test_full_ingest_queue_is_503_overloaded_and_depth_is_in_metrics(tmp_path):
    gate = threading.Event()
    gate.set()

    def stall(op: str, path: str) -> None:
        if op == "fsync":
            gate.wait(30)

    engine_kw = {"data_dir": str(tmp_path / "d"), "fault_hook": stall, "max_queued_events": 20}
    async with open_app(engine_kw=engine_kw) as a:
        await a.seed(5)
        gate.clear()  # the log writer now blocks at its next fsync
        posts = [asyncio.create_task(a.client.post("/v1/events", json={"events": [event(100 + 5 * i + k)
                                                                                  for k in range(5)]},
                                                   headers=H("game_server"))) for i in range(40)]
        await asyncio.sleep(0.3)
        metrics = (await a.client.get("/metrics")).text
        depth = _gauge(metrics, "flowrank_ingest_queue_depth")
        print(f"queue depth while stalled: {depth}")
        assert depth is not None and depth > 0
        # Reads still answer while the writer is stalled.
        r = await a.client.get(f"/v1/boards/{BOARD}/top?limit=3", headers=H("reader"))
        assert r.status_code == 200
        assert (await a.client.get("/healthz")).status_code == 200
        gate.set()
        done = await asyncio.gather(*posts)
        codes = [r.status_code for r in done]
        print(f"burst answers: {codes.count(200)} x 200, {codes.count(503)} x 503")
        assert set(codes) <= {200, 503}, codes
        assert codes.count(503) >= 10
        for r in done:
            if r.status_code == 503:
                assert r.json()["error"]["code"] == "OVERLOADED"
                assert int(r.headers["Retry-After"]) >= 1
        accepted = sum(5 for r in done if r.status_code == 200)
        board = (await a.client.get(f"/v1/boards/{BOARD}", headers=H("reader"))).json()
        assert board["version"] == 5 + accepted  # every 200 applied, no 503 did
        # No crash: the service goes on.
        r = await a.client.post("/v1/events", json={"events": [event(999)]}, headers=H("game_server"))
        assert r.status_code == 200
        assert _gauge((await a.client.get("/metrics")).text, "flowrank_ingest_queue_depth") == 0


async def test_memory_stays_bounded_and_read_p99_under_a_write_flood():
    proc = psutil.Process(os.getpid())
    async with open_app(settings_kw=dict(write_rate_per_s=1e6, write_burst=1e6, read_rate_per_s=1e6,
                                         read_burst=1e6),
                        engine_kw={"data_dir": None, "max_queued_events": 2_000}) as a:
        await a.seed(50)
        # warm up
        for _ in range(20):
            await a.client.get(f"/v1/boards/{BOARD}/top?limit=10", headers=H("reader"))
        rss0 = proc.memory_info().rss
        stop = asyncio.Event()
        codes: dict[int, int] = {}
        lat: list[float] = []

        async def flood(w: int):
            n = 0
            while not stop.is_set():
                evs = [event(1_000_000 * (w + 1) + n + k, player=f"q-{(n + k) % 5000}") for k in range(200)]
                n += 200
                r = await a.client.post("/v1/events", json={"events": evs}, headers=H("game_server"))
                codes[r.status_code] = codes.get(r.status_code, 0) + 1
                # Over ASGITransport a refused request may complete without ever
                # suspending; yield so the timer and the readers get to run.
                await asyncio.sleep(0.005 if r.status_code != 200 else 0)

        async def reader():
            while not stop.is_set():
                t0 = time.perf_counter()
                r = await a.client.get(f"/v1/boards/{BOARD}/top?limit=10", headers=H("reader"))
                if r.status_code == 200:
                    lat.append(time.perf_counter() - t0)
                await asyncio.sleep(0)

        tasks = [asyncio.create_task(flood(w)) for w in range(16)] + [asyncio.create_task(reader())
                                                                       for _ in range(2)]
        await asyncio.sleep(6.0)
        stop.set()
        await asyncio.gather(*tasks)
        rss1 = proc.memory_info().rss
        lat.sort()
        p99 = lat[int(0.99 * (len(lat) - 1))]
        board = (await a.client.get(f"/v1/boards/{BOARD}", headers=H("reader"))).json()
        print(f"flood: answers {codes}, board size {board['size']}, reads {len(lat)}, "
              f"read p50 {lat[len(lat) // 2] * 1000:.1f} ms p99 {p99 * 1000:.1f} ms, "
              f"RSS {rss0 / 2**20:.0f} -> {rss1 / 2**20:.0f} MiB")
        assert set(codes) <= {200, 503}, codes
        assert codes.get(200, 0) > 0
        assert len(lat) >= 20
        assert p99 < 2.5, f"read p99 {p99:.3f}s"
        # ~5,000 players and a bounded dedup/delta window: generous bound.
        assert rss1 - rss0 < 400 * 2**20, f"RSS grew by {(rss1 - rss0) / 2**20:.0f} MiB"
        assert (await a.client.get("/healthz")).status_code == 200

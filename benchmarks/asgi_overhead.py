"""Per-request cost of the gateway's layers, measured in process (no sockets).

    python -m benchmarks.asgi_overhead [--size 50000] [--requests 3000] [--repeat 5] [--seed 7]

Calls the ASGI app directly with a prepared scope (what uvicorn would hand
it) for a top-100 page and an exact rank on a LocalService board, so what is
timed is the gateway's own Python: routing, guard, validation, encoding,
metrics. Rows (µs per request, min/median/max over ``--repeat``):

* ``lean``: the default app (gateway.hot dispatches the route);
* ``fastapi``: the same app with ``lean_routes=False`` (FastAPI routing,
  dependency solving, GuardedRoute, MetricsMiddleware, Response classes);
* ``fastapi - metrics``: that without MetricsMiddleware;
* the pieces alone: authenticate + authorize + rate limit, one metrics
  observation, encoding a cached top-100 body with ``json`` vs ``orjson``,
  a hit in the encoded-page cache, and MetricsMiddleware alone (a no-op ASGI
  app with and without it).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import time

import orjson

from benchmarks.machine import header

BOARD = "bench:asgi:S1:x"
KEY = "bench-admin"


def _scope(method: str, path: str, query: bytes = b"") -> dict:
    return {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method, "scheme": "http",
            "path": path, "raw_path": path.encode(), "root_path": "", "query_string": query,
            "headers": [(b"host", b"127.0.0.1"), (b"authorization", f"Bearer {KEY}".encode()),
                        (b"user-agent", b"wrk")],
            "client": ("127.0.0.1", 5000), "server": ("127.0.0.1", 8000), "state": {}}


async def _drive(app, scope: dict, n: int) -> float:
    """µs per request for ``n`` sequential requests of ``scope``."""
    status = []

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        if message["type"] == "http.response.start":
            status.append(message["status"])

    t0 = time.perf_counter()
    for _ in range(n):
        await app(dict(scope, state={}), receive, send)
    dt = time.perf_counter() - t0
    if set(status) != {200}:
        raise RuntimeError(f"unexpected statuses {sorted(set(status))} for {scope['path']}")
    return dt / n * 1e6


def _timeit(fn, n: int) -> float:
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t0) / n * 1e6


async def run(args) -> list[tuple[str, list[float]]]:
    from engine.runtime.local import LocalService
    from gateway.app import create_app
    from gateway.auth import Permission
    from gateway.settings import Settings
    from gateway.validation import encode_cursor
    from gateway import render

    rnd = random.Random(args.seed)
    keys = ({"name": "a", "role": "admin", "key": KEY, "rate_per_s": 1e12},)
    engine = await LocalService.open(data_dir=None, n_shards=1)
    try:
        lean = create_app(Settings(keys=keys, data_dir=None), engine)
        full = create_app(Settings(keys=keys, data_dir=None, lean_routes=False), engine)
        bare = create_app(Settings(keys=keys, data_dir=None, lean_routes=False), engine)
        bare.user_middleware = [m for m in bare.user_middleware if m.cls.__name__ != "MetricsMiddleware"]
        from engine.core.model import BoardSpec, Policy, ScoreEvent
        await engine.create_board(BoardSpec(board_id=BOARD, policy=Policy.BEST_SCORE))
        base = 1_793_527_200_000
        for start in range(0, args.size, 5000):
            await engine.submit([ScoreEvent(BOARD, f"e{i}", f"p{i}", rnd.randrange(1_000_000), base + i, base + i)
                                 for i in range(start, min(args.size, start + 5000))])
        top = _scope("GET", f"/v1/boards/{BOARD}/top", b"limit=100")
        rank = _scope("GET", f"/v1/boards/{BOARD}/players/p{args.size // 2}")
        rows: dict[str, list[float]] = {}
        for _ in range(args.repeat):
            for label, app in (("lean", lean), ("fastapi", full), ("fastapi - metrics", bare)):
                await _drive(app, top, 50)  # warm-up (middleware stack, caches)
                rows.setdefault(f"top-100     {label}", []).append(await _drive(app, top, args.requests))
                rows.setdefault(f"exact rank  {label}", []).append(await _drive(app, rank, args.requests))
        g = lean.state.gateway
        page = await engine.top(BOARD, 0, 101)
        body = {"version": page.version, "entries": render.entries(page.entries[:100]),
                "next_cursor": encode_cursor(page.version, 100)}
        n = args.requests * 10

        def guard():
            p = g.credentials.authenticate(f"Bearer {KEY}", b"limit=100")  # as gateway.hot calls it
            g.credentials.authorize(p, Permission.READ, "GET", BOARD)
            g.limiter.check(p, "read")

        async def noop(scope, receive, send):
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-length", b"2"), (b"content-type", b"application/json")]})
            await send({"type": "http.response.body", "body": b"{}"})

        from gateway.metrics import MetricsMiddleware
        wrapped = MetricsMiddleware(noop, lambda: g.metrics)

        async def _asgi_loop(app, n: int) -> float:
            async def receive():
                return {"type": "http.request", "body": b"", "more_body": False}

            async def send(message):
                return None

            t0 = time.perf_counter()
            for _ in range(n):
                await app(top, receive, send)
            return (time.perf_counter() - t0) / n * 1e6

        key = (BOARD, page.version, 0, 100)
        g.pages.put(key, orjson.dumps(body))
        for _ in range(args.repeat):
            rows.setdefault("guard (auth + role + rate limit)", []).append(_timeit(guard, n))
            rows.setdefault("metrics.observe", []).append(
                _timeit(lambda: g.metrics.observe("/v1/boards/{board_id}/top", "GET", 200, 0.001), n))
            rows.setdefault("render top-100 entries", []).append(
                _timeit(lambda: render.entries(page.entries[:100]), args.requests))
            rows.setdefault("encode top-100: json.dumps", []).append(
                _timeit(lambda: json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode(), args.requests))
            rows.setdefault("encode top-100: orjson.dumps", []).append(_timeit(lambda: orjson.dumps(body), n))
            rows.setdefault("encoded-page cache hit", []).append(_timeit(lambda: g.pages.get(key), n))
            rows.setdefault("MetricsMiddleware (around a no-op app)", []).append(
                await _asgi_loop(wrapped, n) - await _asgi_loop(noop, n))
        return list(rows.items())
    finally:
        await engine.close()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=50_000)
    ap.add_argument("--requests", type=int, default=3000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args(argv)
    print(header(vars(args)), flush=True)
    rows = asyncio.run(run(args))
    print(f"\n{'µs per request (in process)':<36} {'min':>8} {'median':>8} {'max':>8}")
    for name, xs in rows:
        print(f"{name:<36} {min(xs):8.1f} {statistics.median(xs):8.1f} {max(xs):8.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

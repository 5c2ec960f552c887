"""HTTP load against ``flowrank serve``: mixed traffic and the write path.

    python -m benchmarks.http_load [--engine ray|local] [--shards 1,4] [--size 10000]
        [--duration 5] [--max-requests 100000] [--concurrency 32] [--clients 1]
        [--repeat 3] [--seed 7] [--no-redis] [--mixes top+player+around,player+around]

Bounded and loopback-only: it starts its own ``flowrank serve`` on
127.0.0.1 (a free port, a temp data dir, its own Ray temp dir; SIGTERM then
SIGKILL of its process group at the end), each run stops after
``--duration`` seconds or ``--max-requests`` requests, whichever is first.

Per shard count (one board per count on one server):

* **mixed**: 5 % writes (``POST /v1/events``, batches of 100) and 95 % reads,
  split evenly between ``top?limit=100``, ``players/{p}`` (exact rank) and
  ``players/{p}/around?radius=5`` (``--mixes``: also without ``top``, to
  separate the cost of the engine's top pages from the rest), from
  ``--concurrency`` asyncio workers sharing one httpx client per client
  process (``--clients``).
* **writes**: the write path alone, batches of 1,000 events.

Then the same reads through one Redis client against a private
``redis-server`` holding the same players (:class:`benchmarks.redis_peer.RedisBoard`),
for scale. Prints a header (machine, versions, parameters, seed) and, per
row, the median over ``--repeat`` runs (min and max of the rate too).

The load generator shares the machine with the server: on a small machine
the client's own CPU use caps what is measured (see ``client_cpu`` in the
output: the fraction of a core the load generator used).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from benchmarks.machine import header
from benchmarks.processes import Owned
from benchmarks.redis_peer import _free_port

BASE_MS = 1_793_527_200_000
READ_KEY, WRITE_KEY, ADMIN_KEY = "bench-reader", "bench-gs", "bench-admin"
ROUTES = ("top", "player", "around", "events")


def pct(samples: list[float], q: float) -> float:
    if not samples:
        return float("nan")
    s = sorted(samples)
    return s[min(len(s) - 1, int(q * len(s)))]


# --------------------------------------------------------------------------- server


class Server:
    """``flowrank serve`` in its own session on a loopback port."""

    def __init__(self, engine: str, shard_actors: int, extra: list[str] | None = None):
        self.tmp = Path(tempfile.mkdtemp(prefix="fr-http-"))
        self.ray_tmp = tempfile.mkdtemp(prefix="fr-hl-", dir="/tmp")
        keys = [{"name": "r", "role": "reader", "key": READ_KEY, "rate_per_s": 10_000_000},
                {"name": "g", "role": "game_server", "key": WRITE_KEY, "rate_per_s": 10_000_000},
                {"name": "a", "role": "admin", "key": ADMIN_KEY, "rate_per_s": 10_000_000}]
        (self.tmp / "keys.json").write_text(json.dumps({"keys": keys}))
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = dict(os.environ, RAY_AUTH_MODE="disabled", RAY_TMPDIR=self.ray_tmp, RAY_USAGE_STATS_ENABLED="0")
        env.pop("RAY_ADDRESS", None)
        cmd = [sys.executable, "-m", "gateway", "serve", "--host", "127.0.0.1", "--port", str(self.port),
               "--data-dir", str(self.tmp / "data"), "--keys", str(self.tmp / "keys.json"), "--engine", engine,
               "--shard-actors", str(shard_actors), *(extra or [])]
        self.log = open(self.tmp / "serve.log", "w")
        # Its own session and a marker (benchmarks.processes): stop() ends the
        # gateway and its embedded Ray, and a failed start stops it before raising.
        self.owned = Owned(cmd, env=env, stdout=self.log, stderr=subprocess.STDOUT, grace_s=30)
        self.proc = self.owned.start()
        try:
            self._wait_ready(time.monotonic() + 120)
        except BaseException:
            self.stop()
            raise

    def _wait_ready(self, deadline: float) -> None:
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("flowrank serve exited:\n" + (self.tmp / "serve.log").read_text()[-3000:])
            try:
                if httpx.get(f"{self.url}/readyz", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        raise RuntimeError("flowrank serve not ready after 120 s")

    def cpu_seconds(self) -> float:
        """CPU time (user + system) of every live process in the server's group
        (the gateway and, with Ray, its raylet, GCS and actors)."""
        tick = os.sysconf("SC_CLK_TCK")
        total = 0.0
        for d in Path("/proc").iterdir():
            if not d.name.isdigit():
                continue
            try:
                fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == self.proc.pid:  # field 5 (pgrp), after pid and (comm)
                total += (int(fields[11]) + int(fields[12])) / tick
        return total

    def stop(self) -> None:
        """SIGTERM (graceful), then SIGKILL to whatever is left of it. Idempotent."""
        self.owned.stop()
        self.log.close()
        shutil.rmtree(self.tmp, ignore_errors=True)
        shutil.rmtree(self.ray_tmp, ignore_errors=True)


# --------------------------------------------------------------------------- workload


def board_id(shards: int) -> str:
    return f"bench:http:S1:shards{shards}"


def preload(url: str, board: str, shards: int, size: int, seed: int, review_above: int | None = None) -> None:
    """Create ``board`` and give it ``size`` players; with ``review_above`` also one
    held event, so its quarantine is not empty when the measurement starts."""
    rnd = random.Random(seed)
    with httpx.Client(base_url=url, timeout=120) as c:
        r = c.post("/v1/boards", json={"board_id": board, "policy": "best_score", "shards": shards,
                                       "review_above": review_above},
                   headers={"Authorization": f"Bearer {ADMIN_KEY}"})
        r.raise_for_status()
        if review_above is not None:
            c.post("/v1/events", json={"events": [{"event_id": "pre-held", "board_id": board, "player_id": "p0",
                                                   "value": review_above + 1, "achieved_at": BASE_MS}]},
                   headers={"Authorization": f"Bearer {WRITE_KEY}"}).raise_for_status()
        for start in range(0, size, 1000):
            events = [{"event_id": f"pre-{i}", "board_id": board, "player_id": f"p{i}",
                       "value": rnd.randrange(1_000_000), "achieved_at": BASE_MS + i}
                      for i in range(start, min(size, start + 1000))]
            c.post("/v1/events", json={"events": events},
                   headers={"Authorization": f"Bearer {WRITE_KEY}"}).raise_for_status()


async def _mixed_worker(c: httpx.AsyncClient, board: str, size: int, rnd: random.Random, state: dict,
                        lat: dict[str, list[float]], write_share: float, tag: str) -> None:
    rh = {"Authorization": f"Bearer {READ_KEY}"}
    wh = {"Authorization": f"Bearer {WRITE_KEY}"}
    while time.perf_counter() < state["until"] and state["left"] > 0:
        state["left"] -= 1
        x = rnd.random()
        if x < write_share:
            route = "events"
            n = state["written"]
            state["written"] += 100
            body = {"events": [{"event_id": f"w{tag}-{n + i}", "board_id": board,
                                "player_id": f"p{rnd.randrange(size)}", "value": rnd.randrange(1_000_000),
                                "achieved_at": BASE_MS + size + n + i} for i in range(100)]}
            t = time.perf_counter()
            r = await c.post("/v1/events", json=body, headers=wh)
        else:
            p = f"p{rnd.randrange(size)}"
            route = rnd.choice(state["reads"])
            if route == "top":
                path, params = f"/v1/boards/{board}/top", {"limit": 100}
            elif route == "player":
                path, params = f"/v1/boards/{board}/players/{p}", None
            else:
                path, params = f"/v1/boards/{board}/players/{p}/around", {"radius": 5}
            t = time.perf_counter()
            r = await c.get(path, params=params, headers=rh)
        dt = time.perf_counter() - t
        if r.status_code != 200:
            state["errors"] += 1
        lat[route].append(dt)


async def _write_worker(c: httpx.AsyncClient, board: str, size: int, rnd: random.Random, state: dict,
                        lat: dict[str, list[float]], tag: str) -> None:
    wh = {"Authorization": f"Bearer {WRITE_KEY}"}
    while time.perf_counter() < state["until"] and state["left"] > 0:
        state["left"] -= 1
        n = state["written"]
        state["written"] += 1000
        body = {"events": [{"event_id": f"x{tag}-{n + i}", "board_id": board, "player_id": f"p{rnd.randrange(size)}",
                            "value": rnd.randrange(1_000_000), "achieved_at": BASE_MS + size + n + i}
                           for i in range(1000)]}
        body_bytes = json.dumps(body).encode()
        t = time.perf_counter()
        r = await c.post("/v1/events", content=body_bytes, headers={**wh, "Content-Type": "application/json"})
        lat["events"].append(time.perf_counter() - t)
        if r.status_code != 200:
            state["errors"] += 1
        else:
            state["events"] += 1000


async def _client_run(url: str, kind: str, board: str, size: int, seed: int, duration: float, cap: int,
                      concurrency: int, tag: str, reads: tuple = ("top", "player", "around"),
                      write_share: float = 0.05) -> dict:
    lat: dict[str, list[float]] = {r: [] for r in ROUTES}
    state = {"until": time.perf_counter() + duration, "left": cap, "written": 0, "errors": 0, "events": 0,
             "reads": list(reads)}
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    cpu0 = time.process_time()
    async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits) as c:
        started = time.perf_counter()
        workers = []
        for w in range(concurrency):
            rnd = random.Random(seed * 1000 + w)
            if kind == "mixed":
                workers.append(_mixed_worker(c, board, size, rnd, state, lat, write_share, f"{tag}.{w}"))
            else:
                workers.append(_write_worker(c, board, size, rnd, state, lat, f"{tag}.{w}"))
        await asyncio.gather(*workers)
        elapsed = time.perf_counter() - started
    return {"lat": lat, "elapsed": elapsed, "errors": state["errors"], "events": state["events"],
            "cpu": time.process_time() - cpu0}


def _client_proc(args: tuple) -> dict:
    return asyncio.run(_client_run(*args))


def run_load(server: "Server", kind: str, board: str, size: int, seed: int, duration: float, cap: int,
             concurrency: int, clients: int, tag: str, reads: tuple = ("top", "player", "around"),
             write_share: float = 0.05) -> dict:
    """One measured run over ``clients`` processes; merged latencies and rates."""
    url = server.url
    cpu0 = server.cpu_seconds()
    per = [(url, kind, board, size, seed + i, duration, max(1, cap // clients), max(1, concurrency // clients),
            f"{tag}c{i}", reads, write_share) for i in range(clients)]
    if clients == 1:
        outs = [_client_proc(per[0])]
    else:
        with mp.get_context("spawn").Pool(clients) as pool:
            outs = pool.map(_client_proc, per)
    server_cpu = server.cpu_seconds() - cpu0
    lat = {r: [x for o in outs for x in o["lat"][r]] for r in ROUTES}
    elapsed = max(o["elapsed"] for o in outs)
    n_req = sum(len(v) for v in lat.values())
    reads = sum(len(lat[r]) for r in ("top", "player", "around"))
    return {
        "lat": lat, "elapsed": elapsed, "errors": sum(o["errors"] for o in outs),
        "req_s": sum(len(v) for v in lat.values()) / elapsed, "reads_s": reads / elapsed,
        "events_s": sum(o["events"] for o in outs) / elapsed, "client_cpu": sum(o["cpu"] for o in outs) / elapsed,
        "server_cpu": server_cpu / elapsed, "server_ms_per_req": 1000 * server_cpu / max(1, n_req),
    }


# --------------------------------------------------------------------------- redis peer


def redis_reads(size: int, seed: int, duration: float, cap: int, reads: tuple = ("top", "player", "around")) -> dict:
    """The same read mix through one synchronous Redis client (RedisBoard)."""
    from benchmarks.redis_peer import RedisBoard, RedisServer  # noqa: PLC0415

    rnd = random.Random(seed)
    with RedisServer() as srv:
        board = RedisBoard(srv.client(), "bench:http:S1:redis")
        board.ingest([("bench:http:S1:redis", f"pre-{i}", f"p{i}", rnd.randrange(1_000_000), BASE_MS + i,
                       BASE_MS + i) for i in range(size)])
        lat: dict[str, list[float]] = {r: [] for r in ROUTES}
        until, left = time.perf_counter() + duration, cap
        started = time.perf_counter()
        while time.perf_counter() < until and left > 0:
            left -= 1
            route = rnd.choice(reads)
            p = f"p{rnd.randrange(size)}"
            t = time.perf_counter()
            if route == "top":
                board.top(100)
            elif route == "player":
                board.rank(p)
            else:
                board.around(p, 5)
            lat[route].append(time.perf_counter() - t)
        elapsed = time.perf_counter() - started
    reads = sum(len(v) for v in lat.values())
    return {"lat": lat, "elapsed": elapsed, "errors": 0, "req_s": reads / elapsed, "reads_s": reads / elapsed,
            "events_s": 0.0, "client_cpu": float("nan"), "server_cpu": float("nan"),
            "server_ms_per_req": float("nan")}


# --------------------------------------------------------------------------- report


def summarize(name: str, runs: list[dict], rate_key: str) -> list[str]:
    rates = [r[rate_key] for r in runs]
    lines = [f"{name:<28} {rate_key}: median {statistics.median(rates):>10,.0f}  (min {min(rates):,.0f}, "
             f"max {max(rates):,.0f})  req/s {statistics.median(r['req_s'] for r in runs):,.0f}  "
             f"errors {sum(r['errors'] for r in runs)}  client_cpu {statistics.median(r['client_cpu'] for r in runs):.2f}  "
             f"server_cpu {statistics.median(r['server_cpu'] for r in runs):.2f}  "
             f"server_ms/req {statistics.median(r['server_ms_per_req'] for r in runs):.2f}"]
    for route in ROUTES:
        if not any(r["lat"][route] for r in runs):
            continue
        p = {q: statistics.median(pct(r["lat"][route], q) * 1000 for r in runs) for q in (0.5, 0.95, 0.99)}
        n = statistics.median(len(r["lat"][route]) / r["elapsed"] for r in runs)
        lines.append(f"    {route:<8} {n:>9,.0f}/s   p50 {p[0.5]:7.2f} ms   p95 {p[0.95]:7.2f} ms   "
                     f"p99 {p[0.99]:7.2f} ms")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.http_load", description=__doc__.split("\n\n")[0])
    ap.add_argument("--engine", choices=("ray", "local"), default="ray")
    ap.add_argument("--shards", default="1,4", help="board partition counts (one board each)")
    ap.add_argument("--shard-actors", type=int, default=4, help="engine shard actors/cores hosting partitions")
    ap.add_argument("--size", type=int, default=10_000, help="players preloaded per board")
    ap.add_argument("--duration", type=float, default=5.0, help="seconds per measured run")
    ap.add_argument("--max-requests", type=int, default=100_000, help="request cap per measured run")
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--write-concurrency", type=int, default=4)
    ap.add_argument("--clients", type=int, default=1, help="load-generator processes")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--no-redis", action="store_true")
    ap.add_argument("--write-share", type=float, default=0.05, help="share of mixed requests that write 100 events")
    ap.add_argument("--mixes", default="top+player+around,player+around",
                    help="read mixes to run, comma-separated; reads are drawn evenly from each '+'-list")
    args = ap.parse_args(argv)
    mixes = args.mixes.split(",")
    shard_counts = [int(x) for x in args.shards.split(",")]
    params = {k: v for k, v in vars(args).items()}
    print(header(params), flush=True)
    print(f"  command : python -m benchmarks.http_load {' '.join(argv if argv is not None else sys.argv[1:])}")
    print("  targets : >= 3,000 reads/s per gateway process with p99 <= 50 ms; >= 50,000 events/s (batches of 1,000)")
    print(flush=True)
    server = Server(args.engine, args.shard_actors)
    try:
        for shards in shard_counts:
            board = board_id(shards)
            preload(server.url, board, shards, args.size, args.seed)
            # warm-up (connections, caches, JIT-free but import-heavy paths)
            run_load(server, "mixed", board, args.size, args.seed, 1.0, 2_000, args.concurrency, args.clients,
                     f"warm{shards}")
            for mix in mixes:
                runs = [run_load(server, "mixed", board, args.size, args.seed + r, args.duration,
                                 args.max_requests, args.concurrency, args.clients, f"m{shards}{mix}r{r}",
                                 tuple(mix.split("+")), args.write_share) for r in range(args.repeat)]
                print("\n".join(summarize(f"mixed {mix} shards={shards}", runs, "reads_s")), flush=True)
            writes = [run_load(server, "writes", board, args.size, args.seed + r, args.duration,
                               max(1, args.max_requests // 100), args.write_concurrency, 1, f"w{shards}r{r}")
                      for r in range(args.repeat)]
            print("\n".join(summarize(f"writes x1000 shards={shards}", writes, "events_s")), flush=True)
    finally:
        server.stop()
    if not args.no_redis:
        try:
            for mix in mixes:
                peer = [redis_reads(args.size, args.seed + r, args.duration, args.max_requests, tuple(mix.split("+")))
                        for r in range(args.repeat)]
                print("\n".join(summarize(f"redis peer {mix}, one client", peer, "reads_s")), flush=True)
        except Exception as exc:  # e.g. no redis-server on this machine
            print(f"redis peer: skipped ({type(exc).__name__}: {exc})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

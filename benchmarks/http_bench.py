"""``python -m benchmarks http``: FlowRank's HTTP front against a FastAPI + Redis peer, one run.

    python -m benchmarks http [--quick] [--size 50000] [--duration 10] [--connections 32]
                              [--partitions 1,4] [--workers 1,2] [--shard-actors 2] [--repeat 1]
                              [--write-connections 8] [--routes R1,R2] [--appends-in-flight N]
                              [--rank-mirror-rows N]
                              [--seed 7] [--out DIR]

(``--background``: reads beside a snapshot, journal run merges and an export instead,
:mod:`benchmarks.http_background`.)

In one run, on loopback:

1. ``flowrank serve --workers N`` (embedded Ray, its own ``RAY_TMPDIR``) for
   each ``--workers`` count in turn, with one best_score board per partition
   count, preloaded with ``--size`` players (1 worker: the gateway holds the
   engine; N > 1: N gateway processes on one port in front of the engine host
   actor, docs/http.md "Several gateways");
2. ``redis-server`` (``appendonly yes``, ``appendfsync always``) and the peer
   app (:mod:`benchmarks.http_peer`, uvicorn, one worker) with one board
   preloaded the same way (the peer has one sorted set: no partitions);
3. ``wrk -t1 -c<connections> --latency`` with the Lua scripts in
   ``benchmarks/wrk/`` against each side: top-100, exact rank and around
   (radius 5) of random players, then write batches of 500 fresh events;
   each route first gets ``--warmup`` seconds of unrecorded load.

Writes a table (``http.md``), the raw rows (``http.json``) and a plot
(``http.png``: req/s, p50 and p99 per route) to ``--out``. Every process it
starts is owned (:mod:`benchmarks.processes`: own session, environment marker)
by one :class:`contextlib.ExitStack` and stopped on every exit path (normal
end, error, Ctrl-C, SIGTERM); wrk runs are bounded by a timeout.

The table has one FlowRank row per (route, partitions, workers); a row with
more than one worker also gives its ratio to the 1-worker row.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from types import SimpleNamespace

import httpx

from benchmarks.http_load import ADMIN_KEY, READ_KEY, WRITE_KEY, board_id, preload
from benchmarks.http_wrk import ensure_wrk
from benchmarks.machine import describe, header
from benchmarks.processes import Owned, owned_process, sigterm_raises
from benchmarks.redis_peer import RedisServer, _free_port

WRK_DIR = Path(__file__).with_name("wrk")
FAN = "write batch of 500 for 4 boards"
ROUTES = ("top-100", "exact rank", "around", "write batch of 500", "write batch of 500 (held board)", FAN)
#: Routes only FlowRank has (the peer has no review holds): their ratio is to FlowRank's own plain-write row.
FLOWRANK_ONLY = {"write batch of 500 (held board)": "write batch of 500"}
#: The held board's review_above: writes.lua draws values uniformly in 0..1,999,999, so 1 % of events are held.
REVIEW_ABOVE = 1_980_000
QUICK = {"size": 5_000, "duration": 4}
FULL = {"size": 50_000, "duration": 10}


# --------------------------------------------------------------------------- processes


def _keys_file(directory: Path) -> Path:
    keys = [{"name": "r", "role": "reader", "key": READ_KEY, "rate_per_s": 10_000_000},
            {"name": "g", "role": "game_server", "key": WRITE_KEY, "rate_per_s": 10_000_000},
            {"name": "a", "role": "admin", "key": ADMIN_KEY, "rate_per_s": 10_000_000}]
    path = directory / "keys.json"
    path.write_text(json.dumps({"keys": keys}))
    return path


def _wait_ready(url: str, owned: Owned, log: Path, what: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        if owned.proc is None or owned.proc.poll() is not None:
            raise RuntimeError(f"{what} exited:\n" + log.read_text()[-3000:])
        try:
            if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} not ready after {timeout_s:.0f} s:\n" + log.read_text()[-3000:])
        time.sleep(0.1)


@contextlib.contextmanager
def _served(argv: list[str], env: dict, tmp: Path, what: str, port: int, timeout_s: float):
    """A server child owned by :class:`benchmarks.processes.Owned` (own session, marker, stopped on exit)."""
    log_path = tmp / "server.log"
    with open(log_path, "w") as log:
        owned = Owned(argv, env=env, stdout=log, stderr=subprocess.STDOUT, grace_s=30)
        try:
            owned.start()
            url = f"http://127.0.0.1:{port}"
            _wait_ready(url, owned, log_path, what, timeout_s)
            yield SimpleNamespace(url=url, pid=owned.pid)
        finally:
            try:
                owned.stop()
            except BaseException:  # SIGTERM/Ctrl-C while stop() waited for the child: sweep, then go on
                owned.stop(grace_s=0)  # the marker sweep (Owned.stop skips it when its wait is interrupted)
                raise
            finally:
                shutil.rmtree(tmp, ignore_errors=True)


@contextlib.contextmanager
def flowrank_server(shard_actors: int, workers: int = 1, extra: list[str] | None = None, env: dict | None = None):
    """``flowrank serve --workers N`` with an embedded Ray (its own RAY_TMPDIR), loopback, generous rate limits;
    ``env``: more environment for it (and the Ray workers it starts)."""
    tmp = Path(tempfile.mkdtemp(prefix="fr-httpb-"))
    ray_tmp = tempfile.mkdtemp(prefix="fr-hb-", dir="/tmp")
    port = _free_port()
    extra_env = env or {}
    env = dict(os.environ, RAY_AUTH_MODE="disabled", RAY_TMPDIR=ray_tmp, RAY_USAGE_STATS_ENABLED="0", **extra_env)
    env.pop("RAY_ADDRESS", None)
    argv = [sys.executable, "-m", "gateway", "serve", "--host", "127.0.0.1", "--port", str(port),
            "--data-dir", str(tmp / "data"), "--keys", str(_keys_file(tmp)), "--engine", "ray",
            "--shard-actors", str(shard_actors), "--workers", str(workers), *(extra or [])]
    try:
        with _served(argv, env, tmp, "flowrank serve", port, 180) as server:
            yield server
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)


@contextlib.contextmanager
def peer_server(redis_port: int):
    """The FastAPI + Redis peer (:mod:`benchmarks.http_peer`, uvicorn, one worker)."""
    tmp = Path(tempfile.mkdtemp(prefix="fr-peer-"))
    port = _free_port()
    argv = [sys.executable, "-m", "benchmarks.http_peer", "--redis-port", str(redis_port), "--port", str(port),
            "--keys", str(_keys_file(tmp))]
    with _served(argv, dict(os.environ), tmp, "peer", port, 60) as server:
        yield server


# --------------------------------------------------------------------------- wrk


def _ms(value: str, unit: str) -> float:
    v = float(value)
    return v / 1000 if unit == "us" else v * 1000 if unit == "s" else v


def run_wrk(wrk: str, url: str, script: str, env: dict, duration: int, connections: int, key: str) -> dict:
    """One wrk run; req/s, p50/p99 in ms, non-2xx count. The process is killed if it overruns."""
    argv = [wrk, "-t1", f"-c{connections}", f"-d{int(duration)}s", "--timeout", "10s", "--latency",
            "-s", str(WRK_DIR / script), "-H", f"Authorization: Bearer {key}", url]
    with owned_process(argv, env={**os.environ, **env}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True) as proc:
        out, err = proc.communicate(timeout=duration + 60)
    if proc.returncode != 0:
        raise RuntimeError(f"wrk exited with {proc.returncode}: {err[-2000:]}")
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    p50, p99 = re.search(r"50%\s+([\d.]+)(us|ms|s)", out), re.search(r"99%\s+([\d.]+)(us|ms|s)", out)
    return {
        "rps": float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1)),
        "p50_ms": _ms(*p50.groups()),
        "p99_ms": _ms(*p99.groups()),
        "non2xx": int(non2xx.group(1)) if non2xx else 0,
        "socket_errors": sum(int(x) for x in errors.groups()) if errors else 0,
    }


def held_board_id(shards: int) -> str:
    """The board with ``review_above`` (issue 25: a quarantine that is never empty)."""
    return f"bench:held:S1:shards{shards}"


def fan_boards(shards: int, now_ms: int, peer: bool) -> list[str]:
    """The 4 boards of the fan-out route (issue 26): all-time, daily, weekly, regional. FlowRank gets
    the daily and weekly series' ids and routes each event to its window's instance itself; the peer
    (no series) gets the ids of today's and this week's boards, as a game computes them."""
    day = datetime.fromtimestamp(now_ms / 1000, timezone.utc).date()
    monday = day - timedelta(days=day.weekday())
    daily = f"daily.{day:%Y%m%d}" if peer else "daily"
    weekly = f"weekly.{monday:%Y%m%d}" if peer else "weekly"
    return [f"bench:fan:S1:shards{shards}", f"bench:fan:{daily}:shards{shards}",
            f"bench:fan:{weekly}:shards{shards}", f"bench:fan:S1:eu{shards}"]


def create_fan_boards(url: str, shards: int, now_ms: int, peer: bool) -> list[str]:
    boards = fan_boards(shards, now_ms, peer)
    with httpx.Client(base_url=url, timeout=120, headers={"Authorization": f"Bearer {ADMIN_KEY}"}) as c:
        for board, every in zip(boards, (None, "day", "week", None)):
            body: dict = {"board_id": board, "policy": "best_score", "shards": shards}
            if every is not None and not peer:
                body["recurrence"] = {"every": every}
            c.post("/v1/boards", json=body).raise_for_status()
    return boards


def measure(wrk: str, base: str, board: str, size: int, args, nonce: str, held_board: str | None = None,
            fan: list[str] | None = None, now_ms: int = 0) -> dict:
    """Every route against one board at ``base``; median of ``--repeat`` runs per route. Without
    ``held_board`` (the peer) the FlowRank-only routes are skipped."""
    prefix = f"/v1/boards/{board}"
    plans = {
        "top-100": ("reads.lua", {"PREFIX": prefix, "SIZE": str(size), "ROUTE": "top"}, READ_KEY),
        "exact rank": ("reads.lua", {"PREFIX": prefix, "SIZE": str(size), "ROUTE": "player"}, READ_KEY),
        "around": ("reads.lua", {"PREFIX": prefix, "SIZE": str(size), "ROUTE": "around"}, READ_KEY),
        "write batch of 500": ("writes.lua", {"BOARD": board, "SIZE": str(size), "BATCH": "500"}, WRITE_KEY),
        "write batch of 500 (held board)": ("writes.lua", {"BOARD": held_board or "", "SIZE": str(size), "BATCH": "500"},
                                           WRITE_KEY),
        FAN: ("writes.lua", {"BOARDS": ",".join(fan or []), "SIZE": str(size), "BATCH": "500", "NOW_MS": str(now_ms)},
              WRITE_KEY),
    }
    out = {}
    for route in args.routes:
        if route in FLOWRANK_ONLY and held_board is None:
            continue
        script, env, key = plans[route]
        conns = args.write_connections if script == "writes.lua" else args.connections
        runs = []
        # Warm-up, not recorded: the first requests of a route build the
        # engine's pinned top view, compile numba kernels on first use and fill
        # caches (on either side); a running service is past that.
        run_wrk(wrk, base + prefix, script, {**env, "RUN": f"{nonce}-warm"}, args.warmup, conns, key)
        for i in range(args.repeat):
            env = {**env, "RUN": f"{nonce}-{i}"}
            runs.append(run_wrk(wrk, base + prefix, script, env, args.duration, conns, key))
        out[route] = {
            "rps": statistics.median(r["rps"] for r in runs),
            "p50_ms": statistics.median(r["p50_ms"] for r in runs),
            "p99_ms": statistics.median(r["p99_ms"] for r in runs),
            "non2xx": sum(r["non2xx"] for r in runs),
            "socket_errors": sum(r["socket_errors"] for r in runs),
            "runs": runs,
        }
        o = out[route]
        print(f"  {route:<19} {o['rps']:>9,.0f} req/s  p50 {o['p50_ms']:7.2f} ms  p99 {o['p99_ms']:7.2f} ms"
              f"  non-2xx {o['non2xx']}  socket errors {o['socket_errors']}", flush=True)
    return out


# --------------------------------------------------------------------------- report


def table(rows: list[dict]) -> str:
    lines = ["| route | partitions | workers | FlowRank req/s | p50 ms | p99 ms | peer req/s | p50 ms | p99 ms "
             "| req/s ratio | vs 1 worker |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    one = {(r["route"], r["partitions"]): r["flowrank"]["rps"] for r in rows if r.get("workers", 1) == 1}
    mine = {(r["route"], r["partitions"], r.get("workers", 1)): r["flowrank"]["rps"] for r in rows}
    for r in rows:
        f, p, w = r["flowrank"], r["peer"], r.get("workers", 1)
        base = one.get((r["route"], r["partitions"]))
        scale = f"{f['rps'] / base:.2f}x" if w > 1 and base else "–"
        if p is None:  # a FlowRank-only route: its ratio is to FlowRank's own row of the same server
            plain = mine.get((FLOWRANK_ONLY[r["route"]], r["partitions"], w))
            ratio = f"{f['rps'] / plain:.2f}x of plain writes" if plain else "–"
            peer = "– | – | –"
        else:
            ratio = f"{f['rps'] / p['rps']:.2f}x" if p["rps"] else "–"
            peer = f"{p['rps']:,.0f} | {p['p50_ms']:.2f} | {p['p99_ms']:.2f}"
        lines.append(f"| {r['route']} | {r['partitions']} | {w} | {f['rps']:,.0f} | {f['p50_ms']:.2f} "
                     f"| {f['p99_ms']:.2f} | {peer} | {ratio} | {scale} |")
    return "\n".join(lines)


def plot(rows: list[dict], path: Path, title: str) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    groups = [[r for r in rows if not r["route"].startswith("write")], [r for r in rows if r["route"].startswith("write")]]
    groups = [g for g in groups if g]
    fig, axes = plt.subplots(len(groups), 3, figsize=(15, 4.2 * len(groups)), squeeze=False)
    width = 0.38
    for row_axes, group in zip(axes, groups):
        xs = range(len(group))
        labels = [f"{r['route'].replace('write batch of 500', 'write ×500')}\n{r['partitions']}p {r.get('workers', 1)}w" for r in group]
        for ax, (metric, name) in zip(row_axes, (("rps", "requests/s"), ("p50_ms", "p50 latency (ms)"),
                                                 ("p99_ms", "p99 latency (ms)"))):
            ax.bar([x - width / 2 for x in xs], [r["flowrank"][metric] for r in group], width, label="FlowRank")
            ax.bar([x + width / 2 for x in xs], [r["peer"][metric] if r["peer"] else 0 for r in group], width,
                   label="FastAPI + Redis")
            ax.set_xticks(list(xs))
            ax.set_xticklabels(labels, fontsize=7, rotation=60 if len(group) > 8 else 0)
            ax.set_title(name, fontsize=10)
            if metric == "p99_ms" and group is groups[0]:
                ax.axhline(25, color="grey", lw=0.8, ls="--", label="25 ms")  # the p99 target for reads
        row_axes[0].legend(fontsize=8)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


# --------------------------------------------------------------------------- main


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m benchmarks http", description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help=f"small board, short runs ({QUICK})")
    ap.add_argument("--size", type=int, default=None, help=f"players per board (default {FULL['size']:,})")
    ap.add_argument("--duration", type=int, default=None, help=f"seconds per wrk run (default {FULL['duration']})")
    ap.add_argument("--connections", type=int, default=32, help="wrk connections for reads (default 32)")
    ap.add_argument("--write-connections", type=int, default=8,
                    help="wrk connections for write batches of 500 (default 8: a few game servers posting big batches)")
    ap.add_argument("--partitions", default="1,4", help="FlowRank board partition counts")
    ap.add_argument("--warmup", type=int, default=2, help="seconds of unrecorded load per route before its runs")
    ap.add_argument("--workers", default="1,2", help="FlowRank gateway worker counts, one server each (default 1,2)")
    ap.add_argument("--shard-actors", type=int, default=2, help="FlowRank shard actors (default 2)")
    ap.add_argument("--repeat", type=int, default=1, help="wrk runs per route (median reported)")
    ap.add_argument("--routes", default=",".join(ROUTES),
                    help="comma-separated routes to run (default all: " + ", ".join(ROUTES) + ")")
    ap.add_argument("--appends-in-flight", type=int, default=None, metavar="N",
                    help="flowrank serve --appends-in-flight N (default: the server's, 2; 1: one append at a time)")
    ap.add_argument("--rank-mirror-rows", type=int, default=None, metavar="N",
                    help="flowrank serve --rank-mirror-rows N (default: the server's, 4,000,000; 0: exact rank "
                         "always asks the shard actors, the path before the rank mirrors)")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--out", default=None, help="output directory (default results/http-<UTC time>)")
    return ap


def main(argv: list[str] | None = None) -> int:
    try:
        return _main(argv)
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM (benchmarks.processes.Terminated)
        print(f"\npython -m benchmarks http: interrupted ({exc or 'Ctrl-C'}); every process it started is stopped",
              file=sys.stderr)
        return 130


def _main(argv: list[str] | None) -> int:
    args = parser().parse_args(argv)
    base = QUICK if args.quick else FULL
    args.size = args.size or base["size"]
    args.duration = args.duration or base["duration"]
    partitions = [int(x) for x in args.partitions.split(",") if x]
    worker_counts = [int(x) for x in args.workers.split(",") if x]
    args.routes = [r.strip() for r in args.routes.split(",") if r.strip()]
    unknown = [r for r in args.routes if r not in ROUTES]
    if unknown:
        parser().error(f"unknown route(s) {unknown}; choose from {list(ROUTES)}")
    out = Path(args.out or f"results/http-{datetime.now(timezone.utc):%Y%m%d-%H%M%S}")
    machine = describe()
    params = {"quick": args.quick, "size": args.size, "duration_s": args.duration, "connections": args.connections,
              "write_connections": args.write_connections, "appends_in_flight": args.appends_in_flight,
              "rank_mirror_rows": args.rank_mirror_rows,
              "partitions": partitions, "shard_actors": args.shard_actors, "repeat": args.repeat,
              "warmup_s": args.warmup, "seed": args.seed, "routes": args.routes,
              "gateway_workers": worker_counts, "wrk_threads": 1}
    print(header(params, machine), flush=True)
    load_before = os.getloadavg()
    print(f"  load    : {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f} (1/5/15 min) before the run",
          flush=True)
    wrk = ensure_wrk()
    nonce = f"{int(time.time())}"
    results: dict = {"flowrank": {}, "peer": None}
    now_ms = int(time.time() * 1000)  # the fan-out route's events are achieved now: the series' current windows
    fanning = FAN in args.routes
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    with sigterm_raises(), contextlib.ExitStack() as stack:
        for w in worker_counts:
            print(f"\nFlowRank (flowrank serve --workers {w}, embedded Ray)", flush=True)
            extra = [] if args.appends_in_flight is None else ["--appends-in-flight", str(args.appends_in_flight)]
            extra += [] if args.rank_mirror_rows is None else ["--rank-mirror-rows", str(args.rank_mirror_rows)]
            fr = stack.enter_context(flowrank_server(args.shard_actors, w, extra))
            for p in partitions:
                preload(fr.url, board_id(p), p, args.size, args.seed)
                if any(r in FLOWRANK_ONLY for r in args.routes):
                    preload(fr.url, held_board_id(p), p, args.size, args.seed, review_above=REVIEW_ABOVE)
            for p in partitions:
                print(f" partitions={p} workers={w}", flush=True)
                fan = create_fan_boards(fr.url, p, now_ms, peer=False) if fanning else None
                results["flowrank"][(p, w)] = measure(wrk, fr.url, board_id(p), args.size, args, f"fr{p}w{w}-{nonce}",
                                                      held_board_id(p), fan, now_ms)
            stack.close()  # each FlowRank server down before the next, and before the peer: each gets the machine alone
        print("\nPeer (FastAPI + redis-py asyncio, redis-server appendfsync always, 1 worker)", flush=True)
        rs = stack.enter_context(RedisServer(appendonly=True, appendfsync="always"))
        peer = stack.enter_context(peer_server(rs.port))
        preload(peer.url, board_id(1), 1, args.size, args.seed)
        fan = create_fan_boards(peer.url, 1, now_ms, peer=True) if fanning else None
        results["peer"] = measure(wrk, peer.url, board_id(1), args.size, args, f"peer-{nonce}", None, fan, now_ms)
    load_after = os.getloadavg()
    finished = datetime.now(timezone.utc).isoformat(timespec="seconds")
    rows = [{"route": route, "partitions": p, "workers": w, "flowrank": results["flowrank"][(p, w)][route],
             "peer": results["peer"].get(route)} for route in args.routes for p in partitions for w in worker_counts]
    out.mkdir(parents=True, exist_ok=True)
    command = "python -m benchmarks http " + " ".join(argv if argv is not None else sys.argv[2:])
    md = "\n".join([
        f"# HTTP: FlowRank vs FastAPI + Redis ({'quick' if args.quick else 'full'} run)",
        "",
        f"Command: `{command.strip()}`  ",
        f"Machine: {machine.get('cpu_model')}, {machine.get('cores_usable')} cores, Python {machine.get('python')}, "
        f"Ray {machine.get('ray')}, redis-server {machine.get('redis_server')}, commit {(machine.get('git_commit') or '?')[:12]}  ",
        f"Load average before/after: {load_before[0]:.2f} / {load_after[0]:.2f} (1 min)  ",
        f"Parameters: {args.size:,} players per board, wrk -t1 -c{args.connections} (writes -c{args.write_connections}), "
        f"{args.duration} s per run, "
        f"median of {args.repeat}; {started} → {finished}",
        "",
        table(rows),
        "",
        "Peer: one sorted set and one uvicorn worker, so its row repeats for each partition and worker count. "
        "Workers: `flowrank serve --workers N` (1: the gateway holds the engine; more: gateway processes on one "
        "port in front of the engine host actor); \"vs 1 worker\" is the row's req/s over the 1-worker row's. "
        "Writes: batches of 500 fresh event ids per request over existing players. The held board has "
        f"`review_above` {REVIEW_ABOVE:,} (1 % of the written values are held for review; it held one event "
        "before the run), so its quarantine is never empty; its ratio is to the plain board's writes, same server. "
        "For 4 boards: each of the 500 events carries `board_ids` of 4 boards (all-time, a daily and a weekly "
        "series, regional: FlowRank routes each to its window's instance and logs the request's records as one "
        "G record); the peer gets the 4 concrete board ids and writes the 4 zsets of an event in one Lua call "
        "(`fr_apply_best_many`). A request is 2,000 results on both sides, so the req/s ratio is the results/s ratio.",
        "",
    ])
    (out / "http.md").write_text(md)
    (out / "http.json").write_text(json.dumps({"command": command.strip(), "machine": machine, "params": params,
                                               "load_before": load_before, "load_after": load_after,
                                               "started": started, "finished": finished, "rows": rows}, indent=2))
    plotted = plot(rows, out / "http.png", f"{command.strip()} | load {load_before[0]:.1f} | {started}")
    print("\n" + table(rows))
    print(f"\n  load    : {load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f} (1/5/15 min) after the run")
    print(f"wrote {out / 'http.md'}, {out / 'http.json'}" + (f" and {out / 'http.png'}" if plotted else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

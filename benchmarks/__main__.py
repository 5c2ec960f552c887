"""``python -m benchmarks``: run the FlowRank-vs-Redis benchmark suite.

    python -m benchmarks run [--quick] [--only NAME[,NAME]] [--ray-address ADDR]
                             [--out DIR] [--seed N] [--size PLAYERS] [--events N]
                             [--repeat R] [--shards 1,2,4] [--generators G]
    python -m benchmarks list
    python -m benchmarks http [--quick] [--size N] [--duration S] [--partitions 1,4] [--out DIR]
    python -m benchmarks http --background [--quick] [--size N] [--duration S] [--partitions 1,4] [--out DIR]
    python -m benchmarks core [--players N] [--events N] [--repeat R] [--batch B] [--json OUT]
    python -m benchmarks capacity [--max-rss-gib G] [--max-players N] [--json OUT]
    python -m benchmarks export [--rows 100000,300000,1000000] [--repeat R] [--engine local|ray] [--events N] [--json OUT]
    python -m benchmarks archive [--players N] [--partitions P] [--shards S] [--reads R] [--json OUT]
    python -m benchmarks coldstart [--engine ray|local] [--shard-actors N] [--events N] [--json OUT]
    python -m benchmarks nemesis [--faults 100] [--seconds S] [--lease-s S] [--partition-s S] [--json DIR]
                                 [--kinds kill_active,pause_active,kill_pg,partition_active]
                                 [--network auto|netns|loopback]
    python -m benchmarks failover [--quick] [--engine ray|local] [--partitions 4] [--takeovers 20] [--lease-s 3]
                                  [--promotions 3] [--json DIR]
    python -m benchmarks competitions [--players N] [--cohort S] [--tiers T] [--json OUT]
    python -m benchmarks erasure [--players N] [--events N] [--batch K] [--json OUT]

This module registers the Redis scenarios (the denominators of every ratio)
and the naive tie check. FlowRank scenarios register themselves from modules
in ``benchmarks/scenarios/`` (see the ``benchmarks`` package docstring); they
are imported here, before the registry is read, when that package exists.

Each scenario warms up, measures ``--repeat`` times and returns raw samples;
the run prints a header (machine, versions, parameters, seed), a
min/median/max table, and writes ``results.json`` + ``REPORT.md`` + PNGs to
``--out``.
"""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import random
import shlex
import sys
import time
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

from . import FLOWRANK_SLOTS, SCENARIOS, Context, latency_samples, percentile, register, run_distributed
from .report import Sample

QUICK = {"players": 100_000, "events": 200_000, "repeat": 3, "read_ops": 2000}
FULL = {"players": 1_000_000, "events": 2_000_000, "repeat": 5, "read_ops": 10_000}


# --------------------------------------------------------------------------- helpers


def _ingest_part(args: tuple) -> dict:
    """Load-generator task: ingest one part of the stream into the exact peer."""
    host, port, board_id, policy, events, batch, naive = args
    import redis

    from .redis_peer import NaiveRedisBoard, RedisBoard

    client = redis.Redis(host=host, port=port, socket_timeout=300)
    try:
        t0 = time.perf_counter()
        if naive:
            NaiveRedisBoard(client, board_id, policy).ingest(events, batch=batch)
            counts: dict = {}
        else:
            counts = dict(Counter(RedisBoard(client, board_id, policy, load=False).ingest(events, batch=batch)))
        return {"seconds": time.perf_counter() - t0, "events": len(events), "outcomes": counts}
    finally:
        client.close()


def _ingest(ctx: Context, srv, events: list, policy: str, naive: bool = False, desc: str = "ingest") -> tuple[float, Counter]:
    """Ingest ``events`` through ``ctx.generators`` load generators; (wall s, outcomes)."""
    from .workload import Workload

    board_id = events[0][0]
    if ctx.generators > 1:
        parts = Workload(0, policy, board_id, 0, events).split(ctx.generators)
    else:
        parts = [events]
    chunks = []
    for part in parts:  # chunk each part so the progress bar moves
        step = max(ctx.batch * 20, 1)
        chunks.append([part[i : i + step] for i in range(0, len(part), step)])
    outcomes: Counter = Counter()
    bar = ctx.progress(total=len(events), desc=desc, unit="ev")
    t0 = time.perf_counter()
    if ctx.ray_address or len(parts) > 1:
        # Ray tasks pinned to this node, or local worker processes
        res = run_distributed(
            _ingest_part,
            [(srv.host, srv.port, board_id, policy, p, ctx.batch, naive) for p in parts],
            ctx.ray_address,
            same_node=True,
            processes=len(parts),
        )
        for r in res:
            outcomes.update(r["outcomes"])
        bar.update(len(events))
    else:
        for part_chunks in chunks:
            for ch in part_chunks:
                r = _ingest_part((srv.host, srv.port, board_id, policy, ch, ctx.batch, naive))
                outcomes.update(r["outcomes"])
                bar.update(len(ch))
    wall = time.perf_counter() - t0
    bar.close()
    return wall, outcomes


def _server(ctx: Context, **kwargs):
    from .redis_peer import RedisServer

    srv = RedisServer(**kwargs)
    srv.start()
    ctx.on_close(srv.stop)
    return srv


def _loaded(ctx: Context, policy: str = "best_score"):
    """A shared server with the run's workload ingested into both peers (untimed)."""
    key = ("loaded_redis", policy)
    if key not in ctx.cache:
        from .redis_peer import NaiveRedisBoard, RedisBoard

        w = ctx.workload(policy)
        srv = _server(ctx)
        c = srv.client()
        exact = RedisBoard(c, w.board_id, policy)
        _ingest(ctx, srv, w.events, policy, desc="load exact peer")
        naive = NaiveRedisBoard(c, w.board_id, policy)
        naive.ingest(w.events, batch=ctx.batch)
        ctx.cache[key] = (srv, c, exact, naive, w)
    return ctx.cache[key]


def _player_sample(ctx: Context, w, n: int, salt: int) -> list[str]:
    rnd = random.Random(ctx.seed * 1_000_003 + salt)
    ids = [f"p-{i:08d}" for i in range(w.players)]
    return [rnd.choice(ids) for _ in range(n)]


def _latency_metrics(ctx, scenario, system, prefix, call, args, rep, note="") -> list[Sample]:
    lat = latency_samples(call, args, warmup=min(100, len(args) // 10))
    p = {"ops": len(lat)}
    return [
        Sample(scenario, system, f"{prefix}_latency_p50_ms", percentile(lat, 50), "ms", False, repeat=rep, params=p, note=note),
        Sample(scenario, system, f"{prefix}_latency_p99_ms", percentile(lat, 99), "ms", False, repeat=rep, params=p, note=note),
    ]


# --------------------------------------------------------------------------- Redis scenarios


@register("redis_ingest", system="redis")
def redis_ingest(ctx: Context) -> list[Sample]:
    """Ingest throughput, no persistence (in-memory upper bound), exact peer and naive ZADD GT."""
    from .redis_peer import NaiveRedisBoard, RedisBoard

    w = ctx.workload()
    srv = _server(ctx)
    c = srv.client()
    RedisBoard(c, w.board_id)  # FUNCTION LOAD
    # warm-up: a slice of the stream into a scratch board, then wipe
    warm = [("warmup:solo:S0:global",) + e[1:] for e in w.events[: min(5000, len(w.events))]]
    _ingest(ctx, srv, warm, "best_score", desc="warm-up")
    out = []
    params = {"events": len(w.events), "players": w.players, "batch": ctx.batch, "generators": ctx.generators,
              "persistence": "none"}
    for rep in range(ctx.repeat):
        c.flushall()
        wall, outcomes = _ingest(ctx, srv, w.events, "best_score", desc=f"exact ingest #{rep + 1}")
        dup = outcomes.get("DUPLICATE_IGNORED", 0)
        out.append(Sample("redis_ingest", "redis", "ingest_events_per_s_memory", len(w.events) / wall, "events/s",
                          repeat=rep, params={**params, "outcomes": dict(outcomes)},
                          note=f"{dup} redeliveries ignored"))
        c.flushall()
        t0 = time.perf_counter()
        NaiveRedisBoard(c, w.board_id).ingest(w.events, batch=ctx.batch)
        out.append(Sample("redis_ingest", "redis_naive", "ingest_events_per_s_memory",
                          len(w.events) / (time.perf_counter() - t0), "events/s", repeat=rep, params=params,
                          note="ZADD GT, no dedup, wrong tie order"))
    return out


@register("redis_aof_ingest", system="redis")
def redis_aof_ingest(ctx: Context) -> list[Sample]:
    """Durable ingest: AOF with appendfsync always, pipelined batches of 1000 (FlowRank acks after fsync)."""
    from .redis_peer import RedisBoard

    w = ctx.workload()
    srv = _server(ctx, appendonly=True, appendfsync="always")
    c = srv.client()
    RedisBoard(c, w.board_id)
    warm = [("warmup:solo:S0:global",) + e[1:] for e in w.events[: min(5000, len(w.events))]]
    _ingest(ctx, srv, warm, "best_score", desc="warm-up")
    out = []
    for rep in range(ctx.repeat):
        c.flushall()
        wall, outcomes = _ingest(ctx, srv, w.events, "best_score", desc=f"aof ingest #{rep + 1}")
        out.append(Sample("redis_aof_ingest", "redis", "ingest_events_per_s", len(w.events) / wall, "events/s",
                          repeat=rep, params={"events": len(w.events), "batch": ctx.batch, "appendfsync": "always",
                                              "generators": ctx.generators, "outcomes": dict(outcomes)}))
    return out


@register("redis_rank", system="redis")
def redis_rank(ctx: Context) -> list[Sample]:
    """Own-rank reads: sequential latency p50/p99 (one FCALL_RO each) and pipelined throughput."""
    srv, c, exact, naive, w = _loaded(ctx)
    out = []
    for rep in range(ctx.repeat):
        ids = _player_sample(ctx, w, ctx.read_ops, salt=100 + rep)
        out += _latency_metrics(ctx, "redis_rank", "redis", "rank", exact.rank, ids, rep)
        out += _latency_metrics(ctx, "redis_rank", "redis_naive", "rank", naive.rank, ids, rep,
                                note="ZREVRANK, wrong tie order")
        many = _player_sample(ctx, w, max(ctx.read_ops * 10, 1000), salt=200 + rep)
        for system, board in (("redis", exact), ("redis_naive", naive)):
            t0 = time.perf_counter()
            board.ranks(many, batch=ctx.batch)
            out.append(Sample("redis_rank", system, "rank_reads_per_s", len(many) / (time.perf_counter() - t0),
                              "reads/s", repeat=rep, params={"ops": len(many), "pipeline": ctx.batch}))
    return out


@register("redis_top", system="redis")
def redis_top(ctx: Context) -> list[Sample]:
    """Top-100 page latency (one ZRANGE + decode of 100 members)."""
    srv, c, exact, naive, w = _loaded(ctx)
    out = []
    n = max(ctx.read_ops // 4, 200)
    for rep in range(ctx.repeat):
        out += _latency_metrics(ctx, "redis_top", "redis", "top100", exact.top, [100] * n, rep)
        out += _latency_metrics(ctx, "redis_top", "redis_naive", "top100", naive.top, [100] * n, rep,
                                note="ZREVRANGE, wrong tie order")
    return out


@register("redis_around", system="redis")
def redis_around(ctx: Context) -> list[Sample]:
    """Rank-around-player window of radius 10 (one FCALL_RO: HGET + ZRANK + ZRANGE)."""
    srv, c, exact, naive, w = _loaded(ctx)
    out = []
    for rep in range(ctx.repeat):
        ids = _player_sample(ctx, w, ctx.read_ops, salt=300 + rep)
        out += _latency_metrics(ctx, "redis_around", "redis", "around10", lambda p: exact.around(p, 10), ids, rep)
    return out


@register("redis_friends", system="redis")
def redis_friends(ctx: Context) -> list[Sample]:
    """Friends view: 50 seeded friend ids ranked locally (one HMGET + local sort)."""
    srv, c, exact, naive, w = _loaded(ctx)
    out = []
    for rep in range(ctx.repeat):
        rnd = random.Random(ctx.seed * 7919 + rep)
        reqs = [(f"p-{rnd.randrange(w.players):08d}", [f"p-{rnd.randrange(w.players):08d}" for _ in range(50)])
                for _ in range(max(ctx.read_ops // 2, 200))]
        out += _latency_metrics(ctx, "redis_friends", "redis", "friends50", lambda r: exact.friends(*r), reqs, rep)
    return out


@register("redis_memory", system="redis")
def redis_memory(ctx: Context) -> list[Sample]:
    """Memory: ranking state per player (MEMORY USAGE) and used_memory growth per player incl. dedup keys."""
    from .redis_peer import NaiveRedisBoard, RedisBoard

    w = ctx.workload()
    out = []
    for rep in range(min(ctx.repeat, 2)):  # deterministic: two repeats show it
        srv = _server(ctx)
        c = srv.client()
        exact = RedisBoard(c, w.board_id)
        base = srv.used_memory()
        _ingest(ctx, srv, w.events, "best_score", desc=f"memory load #{rep + 1}")
        players = exact.size()
        grown = srv.used_memory() - base
        p = {"players": players, "events": len(w.events)}
        out.append(Sample("redis_memory", "redis", "ranking_bytes_per_player", exact.memory_per_player(), "bytes",
                          False, repeat=rep, params=p, note="zset + player->member hash"))
        out.append(Sample("redis_memory", "redis", "total_bytes_per_player", grown / players, "bytes", False,
                          repeat=rep, params=p, note="used_memory growth incl. per-event dedup keys"))
        out.append(Sample("redis_memory", "redis", "dedup_bytes_per_event", exact.dedup_memory(), "bytes", False,
                          repeat=rep, params=p))
        c.flushall()
        naive = NaiveRedisBoard(c, w.board_id)
        naive.ingest(w.events, batch=ctx.batch)
        nb = int(c.memory_usage(naive.key, samples=0) or 0)
        out.append(Sample("redis_memory", "redis_naive", "ranking_bytes_per_player", nb / max(1, c.zcard(naive.key)),
                          "bytes", False, repeat=rep, params=p, note="plain zset, no dedup"))
        srv.stop()
    return out


@register("redis_restart", system="redis")
def redis_restart(ctx: Context) -> list[Sample]:
    """Restart to loaded: AOF (everysec) as written, then after BGREWRITEAOF (compacted)."""
    from .redis_peer import RedisBoard

    w = ctx.workload()
    srv = _server(ctx, appendonly=True, appendfsync="everysec")
    c = srv.client()
    RedisBoard(c, w.board_id)
    _ingest(ctx, srv, w.events, "best_score", desc="restart load")
    out = []
    p = {"events": len(w.events), "players": w.players}
    for rep in range(ctx.repeat):
        secs = srv.restart()
        out.append(Sample("redis_restart", "redis", "restart_seconds", secs, "s", False, repeat=rep,
                          params={**p, "aof": "as written"}))
    c = srv.client()
    c.bgrewriteaof()
    while int(c.info("persistence").get("aof_rewrite_in_progress", 0)) or int(
        c.info("persistence").get("aof_rewrite_scheduled", 0)
    ):
        time.sleep(0.05)
    for rep in range(ctx.repeat):
        secs = srv.restart()
        out.append(Sample("redis_restart", "redis", "restart_seconds_compacted", secs, "s", False, repeat=rep,
                          params={**p, "aof": "after BGREWRITEAOF"}))
    # the data must survive: same size and version as before
    ok = RedisBoard(srv.client(), w.board_id, load=False).size() == len({e[2] for e in w.events})
    if not ok:
        ctx.notes.append("redis_restart: board size after restart did not match the workload")
    return out


@register("naive_redis_tie_check", system="check")
def naive_redis_tie_check(ctx: Context) -> list[Sample]:
    """Design example (Ava/Ben/Chloe/Dev/Eli): exact peer vs ZADD GT + ZREVRANK tie order."""
    from .redis_peer import DESIGN_BOARD, RedisBoard, design_events, naive_tie_demo

    srv = _server(ctx)
    c = srv.client()
    demo = naive_tie_demo(c)
    # dedup + conflict on the exact peer
    b = RedisBoard(c, DESIGN_BOARD)
    ev = design_events()
    b.ingest(ev)
    redo = b.ingest([ev[1], ev[1][:3] + (ev[1][3] + 1,) + ev[1][4:]])
    b.clear()
    ctx.notes.append(
        f"Tie check (design example): expected {' > '.join(demo['expected'])}; exact Redis peer "
        f"{' > '.join(demo['exact'])} ({'correct' if demo['exact_ok'] else 'WRONG'}); naive ZADD GT + ZREVRANK "
        f"{' > '.join(demo['naive'])} ({'correct' if demo['naive_ok'] else 'WRONG: Chloe ahead of Ben'})."
    )
    ctx.notes.append(f"Exact peer on a redelivery and a conflicting reuse of evt-ben-1: {redo}.")
    return [
        Sample("naive_redis_tie_check", "redis", "design_tie_order_correct", float(demo["exact_ok"]), "bool",
               note=" > ".join(demo["exact"])),
        Sample("naive_redis_tie_check", "redis_naive", "design_tie_order_correct", float(demo["naive_ok"]), "bool",
               note=" > ".join(demo["naive"])),
    ]


# --------------------------------------------------------------------------- CLI


def load_plugins() -> list[str]:
    """Import every module of ``benchmarks.scenarios`` (FlowRank scenarios), if present."""
    try:
        pkg = importlib.import_module("benchmarks.scenarios")
    except ModuleNotFoundError:
        return []
    names = []
    for m in pkgutil.iter_modules(pkg.__path__):
        importlib.import_module(f"benchmarks.scenarios.{m.name}")
        names.append(m.name)
    return names


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="run scenarios and write results.json + REPORT.md")
    r.add_argument("--quick", action="store_true", help="100k players / 200k events (well under 5 min on 2 cores)")
    r.add_argument("--only", default="", help="comma-separated scenario names (default: all registered)")
    r.add_argument("--ray-address", default=None, help="run load generators as Ray tasks on this cluster")
    r.add_argument("--out", default=None, help="output directory (default results/run-<UTC time>)")
    r.add_argument("--seed", type=int, default=1)
    r.add_argument("--size", type=int, default=None, help="players (default 100k quick / 1M full)")
    r.add_argument("--events", type=int, default=None, help="events (default 200k quick / 2M full)")
    r.add_argument("--repeat", type=int, default=None, help="measured repeats per scenario (after a warm-up)")
    r.add_argument("--shards", default="1,2,4", help="FlowRank shard counts to sweep")
    r.add_argument("--generators", type=int, default=1,
                   help="load-generator parts for ingest (Ray tasks with --ray-address, else local processes)")
    r.add_argument("--batch", type=int, default=1000)
    r.add_argument("--no-progress", action="store_true")
    r.add_argument("--no-plots", action="store_true")
    sub.add_parser("list", help="list registered scenarios and empty FlowRank slots")
    sub.add_parser("http", add_help=False,
                   help="HTTP: flowrank serve vs a FastAPI + Redis peer under wrk (benchmarks/http_bench.py)")
    sub.add_parser("core", add_help=False,
                   help="engine core: one Board in process vs dict + SortedList, memory, replay (benchmarks/core_bench.py)")
    sub.add_parser("capacity", add_help=False,
                   help="how many ranked players one board holds in an RSS budget, ranks checked (benchmarks/capacity.py)")
    sub.add_parser("chaos", add_help=False,
                   help="SIGKILL the server (and Ray shard actors) N times under writes, check exactly-once (benchmarks/chaos.py)")
    sub.add_parser("soak", add_help=False,
                   help="steady mixed load for N minutes: RSS drift, read p99, ingest lag, fsync p99 (benchmarks/soak.py)")
    sub.add_parser("export", add_help=False,
                   help="export rows/s and server RSS, and the CLI submit/export round trip (benchmarks/export_bench.py)")
    sub.add_parser("archive", add_help=False,
                   help="shard memory an ARCHIVED 1M-player board gives back, reads from it (benchmarks/archive_bench.py)")
    sub.add_parser("coldstart", add_help=False,
                   help="flowrank serve to ready on a fresh and on a kept compile cache, then the first requests "
                        "(benchmarks/coldstart.py)")
    sub.add_parser("erasure", add_help=False,
                   help="erase one player, then 1,000, from 10M events over 1M players on 3 boards (one archived): "
                        "exclusion, completion on disk, ingest and reads meanwhile (benchmarks/erasure_bench.py)")
    sub.add_parser("failover", add_help=False,
                   help="the log in PostgreSQL (primary + sync standby): writes vs the file log and the peer, "
                        "takeovers of a hot standby, a Postgres promotion, standby lag (benchmarks/failover.py)")
    sub.add_parser("nemesis", add_help=False,
                   help="faults (kill -9 and pause of the active node, kill -9 of the Postgres primary) against two "
                        "nodes on one PostgreSQL log, then a check of the whole history (benchmarks/nemesis.py)")
    sub.add_parser("competitions", add_help=False,
                   help="a 1M-player league through HTTP: joins, cohort reads beside friends views, finalize with "
                        "1M awards, webhook delivery (benchmarks/competitions.py)")
    return p


def _list() -> int:
    for name, s in sorted(SCENARIOS.items()):
        print(f"{name:<24} [{s.system}] {s.doc}")
    empty = [n for n in FLOWRANK_SLOTS if n not in SCENARIOS]
    if empty:
        print("\nFlowRank slots not registered yet (benchmarks/scenarios/*.py):")
        for n in empty:
            print(f"  {n:<22} -> metrics {', '.join(FLOWRANK_SLOTS[n])}")
    return 0


def run(argv: list[str]) -> int:
    from . import report
    from .machine import describe, header

    args = _parser().parse_args(["run", *argv])
    sizes = dict(QUICK if args.quick else FULL)
    if args.size:
        sizes["players"] = args.size
    if args.events:
        sizes["events"] = args.events
    if args.repeat:
        sizes["repeat"] = args.repeat
    names = [n for n in args.only.split(",") if n] or list(SCENARIOS)
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        print(f"unknown scenario(s): {', '.join(unknown)}; known: {', '.join(sorted(SCENARIOS))}", file=sys.stderr)
        return 2
    ctx = Context(
        seed=args.seed, players=sizes["players"], events=sizes["events"], repeat=sizes["repeat"],
        quick=args.quick, shards=tuple(int(s) for s in args.shards.split(",") if s),
        ray_address=args.ray_address, generators=args.generators, batch=args.batch,
        read_ops=sizes["read_ops"], progress_enabled=not args.no_progress,
    )
    params = {"quick": args.quick, "players": ctx.players, "events": ctx.events, "repeat": ctx.repeat,
              "seed": ctx.seed, "shards": list(ctx.shards), "batch": ctx.batch, "generators": ctx.generators,
              "ray_address": ctx.ray_address, "scenarios": names}
    out_dir = args.out or f"results/run-{datetime.now(timezone.utc):%Y%m%d-%H%M%S}"
    command = "python -m benchmarks run " + " ".join(shlex.quote(a) for a in argv)
    machine = describe()
    print(header({k: v for k, v in params.items() if k != "scenarios"}, machine))
    print(f"  scenarios: {', '.join(names)}")
    missing = [n for n in FLOWRANK_SLOTS if n not in SCENARIOS]
    if missing:
        print(f"  note    : FlowRank scenarios not registered yet ({len(missing)} slots): no ratios this run")
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    t_gen = time.perf_counter()
    w = ctx.workload()
    st = w.stats()
    print(f"  workload: {st['events']} events, {st['active_players']} players, dup {st['dup_share']:.2%}, "
          f"late {st['late_share']:.2%}, top 1% of players post {st['top1pct_share']:.0%}, "
          f"{st['distinct_values']} distinct values, digest {w.digest()[:16]} "
          f"(generated in {time.perf_counter() - t_gen:.1f}s)")
    ctx.notes.append(f"Workload digest {w.digest()} (seed {ctx.seed}); stats {st}.")
    samples: list[Sample] = []
    failed: list[str] = []
    try:
        for name in names:
            t0 = time.perf_counter()
            try:
                got = SCENARIOS[name].fn(ctx)
            except Exception as e:  # noqa: BLE001 - one broken scenario must not lose the others
                failed.append(name)
                ctx.notes.append(f"{name} FAILED: {type(e).__name__}: {e}")
                print(f"\n[{name}] FAILED: {type(e).__name__}: {e}", flush=True)
                continue
            samples += got
            print(f"\n[{name}] {len(got)} samples in {time.perf_counter() - t0:.1f}s")
            print(report.format_table(report.summarize(got)), flush=True)
    finally:
        ctx.close()
    finished = datetime.now(timezone.utc).isoformat(timespec="seconds")
    paths = report.write(out_dir, samples, machine, params, ctx.seed, command, started, finished,
                         notes=ctx.notes, plots=not args.no_plots)
    rat = report.ratios(samples)
    print("\nFlowRank/Redis ratios: " + (", ".join(f"{r['metric']}@{r['shards']}={r['ratio']:.2f}x" for r in rat)
                                         if rat else "none (no FlowRank scenario in this run)"))
    for n in ctx.notes:
        if not n.startswith("Workload digest"):
            print(f"note: {n}")
    print(f"wrote {paths['json']}, {paths['markdown']} and {len(paths['plots'])} plots")
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # every `flowrank serve` a benchmark starts on a temporary data directory loads its kernels from one
    # compile cache (engine.runtime.warm) instead of compiling them into <data-dir>/.numba-cache each time;
    # `coldstart` passes --cache-dir itself, and an operator's FLOWRANK_CACHE_DIR wins
    os.environ.setdefault("FLOWRANK_CACHE_DIR", str(Path(__file__).resolve().parent.parent / ".numba-cache"))
    load_plugins()
    if not argv or argv[0] in ("-h", "--help"):
        _parser().print_help()
        return 0
    if argv[0] == "list":
        return _list()
    if argv[0] == "run":
        return run(argv[1:])
    if argv[0] == "http" and "--background" in argv[1:]:  # issue 29 item 2: reads beside heavy work
        from .http_background import main as background_main

        return background_main(argv[1:])
    if argv[0] == "http":
        from .http_bench import main as http_main

        return http_main(argv[1:])
    if argv[0] == "core":
        from .core_bench import main as core_main

        return core_main(argv[1:])
    if argv[0] == "capacity":
        from .capacity import main as capacity_main

        return capacity_main(argv[1:])
    if argv[0] == "chaos":
        from .chaos import main as chaos_main

        return chaos_main(argv[1:])
    if argv[0] == "soak":
        from .soak import main as soak_main

        return soak_main(argv[1:])
    if argv[0] == "export":
        from .export_bench import main as export_main

        return export_main(argv[1:])
    if argv[0] == "archive":
        from .archive_bench import main as archive_main

        return archive_main(argv[1:])
    if argv[0] == "coldstart":
        from .coldstart import main as coldstart_main

        return coldstart_main(argv[1:])
    if argv[0] == "erasure":
        from .erasure_bench import main as erasure_main

        return erasure_main(argv[1:])
    if argv[0] == "failover":
        from .failover import main as failover_main

        return failover_main(argv[1:])
    if argv[0] == "nemesis":
        from .nemesis import main as nemesis_main

        return nemesis_main(argv[1:])
    if argv[0] == "competitions":
        from .competitions import main as competitions_main

        return competitions_main(argv[1:])
    _parser().parse_args(argv)
    return 2


if __name__ == "__main__":
    sys.exit(main())

"""One board over 1, 2, 4, 8 Ray shard actors through ``ClusterEngine`` (issue 4).

For every shard count (a fresh ``ClusterEngine`` with a durable log in a temp
dir, one best_score board with ``shards = n`` partitions over ``n`` actors):

* durable ingest events/s, batches of ``--batch`` submitted ``--inflight`` at
  a time so the router's sequencer/completer pipeline is used; per-batch
  ack latency p50;
* exact rank (``player``): sequential p50/p99 latency, and throughput with
  ``--concurrency`` requests in flight (the router coalesces the reads of one
  event-loop turn into one call per shard);
* approximate rank (``approximate_player``): latency, observed |error| vs
  the exact rank, and the stated bound;
* top-100 and around(radius 5) latency;
* Ray call overhead: a no-op actor call's round trip, and the fsync time of
  the log append per cycle (router metrics).

Prints a header and a table (median of ``--repeat`` per metric; min/max in
the JSON), writes ``shards.json`` and one PNG per metric vs shard count to
``--out`` (default ``benchmarks/report_assets``).

    python -m benchmarks.shards --quick           # 100k players / 200k events
    python -m benchmarks.shards                   # 1M players / 2M events

Ray: ``ray.init(address="local")`` with a per-run ``RAY_TMPDIR`` (removed at
the end) and ``RAY_AUTH_MODE=disabled`` (loopback only). :func:`measure`
and :func:`ray_session` are reused by ``benchmarks/scenarios/flowrank.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from typing import Sequence

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks import percentile  # noqa: E402
from benchmarks.machine import repo_relative  # noqa: E402
from benchmarks.processes import owned_ray  # noqa: E402

TARGETS = {  # issue 4
    ("ingest_events_per_s", 2): (150_000, "higher"),
    ("rank_p50_ms", 4): (3.0, "lower"),
    ("rank_concurrent_per_s", None): (50_000, "higher"),
}

METRICS = {  # name -> (unit, higher is better, title)
    "ingest_events_per_s": ("events/s", True, "Durable ingest (batches of 1000, pipelined)"),
    "ingest_batch_p50_ms": ("ms", False, "Batch ack latency p50"),
    "rank_p50_ms": ("ms", False, "Exact rank latency p50 (sequential)"),
    "rank_p99_ms": ("ms", False, "Exact rank latency p99 (sequential)"),
    "rank_sequential_per_s": ("ranks/s", True, "Exact ranks/s, one at a time"),
    "rank_concurrent_per_s": ("ranks/s", True, "Exact ranks/s, many in flight (coalesced)"),
    "approx_p50_ms": ("ms", False, "Approximate rank latency p50"),
    "approx_abs_error_mean": ("ranks", False, "Approximate rank |error| (mean)"),
    "approx_abs_error_max": ("ranks", False, "Approximate rank |error| (max)"),
    "approx_rel_error_mean_pct": ("%", False, "Approximate rank |error| / rank (mean)"),
    "approx_bound_mean": ("ranks", False, "Approximate rank stated bound (mean)"),
    "top100_p50_ms": ("ms", False, "Top-100 latency p50"),
    "around5_p50_ms": ("ms", False, "around(radius 5) latency p50"),
    "ray_noop_rtt_ms": ("ms", False, "Ray no-op actor call round trip p50"),
    "fsync_p50_ms": ("ms", False, "Log append + fsync per cycle p50"),
}


@contextlib.contextmanager
def ray_session(num_cpus: int | None = None):
    """A private local Ray for this run: temp RAY_TMPDIR, auth disabled, removed after."""
    os.environ["RAY_AUTH_MODE"] = "disabled"
    tmp = tempfile.mkdtemp(prefix="frray-", dir="/tmp")
    os.environ["RAY_TMPDIR"] = tmp
    import ray

    try:
        if ray.is_initialized():  # someone else's: not ours to stop
            yield ray
            return
        # owned (benchmarks.processes): shut down and swept on every exit path, SIGTERM included
        with owned_ray(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False):
            yield ray
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _lat(samples: list[float]) -> tuple[float, float]:
    return percentile(samples, 50), percentile(samples, 99)


async def measure(n_shards: int, events: Sequence, ids: Sequence[str], *, batch: int = 1000, inflight: int = 4,
                  concurrency: int = 256, read_ops: int = 2000, approx_ops: int = 500,
                  around_radius: int = 5, friends: Sequence[tuple[str, list[str]]] = (),
                  restart: bool = False, progress=None) -> dict[str, float]:
    """One shard count, one repeat: open a ClusterEngine, ingest, read, close. Metrics dict.

    ``friends``: (player, friend ids) requests timed through ``ranked_subset``.
    ``restart``: after closing (which writes a final snapshot), reopen the same
    data dir and time open (actors start, load snapshots, replay the tail)
    plus the first exact rank read: ``restart_seconds``.
    """
    from engine.cluster import ClusterEngine
    from engine.core.model import BoardSpec, Policy

    data = tempfile.mkdtemp(prefix="frshards-")
    out: dict[str, float] = {}
    eng = await ClusterEngine.open(data_dir=data, n_shards=n_shards)
    try:
        board = events[0].board_id
        await eng.create_board(BoardSpec(board, Policy.BEST_SCORE, shards=n_shards))
        batches = [events[i : i + batch] for i in range(0, len(events), batch)]
        await eng.submit(batches[0][:10])  # warm the path (tiny)
        ack: list[float] = []
        nxt = 0

        async def worker():
            nonlocal nxt
            while nxt < len(batches):
                b = batches[nxt]
                nxt += 1
                t = time.perf_counter()
                await eng.submit(b)
                ack.append((time.perf_counter() - t) * 1000)
                if progress is not None:
                    progress.update(len(b))

        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(inflight)))
        wall = time.perf_counter() - t0
        out["ingest_events_per_s"] = len(events) / wall
        out["ingest_batch_p50_ms"] = percentile(ack, 50)
        fs = eng.router_stats()["fsync_seconds"]
        out["fsync_p50_ms"] = percentile(fs, 50) * 1000 if fs else float("nan")

        # exact rank, sequential
        seq = ids[:read_ops]
        for p in seq[:50]:
            await eng.player(board, p)
        lat = []
        exact: dict[str, int | None] = {}
        t0 = time.perf_counter()
        for p in seq:
            t = time.perf_counter()
            v = await eng.player(board, p)
            lat.append((time.perf_counter() - t) * 1000)
            exact[p] = v.rank
        out["rank_sequential_per_s"] = len(seq) / (time.perf_counter() - t0)
        out["rank_p50_ms"], out["rank_p99_ms"] = _lat(lat)

        # exact rank, many in flight (coalesced per shard by the router)
        many = list(ids) * max(1, (concurrency * 20) // max(1, len(ids)))
        many = many[: max(concurrency * 20, len(ids))]
        t0 = time.perf_counter()
        for i in range(0, len(many), concurrency):
            await asyncio.gather(*(eng.player(board, p) for p in many[i : i + concurrency]))
        out["rank_concurrent_per_s"] = len(many) / (time.perf_counter() - t0)

        # approximate rank: latency and error vs the exact rank (no writes in between)
        lat, errs, rel, bounds = [], [], [], []
        for p in seq[:approx_ops]:
            t = time.perf_counter()
            v = await eng.approximate_player(board, p)
            lat.append((time.perf_counter() - t) * 1000)
            if v.rank is not None and exact.get(p) is not None:
                e = abs(v.rank - exact[p])
                errs.append(e)
                rel.append(100.0 * e / exact[p])
                bounds.append(v.rank_error_bound or 0)
        out["approx_p50_ms"] = percentile(lat, 50)
        out["approx_abs_error_mean"] = statistics.fmean(errs) if errs else 0.0
        out["approx_abs_error_max"] = max(errs) if errs else 0.0
        out["approx_rel_error_mean_pct"] = statistics.fmean(rel) if rel else 0.0
        out["approx_bound_mean"] = statistics.fmean(bounds) if bounds else 0.0
        out["approx_within_bound"] = float(all(e <= b for e, b in zip(errs, bounds)))

        k = max(100, read_ops // 4)
        lat = []
        for _ in range(k):
            t = time.perf_counter()
            await eng.top(board, 0, 100)
            lat.append((time.perf_counter() - t) * 1000)
        out["top100_p50_ms"], out["top100_p99_ms"] = _lat(lat)
        lat = []
        for p in seq[:k]:
            t = time.perf_counter()
            await eng.around(board, p, around_radius)
            lat.append((time.perf_counter() - t) * 1000)
        out[f"around{around_radius}_p50_ms"], out[f"around{around_radius}_p99_ms"] = _lat(lat)

        if friends:
            lat = []
            for p, fr in friends:
                t = time.perf_counter()
                await eng.ranked_subset(board, [p, *fr])
                lat.append((time.perf_counter() - t) * 1000)
            out["friends50_p50_ms"], out["friends50_p99_ms"] = _lat(lat)

        lat = []
        a = eng.shards[0]
        for _ in range(300):
            t = time.perf_counter()
            await a.pid.remote()
            lat.append((time.perf_counter() - t) * 1000)
        out["ray_noop_rtt_ms"] = percentile(lat[50:], 50)
    finally:
        await eng.close()
        if not restart:
            shutil.rmtree(data, ignore_errors=True)
    if restart:
        try:
            t0 = time.perf_counter()
            eng = await ClusterEngine.open(data_dir=data, n_shards=n_shards)
            try:
                await eng.player(board, ids[0])
                out["restart_seconds"] = time.perf_counter() - t0
                out["restart_open_seconds"] = eng.recovery_seconds
            finally:
                await eng.close()
        finally:
            shutil.rmtree(data, ignore_errors=True)
    return out


def plot(results: dict[int, dict[str, list[float]]], out_dir: str, prefix: str = "shards_") -> list[str]:
    """One PNG per metric: median with min-max bars against shard count."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(out_dir, exist_ok=True)
    paths = []
    shards = sorted(results)
    for m, (unit, _, title) in METRICS.items():
        if not all(m in results[s] for s in shards):
            continue
        meds = [statistics.median(results[s][m]) for s in shards]
        lo = [meds[i] - min(results[s][m]) for i, s in enumerate(shards)]
        hi = [max(results[s][m]) - meds[i] for i, s in enumerate(shards)]
        fig, ax = plt.subplots(figsize=(5, 3.2), dpi=100)
        ax.errorbar(shards, meds, yerr=[lo, hi], marker="o", capsize=3)
        ax.set_xscale("log", base=2)
        ax.set_xticks(shards, [str(s) for s in shards])
        ax.set_xlabel("shards (Ray actors) on one board")
        ax.set_ylabel(unit)
        ax.set_title(title, fontsize=9)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        fig.tight_layout()
        p = os.path.join(out_dir, f"{prefix}{m}.png")
        fig.savefig(p)
        plt.close(fig)
        paths.append(p)
    return paths


def table(results: dict[int, dict[str, list[float]]]) -> str:
    shards = sorted(results)
    lines = ["| metric | unit | " + " | ".join(f"{s} shard{'s' if s > 1 else ''}" for s in shards) + " |",
             "| --- | --- | " + " | ".join("---:" for _ in shards) + " |"]
    for m, (unit, _, _) in METRICS.items():
        if not all(m in results[s] for s in shards):
            continue
        cells = []
        for s in shards:
            v = statistics.median(results[s][m])
            cells.append(f"{v:,.0f}" if abs(v) >= 100 else f"{v:.2f}")
        lines.append(f"| {m} | {unit} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def check_targets(results: dict[int, dict[str, list[float]]]) -> list[str]:
    out = []
    for (m, s), (target, way) in TARGETS.items():
        cands = [s] if s is not None else sorted(results)
        for sc in cands:
            if sc not in results or m not in results[sc]:
                continue
            v = statistics.median(results[sc][m])
            ok = v >= target if way == "higher" else v <= target
            out.append(f"{m} @ {sc} shard(s): {v:,.2f} vs {'>=' if way == 'higher' else '<='} {target:,} "
                       f"-> {'MET' if ok else 'MISSED'}")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="100k players / 200k events")
    ap.add_argument("--players", type=int, default=None)
    ap.add_argument("--events", type=int, default=None)
    ap.add_argument("--shards", default="1,2,4,8")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--inflight", type=int, default=4, help="batches submitted concurrently")
    ap.add_argument("--concurrency", type=int, default=256, help="rank requests in flight")
    ap.add_argument("--read-ops", type=int, default=2000)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "report_assets"))
    args = ap.parse_args(argv)
    players = args.players or (100_000 if args.quick else 1_000_000)
    n_events = args.events or 2 * players
    shard_counts = [int(s) for s in args.shards.split(",") if s]

    from .engine_core import header, sample_players, to_events
    from .workload import generate

    params = {"players": players, "events": n_events, "shards": shard_counts, "seed": args.seed,
              "repeat": args.repeat, "batch": args.batch, "inflight": args.inflight,
              "concurrency": args.concurrency, "read_ops": args.read_ops}
    print(header(params), flush=True)
    w = generate(args.seed, players, n_events, policy="best_score")
    events = to_events(w.events)
    ids = sample_players(players, args.read_ops, args.seed, salt=21)
    results: dict[int, dict[str, list[float]]] = {}
    with ray_session():
        for n in shard_counts:
            for rep in range(args.repeat):
                t0 = time.perf_counter()
                r = asyncio.run(measure(n, events, ids, batch=args.batch, inflight=args.inflight,
                                        concurrency=args.concurrency, read_ops=args.read_ops))
                for k, v in r.items():
                    results.setdefault(n, {}).setdefault(k, []).append(v)
                print(f"  shards={n} repeat={rep + 1}: ingest {r['ingest_events_per_s']:,.0f} ev/s, rank p50 "
                      f"{r['rank_p50_ms']:.2f} ms, concurrent {r['rank_concurrent_per_s']:,.0f}/s, approx err "
                      f"{r['approx_abs_error_mean']:.1f} ({time.perf_counter() - t0:.0f}s, load "
                      f"{os.getloadavg()[0]:.2f})", flush=True)
    print("\n" + table(results))
    print("\nTargets (issue 4):")
    for line in check_targets(results):
        print("  " + line)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "shards.json"), "w") as f:
        json.dump({"params": params, "results": {str(k): v for k, v in results.items()}}, f, indent=1)
    paths = plot(results, args.out)
    print(f"\nwrote {repo_relative(os.path.join(args.out, 'shards.json'))} and {len(paths)} plots")
    return 0


if __name__ == "__main__":
    sys.exit(main())

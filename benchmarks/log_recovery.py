"""Benchmark the durable event log and snapshot store (engine.log).

Measures, each ``--repeat`` times, and prints min/median/max rows:

* append throughput (records/s) and p50/p99 latency of ``append_batch`` with
  an fsync per commit group, batch sizes 1, 100, 1000, 10000, with one
  appender and with 4 concurrent appender threads (group commit);
* snapshot save time, load time and file size for a payload shaped like 1M
  players' rows ``[player_id, value, achieved_at, submitted_at, status,
  row_version, last_event_id]``;
* recovery of a 5M-record log (1M with ``--quick``): ``open`` (verifies every
  CRC and builds the sparse index), a full ``read_from(0)`` replay, and the
  dead-letter scan a shard's replay starts with (``read_where`` for the
  3-byte head of a dead-letter record: one sequential pass that decodes only
  those; the log holds 8 of them among the events);
* side by side, when ``benchmarks/redis_peer.py`` and ``redis-server`` are
  available: the exact-semantics Redis peer ingesting the same events with
  AOF ``appendfsync always``, and its restart time (AOF reload), against
  FlowRank's log append + open + replay of the same records. (FlowRank's row
  is the log only; applying records to shard state is measured elsewhere.)

Event records: ``["s", board_id, event_id, player_id, value, achieved_at,
submitted_at, 0]``.

Usage: ``python -m benchmarks.log_recovery [--quick] [--seed N] [--repeat N]
[--data-dir DIR] [--no-redis] [--recovery-only]``.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from engine.core import records as R  # noqa: E402
from engine.log import FileSnapshotStore, SegmentedFileLog  # noqa: E402

BOARD = "bench-board"


# ------------------------------------------------------------------ header


def machine_header(params: dict) -> str:
    cpu = "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        ram = f"{os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.1f} GiB"
    except (ValueError, OSError):
        ram = "?"
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return "\n".join([
        "FlowRank log/snapshot recovery benchmark",
        f"  machine : {cpu} | {cores}/{os.cpu_count()} cores | {ram} RAM | {platform.system()} {platform.release()}",
        f"  python  : {platform.python_version()} ({platform.python_implementation()})",
        "  params  : " + " ".join(f"{k}={v}" for k, v in params.items()),
    ])


# ------------------------------------------------------------------ helpers


def make_events(rng: random.Random, n: int, start: int = 0) -> list[list]:
    base = 1_700_000_000_000
    return [["s", BOARD, f"evt-{start + i:012d}", f"player-{rng.randrange(1_000_000):07d}",
             rng.randrange(10**7), base + i, base + i + rng.randrange(500), 0] for i in range(n)]


def percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    k = min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))
    return sorted_values[k]


def fmt(v: float, unit: str) -> str:
    if unit == "ms":
        return f"{v * 1e3:,.3f}"
    if unit == "s":
        return f"{v:,.3f}"
    if unit == "MiB":
        return f"{v / 2**20:,.1f}"
    return f"{v:,.0f}"


class Table:
    def __init__(self):
        self.rows: list[tuple[str, str, list[float]]] = []

    def add(self, name: str, unit: str, values: list[float]) -> None:
        self.rows.append((name, unit, values))
        print(f"  {name:<58} {unit:>9} {fmt(min(values), unit):>14} {fmt(statistics.median(values), unit):>14} "
              f"{fmt(max(values), unit):>14}", flush=True)


def table_header(title: str) -> None:
    print(f"\n{title}")
    print(f"  {'metric':<58} {'unit':>9} {'min':>14} {'median':>14} {'max':>14}")


# ------------------------------------------------------------------ appends


def run_appends(root: str, batch: int, threads: int, duration: float, events: list[list]) -> tuple[float, float, float]:
    """Return (records/s, p50 latency s, p99 latency s) for one timed run."""
    directory = tempfile.mkdtemp(dir=root, prefix=f"append-b{batch}-t{threads}-")
    log = SegmentedFileLog.open(directory, fsync=True)
    batch_records = events[:batch]
    latencies: list[list[float]] = [[] for _ in range(threads)]
    counts = [0] * threads
    start_gate = threading.Barrier(threads + 1)
    deadline = [0.0]

    def appender(t: int) -> None:
        lat = latencies[t]
        start_gate.wait()
        n = 0
        while True:
            t0 = time.perf_counter()
            if t0 >= deadline[0]:
                break
            log.append_batch(batch_records)
            lat.append(time.perf_counter() - t0)
            n += batch
        counts[t] = n

    workers = [threading.Thread(target=appender, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    t_start = time.perf_counter()
    deadline[0] = t_start + duration
    start_gate.wait()
    for w in workers:
        w.join()
    elapsed = time.perf_counter() - t_start
    log.close()
    shutil.rmtree(directory, ignore_errors=True)
    all_lat = sorted(x for lat in latencies for x in lat)
    return sum(counts) / elapsed, percentile(all_lat, 0.5), percentile(all_lat, 0.99)


# ------------------------------------------------------------------ snapshot


def snapshot_payload(rng: random.Random, players: int) -> list[list]:
    base = 1_700_000_000_000
    return [[f"player-{i:07d}", rng.randrange(10**7), base + i, base + i + 250, 0, rng.randrange(1, 20),
             f"evt-{i:012d}"] for i in range(players)]


# ------------------------------------------------------------------ main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="shorter runs, 1M-record replay log")
    parser.add_argument("--data-dir", default=None, help="where to write (default: a temp dir, removed)")
    parser.add_argument("--no-redis", action="store_true", help="skip the Redis AOF peer rows")
    parser.add_argument("--recovery-only", action="store_true", help="only the recovery table (no appends, snapshots)")
    args = parser.parse_args(argv)

    rng = random.Random(args.seed)
    duration = 0.5 if args.quick else 2.0
    replay_n = 1_000_000 if args.quick else 5_000_000
    players = 1_000_000
    redis_n = 100_000 if args.quick else 1_000_000
    root = tempfile.mkdtemp(prefix="flowrank-logbench-", dir=args.data_dir)
    params = {"seed": args.seed, "repeat": args.repeat, "quick": args.quick, "recovery_only": args.recovery_only,
              "append_seconds": duration,
              "replay_records": replay_n, "snapshot_players": players, "redis_events": redis_n,
              "data_dir": root}
    print(machine_header(params), flush=True)
    try:
        events = make_events(rng, 10_000)

        if not args.recovery_only:
            table_header("Append (fsync per commit group; records/s, latency per append_batch call)")
        for threads in (() if args.recovery_only else (1, 4)):
            for batch in (1, 100, 1000, 10_000):
                runs = [run_appends(root, batch, threads, duration, events) for _ in range(args.repeat)]
                label = f"batch={batch:<5} threads={threads}"
                Table().add(f"{label} throughput", "rec/s", [r[0] for r in runs])
                Table().add(f"{label} p50 latency", "ms", [r[1] for r in runs])
                Table().add(f"{label} p99 latency", "ms", [r[2] for r in runs])

        if not args.recovery_only:
            run_snapshot_rows(root, rng, players, args.repeat)

        table_header(f"Recovery of a {replay_n:,}-record log (batches of 10,000, fsync)")
        run_recovery_rows(root, rng, replay_n, events, args.repeat)

        if not args.no_redis:
            run_redis_rows(root, rng, redis_n, args.repeat)
    finally:
        if args.data_dir is None:
            shutil.rmtree(root, ignore_errors=True)
    return 0


def run_snapshot_rows(root: str, rng: random.Random, players: int, repeat: int) -> None:
    table_header(f"Snapshot of {players:,} player rows (msgpack + xxh3_128, atomic write + fsync)")
    payload = snapshot_payload(rng, players)
    store = FileSnapshotStore(os.path.join(root, "snapshots"), keep=2)
    saves, loads, sizes = [], [], []
    for r in range(repeat):
        t0 = time.perf_counter()
        path = store.save("shard-0", 1000 + r, payload)
        saves.append(time.perf_counter() - t0)
        sizes.append(os.path.getsize(path))
        t0 = time.perf_counter()
        loaded = store.load_latest("shard-0")
        loads.append(time.perf_counter() - t0)
        assert loaded is not None and len(loaded[1]) == players
        del loaded
    del payload
    Table().add("snapshot save", "s", saves)
    Table().add("snapshot load (verify + decode)", "s", loads)
    Table().add("snapshot file size", "MiB", sizes)


def run_recovery_rows(root: str, rng: random.Random, replay_n: int, events: list[list], repeat: int) -> None:
    log_dir = os.path.join(root, "replay-log")
    ingest_rates = []
    log = SegmentedFileLog.open(log_dir)
    t0 = time.perf_counter()
    dead_every = max(1, replay_n // 10_000 // 8) * 10_000
    for start in range(0, replay_n, 10_000):
        batch = (make_events(rng, 10_000, start) if start < 10_000 else
                 [["s", BOARD, f"evt-{start + i:012d}"] + e[3:] for i, e in enumerate(events)])
        if start % dead_every == 0 and start // dead_every < 8:  # a dead letter in place of one event (the count stays replay_n)
            batch[-1] = R.dead_letter_record(R.DeadLetter(BOARD, start, None, batch[0][2], "RuntimeError: bench"))
        log.append_batch(batch)
    ingest_rates.append(replay_n / (time.perf_counter() - t0))
    log_bytes = sum(size for _f, _p, size in log.segments())
    log.close()
    opens, reads, scans = [], [], []
    for _ in range(repeat):
        t0 = time.perf_counter()
        log = SegmentedFileLog.open(log_dir)
        opens.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        found = log.read_where(0, R.DEAD_LETTER_HEAD)
        scans.append(time.perf_counter() - t0)
        assert len(found) == 8, len(found)
        t0 = time.perf_counter()
        n = 0
        for _offset, _record in log.read_from(0):
            n += 1
        reads.append(n / (time.perf_counter() - t0))
        log.close()
        assert n == replay_n
    Table().add("build: append throughput (batch 10000, 1 thread)", "rec/s", ingest_rates)
    Table().add("log size on disk", "MiB", [log_bytes])
    Table().add("open (verify all CRCs + build index)", "s", opens)
    Table().add("open rate", "rec/s", [replay_n / o for o in opens])
    Table().add("read_from(0) replay rate", "rec/s", reads)
    Table().add("open + full replay", "s", [o + replay_n / r for o, r in zip(opens, reads)])
    Table().add("dead-letter scan (read_where from 0)", "s", scans)
    Table().add("dead-letter scan rate", "rec/s", [replay_n / t for t in scans])
    Table().add("dead-letter scan / full replay", "%", [100 * t * r / replay_n for t, r in zip(scans, reads)])


def run_redis_rows(root: str, rng: random.Random, n: int, repeat: int) -> None:
    """Redis AOF ``appendfsync always`` peer vs FlowRank's log on the same events."""
    try:
        from benchmarks.redis_peer import RedisBoard, RedisServer, ensure_redis_server

        ensure_redis_server()
    except Exception as exc:  # a missing server or module is reported, not fatal
        print(f"\nRedis peer rows skipped: {exc}")
        return
    table_header(f"Side by side, {n:,} events, pipeline/batch 1000: Redis AOF appendfsync always vs FlowRank log")
    events = make_events(rng, n)
    peer_events = [e[1:7] for e in events]
    r_ingest, r_restart, f_ingest, f_recover = [], [], [], []
    for r in range(repeat):
        with RedisServer(appendonly=True, appendfsync="always") as server:
            client = server.client()
            board = RedisBoard(client, BOARD)
            t0 = time.perf_counter()
            board.ingest(peer_events, batch=1000)
            r_ingest.append(n / (time.perf_counter() - t0))
            client.close()
            r_restart.append(server.restart())
            client = server.client()
            assert RedisBoard(client, BOARD, load=False).size() > 0
            client.close()
        directory = os.path.join(root, f"side-by-side-{r}")
        log = SegmentedFileLog.open(directory)
        t0 = time.perf_counter()
        for i in range(0, n, 1000):
            log.append_batch(events[i:i + 1000])
        f_ingest.append(n / (time.perf_counter() - t0))
        log.close()
        t0 = time.perf_counter()
        log = SegmentedFileLog.open(directory)
        count = sum(1 for _ in log.read_from(0))
        f_recover.append(time.perf_counter() - t0)
        log.close()
        assert count == n
        shutil.rmtree(directory, ignore_errors=True)
    Table().add("Redis peer ingest (FCALL per event, AOF always)", "rec/s", r_ingest)
    Table().add("FlowRank log append (append_batch of 1000)", "rec/s", f_ingest)
    Table().add("Redis restart until loaded (AOF reload)", "s", r_restart)
    Table().add("FlowRank log open + full read_from(0)", "s", f_recover)


if __name__ == "__main__":
    sys.exit(main())

"""``python -m benchmarks http --background``: read latency while heavy work runs beside it (issue 29 item 2).

    python -m benchmarks http --background [--quick] [--size N] [--duration S] [--connections 32]
                              [--partitions 1,4] [--shard-actors 2] [--read-route top]
                              [--journal-tail-rows T] [--only writes|export] [--seed 7] [--out DIR]

One ``flowrank serve`` (embedded Ray, ``--shard-actors``, its shard actors keeping
``--journal-tail-rows`` journal rows per partition in memory through
``FLOWRANK_JOURNAL_TAIL_ROWS``), one best_score board of ``--size`` players per
partition count. For each partition count, two wrk read runs of ``--duration``
seconds (``wrk -t1 -c<connections>``, the route of ``--read-route``) against its board:

1. **quiet**: the reads alone;
2. **background**: the same reads while, one second in, a client thread writes
   ``W = 2.5 x T x max(--partitions)`` fresh events to the board in batches of 500
   (every partition's journal flushes at least twice, so at least one journal run
   merge runs in each), the server takes a snapshot (started with
   ``--snapshot-every-events W/2``: the writes cross that count at least once), and
   a second thread streams the board's whole export (``--size`` rows, jsonl) once.

``--only writes`` (the writes and the snapshot they set off) or ``--only export`` runs one
part of the background alone, to tell what each costs the reads.

It reports read p50/p99 of both runs and their ratio, and what the background did:
events written and their seconds, export rows and seconds, snapshots taken during the
run and their pause (``flowrank_snapshot_pause_seconds`` count and sum from
``/metrics``), and whether each finished inside the read window (a background that
outlasts the window is reported, not hidden: make ``--duration`` longer).

Writes ``background.md`` and ``background.json`` to ``--out``. ``--quick`` (a
5,000-player board, a 1,024-row journal tail, 6 s runs) takes about 2 minutes on 2
cores, most of it the server's start.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path

import httpx

from benchmarks.http_bench import flowrank_server, run_wrk
from benchmarks.http_load import ADMIN_KEY, BASE_MS, READ_KEY, WRITE_KEY, board_id, preload
from benchmarks.http_wrk import ensure_wrk
from benchmarks.machine import describe, header
from benchmarks.processes import sigterm_raises

QUICK = {"size": 5_000, "duration": 6, "tail": 1_024}
FULL = {"size": 1_000_000, "duration": 30, "tail": 65_536}
ROUTES = {"top": "top", "rank": "player", "around": "around"}


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m benchmarks http --background", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--background", action="store_true", help="this mode (given to reach it)")
    ap.add_argument("--quick", action="store_true", help=f"small board, short runs ({QUICK})")
    ap.add_argument("--size", type=int, default=None, help=f"players per board (default {FULL['size']:,})")
    ap.add_argument("--duration", type=int, default=None, help=f"seconds per wrk run (default {FULL['duration']})")
    ap.add_argument("--connections", type=int, default=32, help="wrk connections (default 32)")
    ap.add_argument("--partitions", default="1,4", help="board partition counts (default 1,4)")
    ap.add_argument("--shard-actors", type=int, default=2, help="shard actors (default 2)")
    ap.add_argument("--read-route", choices=sorted(ROUTES), default="top", help="what wrk reads (default top: top-100)")
    ap.add_argument("--journal-tail-rows", type=int, default=None,
                    help=f"journal rows per partition in memory (default {FULL['tail']:,}; the engine's own default "
                         "is 262,144)")
    ap.add_argument("--only", choices=["writes", "export"], default=None,
                    help="run one part of the background alone (writes: the writes and the snapshot they set off; "
                         "export: the export alone), to tell what each costs the reads (default: both)")
    ap.add_argument("--warmup", type=int, default=2, help="seconds of unrecorded reads before the runs")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--out", default=None, help="output directory (default results/http-background-<UTC time>)")
    return ap


def _snapshot_pauses(url: str) -> tuple[float, float]:
    """``flowrank_snapshot_pause_seconds``: (count, sum) since the server started."""
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(url + "/metrics", headers={"Authorization": f"Bearer {ADMIN_KEY}"}, timeout=30).text
    count = total = 0.0
    for fam in text_string_to_metric_families(text):
        if fam.name == "flowrank_snapshot_pause_seconds":
            for s in fam.samples:
                if s.name.endswith("_count"):
                    count += s.value
                elif s.name.endswith("_sum"):
                    total += s.value
    return count, total


def _write(url: str, board: str, size: int, events: int, tag: str) -> dict:
    """``events`` fresh events over the board's players, batches of 500."""
    began = time.perf_counter()
    with httpx.Client(base_url=url, timeout=120, headers={"Authorization": f"Bearer {WRITE_KEY}"}) as c:
        for start in range(0, events, 500):
            n = min(500, events - start)
            body = {"events": [{"event_id": f"bg-{tag}-{start + i}", "board_id": board,
                                "player_id": f"p{(start + i) * 7919 % size}", "value": (start + i) % 1_000_003,
                                "achieved_at": BASE_MS + size + start + i} for i in range(n)]}
            c.post("/v1/events", json=body).raise_for_status()
    return {"events": events, "seconds": time.perf_counter() - began}


def _export(url: str, board: str) -> dict:
    """The board's whole export, streamed and counted (jsonl: one row a line)."""
    began = time.perf_counter()
    rows = 0
    with httpx.Client(base_url=url, timeout=600, headers={"Authorization": f"Bearer {ADMIN_KEY}"}) as c:
        with c.stream("GET", f"/v1/boards/{board}/export", params={"format": "jsonl"}) as r:
            r.raise_for_status()
            for chunk in r.iter_bytes():
                rows += chunk.count(b"\n")
    return {"rows": rows, "seconds": time.perf_counter() - began}


def measure(wrk: str, url: str, board: str, partitions: int, args, nonce: str) -> dict:
    prefix = f"/v1/boards/{board}"
    env = {"PREFIX": prefix, "SIZE": str(args.size), "ROUTE": ROUTES[args.read_route]}
    run_wrk(wrk, url + prefix, "reads.lua", {**env, "RUN": f"{nonce}-warm"}, args.warmup, args.connections, READ_KEY)
    quiet = run_wrk(wrk, url + prefix, "reads.lua", {**env, "RUN": f"{nonce}-q"}, args.duration, args.connections,
                    READ_KEY)
    events = args.background_events
    before = _snapshot_pauses(url)
    window_began = time.perf_counter()
    with ThreadPoolExecutor(3) as pool:
        reads = pool.submit(run_wrk, wrk, url + prefix, "reads.lua", {**env, "RUN": f"{nonce}-b"}, args.duration,
                            args.connections, READ_KEY)
        time.sleep(1.0)
        idle = {"events": 0, "rows": 0, "seconds": 0.0}
        writes = pool.submit(_write, url, board, args.size, events, nonce) if args.only != "export" else None
        export = pool.submit(_export, url, board) if args.only != "writes" else None
        busy = reads.result()
        window = time.perf_counter() - window_began
        wrote = writes.result() if writes else idle
        exported = export.result() if export else idle
        finished = time.perf_counter() - window_began
    time.sleep(1.5)  # the snapshot loop looks every 0.5 s; a snapshot the writes set off is counted
    after = _snapshot_pauses(url)
    out = {
        "quiet": quiet, "background": busy, "p99_ratio": busy["p99_ms"] / quiet["p99_ms"] if quiet["p99_ms"] else None,
        "writes": wrote, "export": exported,
        "snapshots": {"taken": after[0] - before[0], "pause_sum_s": after[1] - before[1]},
        "read_window_s": window, "background_done_s": finished,
        "background_inside_window": 1.0 + max(wrote["seconds"], exported["seconds"]) <= window,
    }
    print(f"  partitions={partitions}: read p99 {quiet['p99_ms']:.2f} ms quiet, {busy['p99_ms']:.2f} ms with the "
          f"background ({busy['rps']:,.0f} req/s); wrote {wrote['events']:,} events in {wrote['seconds']:.1f} s, exported "
          f"{exported.get('rows', 0):,} rows in {exported['seconds']:.1f} s, snapshots {out['snapshots']['taken']:.0f} "
          f"(pause sum {out['snapshots']['pause_sum_s'] * 1000:.1f} ms); inside the window: "
          f"{out['background_inside_window']}", flush=True)
    return out


def table(rows: list[dict]) -> str:
    lines = ["| partitions | quiet p50 ms | quiet p99 ms | background p50 ms | background p99 ms | p99 ratio "
             "| events written (s) | export rows (s) | snapshots (pause sum ms) | inside window |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|:---:|"]
    for r in rows:
        q, b = r["quiet"], r["background"]
        lines.append(f"| {r['partitions']} | {q['p50_ms']:.2f} | {q['p99_ms']:.2f} | {b['p50_ms']:.2f} | "
                     f"{b['p99_ms']:.2f} | {r['p99_ratio']:.2f} | {r['writes']['events']:,} "
                     f"({r['writes']['seconds']:.1f}) | {r['export']['rows']:,} ({r['export']['seconds']:.1f}) | "
                     f"{r['snapshots']['taken']:.0f} ({r['snapshots']['pause_sum_s'] * 1000:.1f}) | "
                     f"{'yes' if r['background_inside_window'] else 'NO'} |")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    base = QUICK if args.quick else FULL
    args.size = args.size or base["size"]
    args.duration = args.duration or base["duration"]
    args.journal_tail_rows = args.journal_tail_rows or base["tail"]
    partitions = [int(x) for x in args.partitions.split(",") if x]
    # the same writes at every partition count: enough for two flushes of every partition of the
    # most partitioned board; the server snapshots every half of them (at least one per run)
    events_max = args.background_events = int(2.5 * args.journal_tail_rows * max(partitions))
    out = Path(args.out or f"results/http-background-{datetime.now(timezone.utc):%Y%m%d-%H%M%S}")
    machine = describe()
    params = {"quick": args.quick, "size": args.size, "duration_s": args.duration, "connections": args.connections,
              "partitions": partitions, "shard_actors": args.shard_actors, "read_route": args.read_route,
              "journal_tail_rows": args.journal_tail_rows, "snapshot_every_events": events_max // 2,
              "warmup_s": args.warmup, "seed": args.seed, "only": args.only}
    print(header(params, machine), flush=True)
    load_before = os.getloadavg()
    wrk = ensure_wrk()
    nonce = f"{int(time.time())}"
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    rows = []
    with sigterm_raises(), contextlib.ExitStack() as stack:
        fr = stack.enter_context(flowrank_server(
            args.shard_actors, 1, ["--snapshot-every-events", str(max(1, events_max // 2))],
            env={"FLOWRANK_JOURNAL_TAIL_ROWS": str(args.journal_tail_rows)}))
        for p in partitions:
            preload(fr.url, board_id(p), p, args.size, args.seed)
        for p in partitions:
            rows.append({"partitions": p, **measure(wrk, fr.url, board_id(p), p, args, f"bg{p}-{nonce}")})
    load_after = os.getloadavg()
    finished = datetime.now(timezone.utc).isoformat(timespec="seconds")
    command = "python -m benchmarks http " + " ".join(argv)
    out.mkdir(parents=True, exist_ok=True)
    md = "\n".join([
        f"# Reads with a snapshot, journal run merges and an export beside them ({'quick' if args.quick else 'full'})",
        "",
        f"Command: `{command.strip()}`  ",
        f"Machine: {machine.get('cpu_model')}, {machine.get('cores_usable')} cores, Python {machine.get('python')}, "
        f"Ray {machine.get('ray')}, commit {(machine.get('git_commit') or '?')[:12]}  ",
        f"Load average before/after: {load_before[0]:.2f} / {load_after[0]:.2f} (1 min)  ",
        f"Parameters: {args.size:,} players per board, wrk -t1 -c{args.connections} {args.read_route} reads, "
        f"{args.duration} s per run, journal tail {args.journal_tail_rows:,} rows, {args.shard_actors} shard actors"
        f"{'; background: the ' + args.only + ' alone' if args.only else ''}; "
        f"{started} → {finished}",
        "",
        table(rows),
        "",
        "Background: writes of 2.5 × tail × the largest partition count fresh events (batches of 500; every partition's journal "
        "flushes at least twice, so at least one run merge each), the snapshot they set off "
        "(--snapshot-every-events), and one export of the whole board, all inside the read window when "
        "\"inside window\" says yes.",
        "",
    ])
    (out / "background.md").write_text(md)
    (out / "background.json").write_text(json.dumps({"command": command.strip(), "machine": machine, "params": params,
                                                     "load_before": load_before, "load_after": load_after,
                                                     "started": started, "finished": finished, "rows": rows},
                                                    indent=2))
    print("\n" + table(rows))
    print(f"wrote {out / 'background.md'} and {out / 'background.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

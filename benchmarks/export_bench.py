"""``python -m benchmarks export``: the export route (docs/api.md §13) and the CLI round trip.

    python -m benchmarks export [--rows 100000,300000,1000000] [--repeat 3] [--engine local|ray]
                                [--shards 2] [--client curl|httpx] [--events N] [--submit-concurrency C]
                                [--seed 1] [--json OUT]

For each board size in ``--rows`` it starts ``flowrank serve`` (its own data
directory and keys; the local engine keeps the shards in the server process,
so its RSS is the whole server's), fills one ``best_score`` board of
``--shards`` partitions with that many ranked players (POST /v1/events,
10,000 per request), then streams ``GET /export?format=csv`` and
``?format=jsonl`` ``--repeat`` times each, read by ``curl`` (a C client, so
the other core is not spent parsing HTTP; ``--client httpx`` reads them in
Python) and discarded. A warm-up export of each format, read with httpx,
counts its rows; every timed one must send the same number of bytes.
Per size and format it reports rows/s (min/median/max over the repeats), the
time to the first byte (the spill of every partition at the pinned version)
and the server's RSS (the gateway process plus its children): once the board
is filled, before the timed exports (after the warm-up ones), the peak sampled
every 20 ms during that format's exports, and after them; and the load average. Issue 13's target: 200k rows/s at 1M rows,
and an RSS during the export that does not grow with the board size (the
peak minus the before column stays flat from 100k to 1M rows).

``--events N`` adds the CLI round trip of issue 12: N best_score events over
N/2 players written as JSON Lines, sent with ``flowrank submit`` (batches of
500), exported with ``flowrank export -o``; the outcome counts of the summary
and every exported row are checked against an in-process oracle.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import httpx

from .machine import REPO_ROOT, describe, header

ADMIN_KEY = "bench-admin"
BOARD = "bench:export:S1:global"
T0 = 1_793_527_500_000


def _rss(pid: int) -> int:
    import psutil

    try:
        p = psutil.Process(pid)
        procs = [p, *p.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0
    total = 0
    for q in procs:
        try:
            total += q.memory_info().rss
        except psutil.NoSuchProcess:
            pass
    return total


class Server:
    """``flowrank serve`` in a child process on a free loopback port."""

    def __init__(self, directory: Path, engine: str, shards: int):
        directory.mkdir(parents=True, exist_ok=True)
        keys = directory / "keys.json"
        keys.write_text(json.dumps({"keys": [{"name": "a", "role": "admin", "key": ADMIN_KEY,
                                              "rate_per_s": 10_000_000, "burst": 10_000_000}]}))
        with socket.socket() as sock:  # a free loopback port
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        cmd = [sys.executable, "-m", "gateway", "serve", "--data-dir", str(directory / "data"), "--keys", str(keys),
               "--port", str(self.port), "--engine", engine, "--shards", str(shards),
               "--write-rate", "10000000", "--read-rate", "10000000"]
        if engine == "ray":
            cmd += ["--shard-actors", str(shards)]
        self.log = open(directory / "serve.log", "wb")
        self.proc = subprocess.Popen(cmd, cwd=REPO_ROOT, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 120
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"flowrank serve exited {self.proc.returncode}; see {directory / 'serve.log'}")
            try:
                if httpx.get(f"{self.url}/readyz", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        raise RuntimeError("flowrank serve did not become ready in 120 s")

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def _fill(client: httpx.Client, rows: int, seed: int) -> float:
    rnd = random.Random(seed)
    t0 = time.perf_counter()
    r = client.post("/v1/boards", json={"board_id": BOARD, "policy": "best_score"})
    r.raise_for_status()
    for start in range(0, rows, 10_000):
        events = [{"event_id": f"f{i}", "board_id": BOARD, "player_id": f"player-{i:08d}",
                   "value": rnd.randrange(1_000_000), "achieved_at": T0 + rnd.randrange(86_400_000)}
                  for i in range(start, min(rows, start + 10_000))]
        client.post("/v1/events", json={"events": events}).raise_for_status()
    return time.perf_counter() - t0


def _export_once(client: httpx.Client, fmt: str) -> tuple[float, float, int, int]:
    """(seconds, seconds to the first byte, rows, version) of one export."""
    t0 = time.perf_counter()
    lines = 0
    first = None
    with client.stream("GET", f"/v1/boards/{BOARD}/export", params={"format": fmt}) as r:
        r.raise_for_status()
        version = int(r.headers["X-Board-Version"])
        for chunk in r.iter_bytes():
            if first is None:
                first = time.perf_counter() - t0
            lines += chunk.count(b"\n")
    return time.perf_counter() - t0, first or 0.0, lines - (1 if fmt == "csv" else 0), version


def _export_curl(url: str, fmt: str) -> tuple[float, float, int]:
    """(seconds, seconds to the first byte, bytes) of one export read by curl
    (a C client: the 2-core machine's other core is not spent parsing HTTP)."""
    out = subprocess.run(["curl", "-sS", "-o", "/dev/null", "-H", f"Authorization: Bearer {ADMIN_KEY}", "-w",
                          "%{http_code} %{size_download} %{time_starttransfer} %{time_total}",
                          f"{url}/v1/boards/{BOARD}/export?format={fmt}"], capture_output=True, text=True, check=True)
    code, size, first, total = out.stdout.split()
    if code != "200":
        raise RuntimeError(f"curl: export answered {code}")
    return float(total), float(first), int(size)


def _export_bytes(client: httpx.Client, fmt: str) -> tuple[int, int]:
    """(rows, bytes) of one export read by httpx: the rows are counted."""
    lines = size = 0
    with client.stream("GET", f"/v1/boards/{BOARD}/export", params={"format": fmt}) as r:
        r.raise_for_status()
        for chunk in r.iter_bytes():
            lines += chunk.count(b"\n")
            size += len(chunk)
    return lines - (1 if fmt == "csv" else 0), size


class _Peak(threading.Thread):
    def __init__(self, pid: int):
        super().__init__(daemon=True)
        self.pid, self.peak, self.stop = pid, 0, threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            self.peak = max(self.peak, _rss(self.pid))
            time.sleep(0.02)


def _mib(n: int) -> float:
    return round(n / 2**20, 1)


def bench_size(rows: int, args, tmp: Path) -> dict:
    srv = Server(tmp / f"rows-{rows}", args.engine, args.shards)
    try:
        with httpx.Client(base_url=srv.url, timeout=600, headers={"Authorization": f"Bearer {ADMIN_KEY}"}) as c:
            fill_s = _fill(c, rows, args.seed)
            time.sleep(1.0)
            filled = _rss(srv.proc.pid)  # before any export: the warm-up's own memory shows in "before"
            sizes = {}
            for fmt in ("csv", "jsonl"):  # warm-up (numba kernels loaded, or compiled on a cold cache); rows checked
                got, sizes[fmt] = _export_bytes(c, fmt)
                if got != rows:
                    raise RuntimeError(f"{fmt} export returned {got} rows, expected {rows}")
            time.sleep(1.0)
            before = _rss(srv.proc.pid)
            result: dict = {"rows": rows, "fill_s": round(fill_s, 2), "load": [round(x, 2) for x in os.getloadavg()],
                            "rss_filled_mib": _mib(filled), "rss_before_mib": _mib(before)}
            for fmt in ("csv", "jsonl"):
                peak = _Peak(srv.proc.pid)
                peak.start()
                rates, firsts = [], []
                for _ in range(args.repeat):
                    if args.client == "curl":
                        seconds, first, size = _export_curl(srv.url, fmt)
                        if size != sizes[fmt]:  # the same version, so the same bytes
                            raise RuntimeError(f"{fmt} export sent {size} bytes, expected {sizes[fmt]}")
                    else:
                        seconds, first, got, _version = _export_once(c, fmt)
                        if got != rows:
                            raise RuntimeError(f"{fmt} export returned {got} rows, expected {rows}")
                    rates.append(rows / seconds)
                    firsts.append(first)
                peak.stop.set()
                peak.join()
                after = _rss(srv.proc.pid)
                top = max(peak.peak, after)
                result[fmt] = {"rows_per_s": {"min": round(min(rates)), "median": round(statistics.median(rates)),
                                              "max": round(max(rates))},
                               "first_byte_s_median": round(statistics.median(firsts), 3), "bytes": sizes[fmt],
                               "rss_peak_mib": _mib(top), "rss_after_mib": _mib(after),
                               "rss_growth_peak_mib": _mib(top - before)}
            result["load_after"] = [round(x, 2) for x in os.getloadavg()]
            return result
    finally:
        srv.close()


def _table(sizes: list[dict]) -> str:
    head = (f"{'rows':>9} {'format':>6} {'rows/s min':>11} {'median':>9} {'max':>9} {'1st byte':>9} "
            f"{'RSS filled':>11} {'before':>7} {'peak':>7} {'after':>7} {'growth':>7}  load")
    lines = [head]
    for r in sizes:
        for fmt in ("csv", "jsonl"):
            f = r[fmt]
            rate = f["rows_per_s"]
            lines.append(f"{r['rows']:>9,} {fmt:>6} {rate['min']:>11,} {rate['median']:>9,} {rate['max']:>9,} "
                         f"{f['first_byte_s_median']:>8.3f}s {r['rss_filled_mib']:>8.1f}MiB {r['rss_before_mib']:>7.1f} "
                         f"{f['rss_peak_mib']:>7.1f} "
                         f"{f['rss_after_mib']:>7.1f} {f['rss_growth_peak_mib']:>+7.1f}  "
                         f"{r['load'][0]:.1f}->{r['load_after'][0]:.1f}")
    return "\n".join(lines)


# ----------------------------------------------------------------- round trip


def _round_trip_events(n: int, seed: int) -> list[dict]:
    rnd = random.Random(seed)
    players = max(1, n // 2)
    return [{"event_id": f"rt{i}", "board_id": BOARD, "player_id": f"p{rnd.randrange(players)}",
             "value": rnd.randrange(100_000), "achieved_at": T0 + rnd.randrange(86_400_000)} for i in range(n)]


def _oracle(events: list[dict]) -> tuple[Counter, list[tuple[str, int, int]]]:
    rows: dict[str, tuple[int, int]] = {}
    out: Counter = Counter()
    for e in events:
        new, old = (e["value"], e["achieved_at"]), rows.get(e["player_id"])
        if old is None:
            out["APPLIED_FIRST_SCORE"] += 1
            rows[e["player_id"]] = new
        elif (-new[0], new[1]) < (-old[0], old[1]):
            out["APPLIED_NEW_BEST"] += 1
            rows[e["player_id"]] = new
        else:
            out["REJECTED_NOT_AN_IMPROVEMENT"] += 1
    return out, sorted(((p, v, t) for p, (v, t) in rows.items()), key=lambda r: (-r[1], r[2], r[0]))


def round_trip(n: int, args, tmp: Path) -> dict:
    from engine.core.timefmt import format_timestamps

    events = _round_trip_events(n, args.seed)
    path = tmp / "events.jsonl"
    with open(path, "w") as fh:
        for e in events:
            fh.write(json.dumps(e, separators=(",", ":")) + "\n")
    expected, ranking = _oracle(events)
    del events
    srv = Server(tmp / "round-trip", args.engine, args.shards)
    try:
        env = {**os.environ, "FLOWRANK_URL": srv.url, "FLOWRANK_KEY": ADMIN_KEY, "PYTHONPATH": str(REPO_ROOT)}
        cli = [sys.executable, "-m", "gateway"]
        subprocess.run([*cli, "boards", "create", BOARD, "--policy", "best_score"], env=env, cwd=REPO_ROOT,
                       check=True, capture_output=True)
        t0 = time.perf_counter()
        r = subprocess.run([*cli, "submit", str(path), "--json", "--concurrency", str(args.submit_concurrency)],
                           env=env, cwd=REPO_ROOT, capture_output=True, text=True)
        submit_s = time.perf_counter() - t0
        if r.returncode:
            raise RuntimeError(f"flowrank submit failed: {r.stderr.strip()}")
        summary = json.loads(r.stdout)
        out = tmp / "export.csv"
        t0 = time.perf_counter()
        r = subprocess.run([*cli, "export", BOARD, "-o", str(out)], env=env, cwd=REPO_ROOT, capture_output=True,
                           text=True)
        export_s = time.perf_counter() - t0
        if r.returncode:
            raise RuntimeError(f"flowrank export failed: {r.stderr.strip()}")
    finally:
        srv.close()
    stamps = format_timestamps([t for _, _, t in ranking])
    want = ["rank,player_id,value,achieved_at,metadata"] + [
        f"{i},{p},{v},{ts}," for i, ((p, v, _), ts) in enumerate(zip(ranking, stamps), 1)]
    got = out.read_bytes().decode("utf-8").split("\r\n")
    rows_equal = got[:-1] == want and got[-1] == ""
    return {"events": n, "players": len(ranking), "submit_s": round(submit_s, 2),
            "submit_events_per_s": round(n / submit_s), "export_s": round(export_s, 2),
            "submit_concurrency": args.submit_concurrency, "outcomes": summary["outcomes"],
            # in file order the oracle gives every count; batches in flight may reorder improvements,
            # but never change the first scores (one per player) or the total
            "outcomes_exact": (summary["outcomes"] == dict(expected) if args.submit_concurrency == 1 else
                               summary["outcomes"].get("APPLIED_FIRST_SCORE") == expected["APPLIED_FIRST_SCORE"]
                               and sum(summary["outcomes"].values()) == n),
            "retried": summary["retried"], "export_rows_equal_oracle": rows_equal}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks export", description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", default="100000,300000,1000000", help="board sizes, comma separated")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--engine", choices=("local", "ray"), default="local")
    p.add_argument("--shards", type=int, default=2, help="partitions of the board (and shard actors with ray)")
    p.add_argument("--events", type=int, default=0, help="also round-trip N events through flowrank submit/export")
    p.add_argument("--submit-concurrency", type=int, default=1, help="flowrank submit --concurrency")
    p.add_argument("--client", choices=("curl", "httpx"), default="curl" if shutil.which("curl") else "httpx",
                   help="what reads the timed exports (default curl when installed)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--json", default=None, help="write the results as JSON here")
    args = p.parse_args(argv)
    sizes = [int(s) for s in args.rows.split(",") if s]
    params = {"rows": sizes, "repeat": args.repeat, "engine": args.engine, "shards": args.shards, "client": args.client,
              "events": args.events, "submit_concurrency": args.submit_concurrency, "seed": args.seed}
    machine = describe()
    print(header(params, machine))
    print(f"  load avg: {os.getloadavg()}", flush=True)
    results: dict = {"params": params, "machine": machine, "load_before": os.getloadavg(), "sizes": [],
                     "command": "python -m benchmarks export " + " ".join(argv if argv is not None else sys.argv[1:])}
    with tempfile.TemporaryDirectory(prefix="flowrank-export-bench-") as tmp:
        for rows in sizes:
            res = bench_size(rows, args, Path(tmp))
            results["sizes"].append(res)
            print(json.dumps(res), flush=True)
        if args.events:
            res = round_trip(args.events, args, Path(tmp))
            results["round_trip"] = res
            print(json.dumps(res), flush=True)
    results["load_after"] = os.getloadavg()
    if results["sizes"]:
        print(_table(results["sizes"]))
    print(f"  load avg after: {results['load_after']}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0

"""HTTP read throughput measured by ``wrk`` (a C load generator), so the
numbers are the gateway's and not a Python client's.

    python -m benchmarks.http_wrk --shards 1,2 --size 60000 --duration 8 --repeat 3

Starts ``flowrank serve`` (``benchmarks.http_load.Server``) on loopback,
preloads one board per partition count, then runs ``wrk -t1 -c32`` against
the top-100 and exact-rank routes. Installs wrk from Debian when missing and
running as root. Prints the machine header and min/median/max of the runs.
"""

from __future__ import annotations

import argparse
import re
import shutil
import statistics
import subprocess

from benchmarks.http_load import READ_KEY, Server, board_id, preload
from benchmarks.machine import header


def ensure_wrk() -> str:
    path = shutil.which("wrk")
    if path is None:
        subprocess.run(["apt-get", "install", "-y", "-qq", "wrk"], check=True, capture_output=True)
        path = shutil.which("wrk")
    return path


def run_wrk(wrk: str, url: str, duration: int, connections: int) -> dict:
    out = subprocess.run([wrk, "-t1", f"-c{connections}", f"-d{int(duration)}s", "--latency",
                          "-H", f"Authorization: Bearer {READ_KEY}", url],
                         capture_output=True, text=True, check=True).stdout
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    return {
        "rps": float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1)),
        "p50_ms": _ms(re.search(r"50%\s+([\d.]+)(us|ms|s)", out)),
        "p99_ms": _ms(re.search(r"99%\s+([\d.]+)(us|ms|s)", out)),
        "errors": int(non2xx.group(1)) if non2xx else 0,
    }


def _ms(m) -> float:
    value, unit = float(m.group(1)), m.group(2)
    return value / 1000 if unit == "us" else value * 1000 if unit == "s" else value


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engine", choices=("ray", "local"), default="ray")
    ap.add_argument("--shards", default="1,2")
    ap.add_argument("--shard-actors", type=int, default=2)
    ap.add_argument("--size", type=int, default=60_000)
    ap.add_argument("--duration", type=int, default=8)
    ap.add_argument("--connections", type=int, default=32)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args(argv)
    print(header(vars(args)), flush=True)
    wrk = ensure_wrk()
    shard_counts = [int(x) for x in args.shards.split(",")]
    server = Server(args.engine, args.shard_actors)
    try:
        for shards in shard_counts:
            preload(server.url, board_id(shards), shards, args.size, args.seed)
        for shards in shard_counts:
            base = f"{server.url}/v1/boards/{board_id(shards)}"
            for route, path in (("top-100", "/top?limit=100"), ("exact rank", f"/players/p{args.size // 2}")):
                runs = [run_wrk(wrk, base + path, args.duration, args.connections) for _ in range(args.repeat)]
                rps = [r["rps"] for r in runs]
                print(f"{route:<11} shards={shards}  reads/s min {min(rps):,.0f} median {statistics.median(rps):,.0f} "
                      f"max {max(rps):,.0f}  p50 {statistics.median(r['p50_ms'] for r in runs):.1f} ms  "
                      f"p99 {statistics.median(r['p99_ms'] for r in runs):.1f} ms  "
                      f"errors {sum(r['errors'] for r in runs)}", flush=True)
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""``python -m benchmarks erasure``: erasing players from a big data directory through HTTP (issue 28).

    python -m benchmarks erasure [--players 1000000] [--events 10000000] [--batch 1000] [--shard-actors 2]
                                 [--partitions 2] [--window-s 10] [--json OUT]

One ``flowrank serve`` (embedded Ray, loopback, snapshots by time only). Three boards: ``best_score`` and
``cumulative`` with 40 % of ``--events`` each and ``fastest_time`` with 20 %, every player on every board;
the ``fastest_time`` board is then ARCHIVED. Then, while a writer sends batches of 500 events to the
``best_score`` board (one request at a time) and four readers ask player views of it:

1. **baseline**: ``--window-s`` seconds of that load alone: events/s and read p99;
2. **one player**: ``DELETE /v1/players/{id}``; its latency (to the 202); the time after the 202 until
   every board has answered 404 for the player, read board by board (target <= 100 ms); the time until ``GET /v1/erasures/{id}``
   says complete; the ingest rate and read p99 from the 202 to completion (targets: ingest >= 0.8x the
   baseline, read p99 <= 25 ms);
3. **1,000 players in one go**: ``--batch`` DELETEs, 64 at a time: the time to the last 202; the time
   after it until every board answered 404 for 20 of them (then all of them are checked); the time until all are complete; the
   bytes the job rewrote (``flowrank_erasure_bytes_rewritten_total``) and the archive's size; the ingest
   rate and read p99 from the last 202 to completion. The erased players come from the lower half of the
   players, the load's from the upper half (a new event for an erased id starts a new player).

Prints the machine, parameters and load average; ``--json`` writes the results.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import threading
import time
from pathlib import Path

import httpx

from .competitions import _h
from .http_bench import flowrank_server
from .http_load import ADMIN_KEY, READ_KEY, WRITE_KEY
from .machine import run_and_report

BOARDS = {"bench:best:S1:global": ("best_score", 0.4), "bench:cum:S1:global": ("cumulative", 0.4),
          "bench:fast:S1:global": ("fastest_time", 0.2)}
ARCHIVED = "bench:fast:S1:global"
LIVE = "bench:best:S1:global"
T0 = 1_793_527_500_000
TARGETS = {"exclude_after_202_ms": 100.0, "ingest_ratio": 0.8, "read_p99_ms": 25.0}


def _p99(xs: list[float]) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(0.99 * len(xs)))]


async def _load(url: str, players: int, events: int, senders: int = 6, batch: int = 5000) -> dict:
    """Every board gets its share of ``events``, round-robin over the players; seconds and events/s."""
    jobs = []
    for board, (policy, share) in BOARDS.items():
        n = int(events * share)
        for start in range(0, n, batch):
            jobs.append((board, policy, start, min(n, start + batch)))
    random.Random(1).shuffle(jobs)
    t = time.perf_counter()

    async def sender(client: httpx.AsyncClient):
        while jobs:
            board, policy, start, stop = jobs.pop()
            parts = []
            for i in range(start, stop):
                value = (i * 7919) % 100_003 + 1 if policy != "cumulative" else 1 + i % 5
                parts.append(f'{{"event_id":"{board[6:10]}-{i}","board_id":"{board}","player_id":"p{i % players}",'
                             f'"value":{value},"achieved_at":{T0 + i % 100_000}}}')
            body = ('{"events":[' + ",".join(parts) + "]}").encode()
            r = await client.post(f"{url}/v1/events", content=body,
                                  headers=_h(WRITE_KEY) | {"Content-Type": "application/json"})
            r.raise_for_status()

    async with httpx.AsyncClient(timeout=600) as client:
        await asyncio.gather(*(sender(client) for _ in range(senders)))
    secs = time.perf_counter() - t
    return {"events": events, "seconds": secs, "per_s": events / secs}


class Load:
    """A writer (batches of 500 to the live board, one request at a time) and four readers (player views)."""

    def __init__(self, url: str, players: int):
        self.url, self.players = url, players
        self.writes: list[tuple[float, int]] = []  # (end time, events)
        self.reads: list[tuple[float, float]] = []  # (end time, seconds)
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._writer, daemon=True)] + [
            threading.Thread(target=self._reader, args=(k,), daemon=True) for k in range(4)]

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def close(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(30)

    def _writer(self) -> None:
        n = 0
        rng = random.Random(7)
        with httpx.Client(timeout=120) as c:
            while not self.stop.is_set():
                events = [{"event_id": f"live-{n}-{i}", "board_id": LIVE,
                           "player_id": f"p{rng.randrange(self.players // 2, self.players)}",
                           "value": rng.randrange(200_000),
                           "achieved_at": T0 + n} for i in range(500)]
                c.post(f"{self.url}/v1/events", json={"events": events}, headers=_h(WRITE_KEY)).raise_for_status()
                self.writes.append((time.perf_counter(), 500))
                n += 1

    def _reader(self, k: int) -> None:
        rng = random.Random(100 + k)
        with httpx.Client(timeout=120) as c:
            while not self.stop.is_set():
                t = time.perf_counter()
                r = c.get(f"{self.url}/v1/boards/{LIVE}/players/p{rng.randrange(self.players // 2, self.players)}",
                          headers=_h(READ_KEY))
                if r.status_code not in (200, 404):
                    r.raise_for_status()
                self.reads.append((time.perf_counter(), time.perf_counter() - t))

    def window(self, a: float, b: float) -> dict:
        ev = sum(n for t, n in self.writes if a <= t <= b)
        rd = [d for t, d in self.reads if a <= t <= b]
        return {"seconds": b - a, "events_per_s": ev / (b - a) if b > a else float("nan"),
                "reads": len(rd), "read_p99_ms": 1000 * _p99(rd)}


def _gone(c: httpx.Client, url: str, player: str) -> bool:
    return all(c.get(f"{url}/v1/boards/{b}/players/{player}", headers=_h(READ_KEY)).status_code == 404
               for b in BOARDS)


def _wait_complete(c: httpx.Client, url: str, ids: list[str], timeout_s: float) -> float:
    deadline = time.monotonic() + timeout_s
    left = list(ids)
    while left and time.monotonic() < deadline:
        left = [e for e in left if c.get(f"{url}/v1/erasures/{e}", headers=_h(ADMIN_KEY)).json()["status"]
                != "complete"]
        if left:
            time.sleep(0.1)
    if left:
        raise RuntimeError(f"{len(left)} erasures still pending after {timeout_s} s")
    return time.perf_counter()


def _steps(c: httpx.Client, url: str, load: "Load") -> dict:
    """The erasure job's last run, step by step (flowrank_erasure_last_run_step_*): each step's seconds and
    the load's ingest rate and read p99 while it ran."""
    secs, began = {}, {}
    for line in c.get(f"{url}/metrics").text.splitlines():
        for name, into in (("flowrank_erasure_last_run_step_seconds{", secs),
                           ("flowrank_erasure_last_run_step_started_seconds{", began)):
            if line.startswith(name):
                into[line.split('step="', 1)[1].split('"', 1)[0]] = float(line.rsplit(" ", 1)[1])
    offset = time.perf_counter() - time.time()  # epoch seconds -> this process's perf_counter
    return {k: {"seconds": secs[k], **load.window(began[k] + offset, began[k] + offset + secs[k])}
            for k in sorted(secs, key=lambda k: began.get(k, 0)) if k in began}


def _metric(c: httpx.Client, url: str, name: str) -> float:
    for line in c.get(f"{url}/metrics").text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


async def _erase_many(url: str, players: list[str], concurrency: int = 64,
                      latencies: list | None = None) -> tuple[list[dict], float]:
    todo = list(players)
    out: list[dict] = []

    async def one(client: httpx.AsyncClient):
        while todo:
            p = todo.pop()
            t = time.perf_counter()
            r = await client.delete(f"{url}/v1/players/{p}", headers=_h(ADMIN_KEY))
            r.raise_for_status()
            if latencies is not None:
                latencies.append(time.perf_counter() - t)
            out.append(r.json())

    async with httpx.AsyncClient(timeout=600) as client:
        await asyncio.gather(*(one(client) for _ in range(concurrency)))
    return out, time.perf_counter()


def run(args) -> dict:
    result: dict = {"params": vars(args).copy()}
    extra = ["--snapshot-every-events", "1000000000", "--erasure-deadline-s", "3600"]
    with flowrank_server(args.shard_actors, extra=extra) as srv:
        url = srv.url
        data_dir = Path(srv.tmp) / "data" if hasattr(srv, "tmp") else None
        with httpx.Client(timeout=600) as c:
            for board, (policy, _) in BOARDS.items():
                c.post(f"{url}/v1/boards", headers=_h(ADMIN_KEY), json={
                    "board_id": board, "policy": policy, "shards": args.partitions}).raise_for_status()
        result["load"] = asyncio.run(_load(url, args.players, args.events))
        print("loaded:", result["load"], flush=True)
        with httpx.Client(timeout=600) as c:
            t = time.perf_counter()
            for state in ("FROZEN", "FINALIZED", "ARCHIVED"):
                c.post(f"{url}/v1/boards/{ARCHIVED}/state", headers=_h(ADMIN_KEY),
                       json={"state": state}).raise_for_status()
            while c.get(f"{url}/v1/boards/{ARCHIVED}", headers=_h(READ_KEY)).json().get("state") != "ARCHIVED":
                time.sleep(0.2)
            result["archive_seconds"] = time.perf_counter() - t
            load = Load(url, args.players)
            load.start()
            time.sleep(2.0)
            a = time.perf_counter()
            time.sleep(args.window_s)
            result["baseline"] = base = load.window(a, time.perf_counter())
            print("baseline:", base, flush=True)

            bytes0 = _metric(c, url, "flowrank_erasure_bytes_rewritten_total")
            t = time.perf_counter()
            r = c.delete(f"{url}/v1/players/p7", headers=_h(ADMIN_KEY))
            r.raise_for_status()
            answered = time.perf_counter()
            gone = _gone(c, url, "p7")
            excluded = time.perf_counter()
            done = _wait_complete(c, url, [r.json()["erasure_id"]], 3600)
            during = load.window(answered, done)
            result["one"] = {"delete_ms": 1000 * (answered - t), "excluded": gone,
                             "exclude_after_202_ms": 1000 * (excluded - answered),
                             "complete_after_202_s": done - answered, "during": during,
                             "ingest_ratio": during["events_per_s"] / base["events_per_s"],
                             "bytes_rewritten": _metric(c, url, "flowrank_erasure_bytes_rewritten_total") - bytes0,
                             "steps": _steps(c, url, load)}
            print("one:", result["one"], flush=True)
            time.sleep(2.0)

            # erased players come from the lower half, the load's writer and readers use the upper half (a new
            # event for an erased id would start a new player: docs/api.md §17)
            many = [f"p{i}" for i in random.Random(3).sample(range(8, args.players // 2), args.batch)]
            bytes0 = _metric(c, url, "flowrank_erasure_bytes_rewritten_total")
            t = time.perf_counter()
            lat: list[float] = []
            got, last = asyncio.run(_erase_many(url, many, latencies=lat))
            answered = time.perf_counter()
            sample_gone = all(_gone(c, url, p) for p in many[:20])  # the first round of reads after the last 202
            excluded = time.perf_counter()
            all_gone = all(_gone(c, url, p) for p in many)
            done = _wait_complete(c, url, [g["erasure_id"] for g in got], 3600)
            during = load.window(answered, done)
            result["many"] = {"players": len(many), "seconds_to_last_202": last - t,
                              "delete_ms_p50": 1000 * sorted(lat)[len(lat) // 2], "delete_ms_p99": 1000 * _p99(lat),
                              "excluded": all_gone and sample_gone, "exclude_checks": 3 * len(many),
                              "exclude_after_last_202_ms": 1000 * (excluded - answered),
                              "exclude_after_last_202_note": "20 players x 3 boards read one by one, all 404",
                              "complete_after_last_202_s": done - answered, "during": during,
                              "ingest_ratio": during["events_per_s"] / base["events_per_s"],
                              "bytes_rewritten": _metric(c, url, "flowrank_erasure_bytes_rewritten_total") - bytes0,
                              "steps": _steps(c, url, load)}
            print("many:", result["many"], flush=True)
            load.close()
        if data_dir is not None and data_dir.exists():
            result["data_dir_bytes"] = {d.name: sum(f.stat().st_size for f in d.rglob("*") if f.is_file())
                                        for d in data_dir.iterdir() if d.is_dir()}
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks erasure", description=__doc__.split("\n\n")[0])
    p.add_argument("--players", type=int, default=1_000_000)
    p.add_argument("--events", type=int, default=10_000_000)
    p.add_argument("--batch", type=int, default=1000, help="players erased in one go")
    p.add_argument("--shard-actors", type=int, default=2)
    p.add_argument("--partitions", type=int, default=2)
    p.add_argument("--window-s", type=float, default=10.0)
    p.add_argument("--json", default=None)
    return run_and_report(p.parse_args(argv), run, TARGETS)


if __name__ == "__main__":
    raise SystemExit(main())

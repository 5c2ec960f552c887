"""``python -m benchmarks competitions``: a league board through HTTP (issue 27).

    python -m benchmarks competitions [--players 1000000] [--cohort 50] [--tiers 10] [--shard-actors 2]
                                      [--partitions 2] [--duration 10] [--joins-s 5] [--json OUT]

One ``flowrank serve`` (embedded Ray, loopback, snapshots by time only) with ``--webhook-url`` pointing
at a local receiver that fails 30 % of first attempts, and a friends file
giving each of the first 10,000 players ``cohort - 1`` friends. It measures:

1. **joins**: ``POST …/players/{id}/join`` one per request (wrk ``-c32`` for
   ``--joins-s`` seconds): joins/s and p99;
2. **entry by events**: the rest of ``--players`` players enter with their
   first score event, in batches of 1,000 (8 concurrent senders): players/s;
3. **cohort reads beside friends views** of the same size (wrk ``-c32``,
   ``--duration`` s each): req/s and p99;
4. **finalize**: FROZEN, then FINALIZED with one prize range covering every
   cohort rank (an award per player): the time until the FINALIZED answer
   (the awards are logged by then), while a probe writes a batch of 10
   events to another board every 20 ms: the longest probe write during it
   (target: ingest not paused more than 100 ms; finalize <= 10 s at 1M);
5. **webhook delivery**: awards/s until the receiver has every award, and
   that every award arrived exactly once by ``Idempotency-Key`` (target:
   >= 2,000 awards/s).

Prints the machine, parameters and load average; ``--json`` writes the results.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import tempfile
import threading
import time
from pathlib import Path

import httpx

from .http_bench import flowrank_server, run_wrk
from .http_load import ADMIN_KEY, READ_KEY, WRITE_KEY
from .machine import run_and_report
from .webhook_receiver import Receiver

BOARD = "bench:league:S1:global"
PROBE = "bench:probe:S1:global"
T0 = 1_793_527_500_000
TARGETS = {"finalize_s": 10.0, "ingest_pause_ms": 100.0, "delivery_per_s": 2000.0}


def _h(key: str) -> dict:
    return {"Authorization": f"Bearer {key}"}


async def _enter_by_events(url: str, start: int, stop: int, batch: int = 1000, senders: int = 8) -> float:
    """Players p<start>..p<stop-1> enter with one score event each; seconds taken."""
    todo = list(range(start, stop, batch))
    t = time.perf_counter()

    async def sender(client: httpx.AsyncClient):
        while todo:
            s = todo.pop()
            events = [{"event_id": f"e{i}", "board_id": BOARD, "player_id": f"p{i}",
                       "value": (i * 7919) % 1_000_003, "achieved_at": T0 + i % 1000} for i in range(s, min(s + batch, stop))]
            r = await client.post(f"{url}/v1/events", json={"events": events}, headers=_h(WRITE_KEY))
            r.raise_for_status()

    async with httpx.AsyncClient(timeout=120) as client:
        await asyncio.gather(*(sender(client) for _ in range(senders)))
    return time.perf_counter() - t


def _probe_writes(url: str, stop: threading.Event, out: list) -> None:
    """A batch of 10 events to another board every 20 ms; each write's seconds, with when it started."""
    n = 0
    with httpx.Client(timeout=60) as client:
        while not stop.is_set():
            events = [{"event_id": f"probe-{n}-{i}", "board_id": PROBE, "player_id": f"q{i}", "value": n,
                       "achieved_at": T0 + n} for i in range(10)]
            t = time.perf_counter()
            client.post(f"{url}/v1/events", json={"events": events}, headers=_h(WRITE_KEY)).raise_for_status()
            out.append((t, time.perf_counter() - t))
            n += 1
            time.sleep(0.02)


class ThreadedReceiver:
    """:class:`benchmarks.webhook_receiver.Receiver` on its own event loop in a thread."""

    def __init__(self, fail_ratio: float):
        self.receiver = Receiver(fail_ratio=fail_ratio)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.url = ""

    def start(self) -> None:
        self.thread.start()
        self.url = asyncio.run_coroutine_threadsafe(self.receiver.start(), self.loop).result(10)

    def count(self) -> int:
        return len(self.receiver.accepted)

    def wait_for(self, awards: int, timeout_s: float) -> dict:
        """Wait until ``awards`` award messages were accepted; what the receiver saw."""
        deadline = time.monotonic() + timeout_s
        r = self.receiver
        while time.monotonic() < deadline:
            got = sum(1 for body in list(r.accepted.values()) if body.startswith(b'{"type":"award"'))
            if got >= awards:
                break
            time.sleep(0.2)
        return {"awards": got, "distinct_keys": len(r.accepted), "attempts": r.attempts,
                "accepted_again": r.duplicates, "bodies_differing_under_one_key": r.mismatched}

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.receiver.stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


def run(args) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="fr-comp-"))
    result: dict = {"params": vars(args).copy()}
    friends = {f"p{i}": [f"p{(i // args.cohort) * args.cohort + k}" for k in range(args.cohort)
                         if (i // args.cohort) * args.cohort + k != i] for i in range(10_000)}
    (tmp / "friends.json").write_text(json.dumps(friends))
    receiver = ThreadedReceiver(fail_ratio=0.3)
    receiver.start()
    try:
        # snapshots by time only (every 300 s): a snapshot of 1M players right after the load would land in the
        # read measurements (a cost of its own: benchmarks http --background, issue 29)
        extra = ["--friends-file", str(tmp / "friends.json"), "--webhook-url", receiver.url,
                 "--snapshot-every-events", "1000000000"]
        with flowrank_server(args.shard_actors, extra=extra) as srv:
            url = srv.url
            with httpx.Client(timeout=600) as c:
                c.post(f"{url}/v1/boards", headers=_h(ADMIN_KEY), json={
                    "board_id": BOARD, "policy": "best_score", "shards": args.partitions,
                    "league": {"cohort_size": args.cohort, "tiers": args.tiers, "promote": 10, "demote": 10},
                    "prizes": [{"ranks": [1, args.cohort], "reward": {"coins": 100}}]}).raise_for_status()
                c.post(f"{url}/v1/boards", headers=_h(ADMIN_KEY), json={
                    "board_id": PROBE, "policy": "best_score", "shards": 1}).raise_for_status()
            prefix = f"/v1/boards/{BOARD}"
            joins = run_wrk(args.wrk, url, "join.lua", {"PREFIX": prefix, "START": "0"}, args.joins_s, 32, WRITE_KEY)
            result["joins"] = joins
            secs = asyncio.run(_enter_by_events(url, 0, args.players))
            result["entry_by_events"] = {"players": args.players, "seconds": secs, "per_s": args.players / secs}
            for route in ("cohort", "friends"):
                result[route] = run_wrk(args.wrk, url, "reads.lua", {"PREFIX": prefix, "SIZE": "10000",
                                                                      "ROUTE": route}, args.duration, 32, READ_KEY)
            with httpx.Client(timeout=600) as c:
                c.post(f"{url}{prefix}/state", headers=_h(ADMIN_KEY), json={"state": "FROZEN"}).raise_for_status()
                stop, probes = threading.Event(), []
                prober = threading.Thread(target=_probe_writes, args=(url, stop, probes), daemon=True)
                prober.start()
                time.sleep(1.0)
                delivered_before = receiver.count()
                t = time.perf_counter()
                r = c.post(f"{url}{prefix}/state", headers=_h(ADMIN_KEY), json={"state": "FINALIZED"})
                r.raise_for_status()
                fin = time.perf_counter() - t
                time.sleep(1.0)
                stop.set()
                prober.join()
                during = [d for s, d in probes if t - 0.05 <= s <= t + fin]
                awards = c.get(f"{url}{prefix}/awards?limit=1", headers=_h(ADMIN_KEY)).json()
                result["finalize"] = {"seconds": fin, "probe_writes": len(during),
                                      "max_probe_write_ms": 1000 * max(during, default=0.0),
                                      "max_probe_write_ms_outside": 1000 * max(
                                          (d for s, d in probes if not t - 0.05 <= s <= t + fin), default=0.0),
                                      "first_award": awards["awards"][:1]}
            # every player who entered by an event has a row and a cohort rank within the prize range: one award
            # each (the players who only joined have no row, so no rank and no award)
            answered = t + fin  # the FINALIZED answer (perf_counter seconds)
            got = receiver.wait_for(args.players, timeout_s=args.delivery_timeout_s)
            done = time.perf_counter()
            result["delivery"] = {**got, "seconds_after_finalized_answer": done - answered,
                                  "seconds_from_finalize_request": done - t,
                                  "per_s": got["awards"] / (done - t), "before_finalize": delivered_before}
    finally:
        receiver.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks competitions", description=__doc__.split("\n\n")[0])
    p.add_argument("--players", type=int, default=1_000_000)
    p.add_argument("--cohort", type=int, default=50)
    p.add_argument("--tiers", type=int, default=10)
    p.add_argument("--shard-actors", type=int, default=2)
    p.add_argument("--partitions", type=int, default=2)
    p.add_argument("--duration", type=int, default=10)
    p.add_argument("--joins-s", type=int, default=5)
    p.add_argument("--delivery-timeout-s", type=float, default=1800)
    p.add_argument("--wrk", default=shutil.which("wrk") or "wrk")
    p.add_argument("--json", default=None)
    return run_and_report(p.parse_args(argv), run, TARGETS)

"""Soak run (issue 14): ``python -m benchmarks soak --minutes 30``.

Starts ``flowrank serve`` (Ray engine by default) on a loopback port and keeps
a steady mixed load on one board for ``--minutes``:

* ingest at ``--fraction`` (default half) of the capacity measured first, in a
  ``--calibrate-s`` full-speed phase, over a fixed population of
  ``--players`` players (so memory should stop growing once all are seen);
* readers asking top-100, a player's exact rank and the players around;
* live subscribers (``/live`` Server-Sent Events) consuming deltas.

Every ``--sample-s`` seconds it samples: RSS of every process of the
server's session (RssAnon and RssFile apart, from /proc), events acknowledged
per second, read p50/p99 in that window, ingest-to-rank lag (a probe event
acknowledged, then polled until a read shows it) and the log's fsync p99 from
``/metrics``. After the warm-up (``--warmup-fraction`` of the run) it reports
RSS drift (the last samples against the first after warm-up: 3 samples, and
windows of a tenth of the steady phase) and the least-squares
slope per minute of read p99 and ingest lag. Writes ``soak.json`` and
``soak.png`` into ``--out``.

``--webhooks``: the server also gets ``--webhook-url`` of a receiver in this
process (:mod:`benchmarks.webhook_receiver`, ``--webhook-fail-ratio`` of first
attempts answered 503), and every ``--prize-board-s`` seconds a prize board of
``--awards`` players is created, scored, FROZEN and FINALIZED (its awards and
state changes are webhooks). Each sample adds the outbox's bytes on disk
(``flowrank_webhook_outbox_bytes``), the messages pending and delivered; the
report gives the largest outbox, the largest backlog, and the outbox's bytes
per pending message at the end (docs/storage.md "The webhook outbox": bounded
by the undelivered backlog, not by what was ever sent).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import sys
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from . import nearest_rank
from .machine import describe, header
from .processes import Interrupted, signals_cancel

BOARD = "soak:solo:S1:global"
BASE_MS = 1_790_000_000_000


# ---------------------------------------------------------------- analysis (pure)


p = nearest_rank  # read p50/p99 per window, medians of samples


def slope_per_minute(ts: list[float], ys: list[float | None]) -> float | None:
    """Least-squares slope of ys over ts (seconds), per minute; Nones skipped."""
    pts = [(t, y) for t, y in zip(ts, ys) if y is not None]
    if len(pts) < 3:
        return None
    mt = statistics.fmean(t for t, _ in pts)
    my = statistics.fmean(y for _, y in pts)
    den = sum((t - mt) ** 2 for t, _ in pts)
    if den == 0:
        return None
    return 60.0 * sum((t - mt) * (y - my) for t, y in pts) / den


def drift(values: list[float], k: int = 3) -> float | None:
    """Relative change from the median of the first k values to the median of the last k."""
    if len(values) < 2 * k:
        return None
    first, last = statistics.median(values[:k]), statistics.median(values[-k:])
    return (last - first) / first if first else None


def bucket_quantile(before: dict[float, float], after: dict[float, float], q: float) -> float | None:
    """Quantile of the observations between two scrapes of a Prometheus
    histogram (cumulative ``le`` buckets), as histogram_quantile does:
    linear within the bucket; None when nothing was observed."""
    les = sorted(after)
    counts = [after[le] - before.get(le, 0.0) for le in les]
    total = counts[-1] if counts else 0.0
    if total <= 0:
        return None
    rank = q * total
    prev_le, prev_c = 0.0, 0.0
    for le, c in zip(les, counts):
        if c >= rank:
            if le == float("inf"):
                return prev_le
            return prev_le + (le - prev_le) * ((rank - prev_c) / (c - prev_c) if c > prev_c else 0.0)
        prev_le, prev_c = le, c
    return prev_le


def fsync_reading(metrics_text: str) -> dict:
    """The log fsync series as exported: a histogram's buckets, or the
    windowed quantile gauges of older versions."""
    from prometheus_client.parser import text_string_to_metric_families

    buckets: dict[float, float] = {}
    quantiles: dict[str, float] = {}
    for fam in text_string_to_metric_families(metrics_text):
        if not fam.name.startswith("flowrank_log_fsync_seconds"):
            continue
        for s in fam.samples:
            if s.name.endswith("_bucket"):
                le = float(s.labels["le"])
                buckets[le] = buckets.get(le, 0.0) + s.value
            elif "quantile" in s.labels:
                quantiles[s.labels["quantile"]] = s.value
    return {"buckets": buckets, "quantiles": quantiles}


def fsync_p99(before: dict | None, after: dict) -> float | None:
    if after["buckets"]:
        return bucket_quantile(before["buckets"] if before else {}, after["buckets"], 0.99)
    for key in ("0.99", "0.990"):
        if key in after["quantiles"]:
            return after["quantiles"][key]
    return None


def webhook_reading(metrics_text: str) -> dict:
    """``outbox_bytes``, ``webhook_pending``, ``webhook_delivered`` from a /metrics page (None when absent)."""
    names = {"flowrank_webhook_outbox_bytes": "outbox_bytes", "flowrank_webhook_pending": "webhook_pending",
             "flowrank_webhook_delivered_total": "webhook_delivered"}
    out: dict = dict.fromkeys(names.values())
    for line in metrics_text.splitlines():
        name, _, value = line.partition(" ")
        if name in names:
            out[names[name]] = float(value)
    return out


def webhook_analysis(samples: list[dict]) -> dict | None:
    """The outbox over the run: largest bytes and backlog, the end's bytes per pending message, the slope."""
    got = [s for s in samples if s.get("outbox_bytes") is not None]
    if not got:
        return None
    last = got[-1]
    return {"outbox_bytes_max": max(s["outbox_bytes"] for s in got), "outbox_bytes_last": last["outbox_bytes"],
            "pending_max": max(s["webhook_pending"] or 0 for s in got), "pending_last": last["webhook_pending"],
            "delivered_last": last["webhook_delivered"],
            "outbox_bytes_slope_per_min": slope_per_minute([s["t"] for s in got], [s["outbox_bytes"] for s in got])}


def analyse(samples: list[dict], warmup_s: float) -> dict:
    steady = [s for s in samples if s["t"] >= warmup_s]
    ts = [s["t"] for s in steady]
    return {
        "samples_after_warmup": len(steady),
        "rss_drift": drift([s["rss_total"] for s in steady]),
        "rss_anon_drift": drift([s["rss_anon_total"] for s in steady]),
        # the same over windows of a tenth of the steady phase each (three
        # minutes of a 30-minute run): a bounded cache or buffer that fills and
        # empties over a minute moves the 3-sample drift by its size, not this
        "rss_drift_windows": drift([s["rss_total"] for s in steady], max(3, len(steady) // 10)),
        "rss_anon_drift_windows": drift([s["rss_anon_total"] for s in steady], max(3, len(steady) // 10)),
        "read_p99_slope_ms_per_min": slope_per_minute(ts, [s["read_p99_ms"] for s in steady]),
        "lag_slope_ms_per_min": slope_per_minute(ts, [s["lag_ms"] for s in steady]),
        "fsync_p99_slope_ms_per_min": slope_per_minute(ts, [s["fsync_p99_ms"] for s in steady]),
        "read_p99_ms_median": p([s["read_p99_ms"] for s in steady if s["read_p99_ms"] is not None], 0.5),
        "lag_ms_median": p([s["lag_ms"] for s in steady if s["lag_ms"] is not None], 0.5),
        "events_per_s_median": p([s["events_per_s"] for s in steady], 0.5),
    }


# ---------------------------------------------------------------- process sampling


def _status_kb(pid: int) -> dict[str, int]:
    out = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(("RssAnon:", "RssFile:", "RssShmem:", "VmRSS:")):
                    k, v = line.split(":", 1)
                    out[k] = int(v.split()[0])
    except OSError:
        pass
    return out


def session_memory(server) -> list[dict]:
    rows = []
    for proc in server.session_procs():
        try:
            name = " ".join(proc.cmdline()).replace(sys.prefix, "<venv>")[:80]  # no machine paths in outputs
        except Exception:  # noqa: BLE001 - a process that just exited
            continue
        st = _status_kb(proc.pid)
        if st:
            rows.append({"pid": proc.pid, "cmd": name, "rss": st.get("VmRSS", 0) * 1024,
                         "rss_anon": st.get("RssAnon", 0) * 1024, "rss_file": st.get("RssFile", 0) * 1024})
    return rows


# ---------------------------------------------------------------- load


@dataclass
class Window:
    acked: int = 0
    read_ms: list = field(default_factory=list)
    read_errors: int = 0
    write_errors: int = 0
    live_messages: int = 0
    prize_boards: int = 0


class Load:
    def __init__(self, url: str, keys: dict, players: int, seed: int):
        self.url, self.keys, self.players = url, keys, players
        self.rng = random.Random(seed)
        self.win = Window()
        self.n = 0
        self.stop = asyncio.Event()

    def h(self, role: str) -> dict:
        return {"Authorization": f"Bearer {self.keys[role]}"}

    def batch(self, size: int, writer: int) -> list[dict]:
        out = []
        for _ in range(size):
            self.n += 1
            out.append({"event_id": f"w{writer}-{self.n}", "board_id": BOARD,
                        "player_id": f"p{self.rng.randrange(self.players):07d}",
                        "value": self.rng.randrange(1_000_000_000),
                        "achieved_at": BASE_MS + self.rng.randrange(10**9)})
        return out

    async def writer(self, idx: int, size: int, rate: float | None) -> None:
        """Batches of ``size``; paced to ``rate`` events/s when given."""
        async with httpx.AsyncClient(base_url=self.url, timeout=30.0, headers=self.h("game_server")) as c:
            t0, sent = time.monotonic(), 0
            while not self.stop.is_set():
                if rate:
                    wait = t0 + sent / rate - time.monotonic()
                    if wait > 0:
                        await asyncio.sleep(wait)
                    elif wait < -1.0:  # fell behind (a slow answer): drop the debt, never burst to catch up
                        t0 -= wait
                body = {"events": self.batch(size, idx)}
                sent += size
                try:
                    r = await c.post("/v1/events", json=body)
                    if r.status_code == 200:
                        self.win.acked += size
                    else:
                        self.win.write_errors += 1
                except httpx.HTTPError:
                    self.win.write_errors += 1

    async def prize_boards(self, every_s: float, awards: int) -> None:
        """A prize board of ``awards`` players every ``every_s``: created, scored, FROZEN, FINALIZED."""
        async with httpx.AsyncClient(base_url=self.url, timeout=30.0, headers=self.h("admin")) as c:
            n = 0
            while not self.stop.is_set():
                t0 = time.monotonic()
                n += 1
                board = f"soak:hooks:P{n}:global"
                try:
                    r = await c.post("/v1/boards", json={"board_id": board, "policy": "best_score", "shards": 2,
                                                         "prizes": [{"ranks": [1, awards], "reward": {"gems": 5}}]})
                    if r.status_code == 201:
                        events = [{"event_id": f"h{n}-{i}", "board_id": board, "player_id": f"p{i}", "value": i,
                                   "achieved_at": "2026-11-01T00:00:00Z"} for i in range(awards)]
                        for k in range(0, awards, 500):
                            await c.post("/v1/events", json={"events": events[k:k + 500]})
                        for state in ("FROZEN", "FINALIZED"):
                            await c.post(f"/v1/boards/{board}/state", json={"state": state})
                        self.win.prize_boards += 1
                except httpx.HTTPError:
                    self.win.write_errors += 1
                await asyncio.sleep(max(0.0, every_s - (time.monotonic() - t0)))

    async def reader(self, rate: float) -> None:
        async with httpx.AsyncClient(base_url=self.url, timeout=30.0, headers=self.h("moderator")) as c:
            while not self.stop.is_set():
                pid = f"p{self.rng.randrange(self.players):07d}"
                path = self.rng.choice([f"/v1/boards/{BOARD}/top?limit=100", f"/v1/boards/{BOARD}/players/{pid}",
                                        f"/v1/boards/{BOARD}/players/{pid}/around?radius=5"])
                t = time.monotonic()
                try:
                    r = await c.get(path)
                    if r.status_code in (200, 404):
                        self.win.read_ms.append((time.monotonic() - t) * 1000)
                    else:
                        self.win.read_errors += 1
                except httpx.HTTPError:
                    self.win.read_errors += 1
                await asyncio.sleep(max(0.0, 1.0 / rate - (time.monotonic() - t)))

    async def subscriber(self) -> None:
        async with httpx.AsyncClient(base_url=self.url, timeout=None, headers=self.h("moderator")) as c:
            while not self.stop.is_set():
                try:
                    async with c.stream("GET", f"/v1/boards/{BOARD}/live?top=100") as r:
                        async for line in r.aiter_lines():
                            if line.startswith("event:"):
                                self.win.live_messages += 1
                            if self.stop.is_set():
                                return
                except httpx.HTTPError:
                    await asyncio.sleep(0.5)

    async def lag_probe(self, k: int) -> float | None:
        """Milliseconds from a probe event's acknowledgement until a read shows it."""
        pid = f"probe-{k % 16}"
        value = 2_000_000_000 + k
        ev = {"event_id": f"probe-{k}", "board_id": BOARD, "player_id": pid, "value": value, "achieved_at": BASE_MS}
        async with httpx.AsyncClient(base_url=self.url, timeout=30.0) as c:
            try:
                r = await c.post("/v1/events", json={"events": [ev]}, headers=self.h("game_server"))
                if r.status_code != 200:
                    return None
                t = time.monotonic()
                while time.monotonic() - t < 30:
                    g = await c.get(f"/v1/boards/{BOARD}/players/{pid}", headers=self.h("moderator"))
                    if g.status_code == 200 and g.json().get("value") == value:
                        return (time.monotonic() - t) * 1000
                    await asyncio.sleep(0.002)
            except httpx.HTTPError:
                return None
        return None

    def take(self) -> Window:
        w, self.win = self.win, Window()
        return w


# ---------------------------------------------------------------- the run


async def soak(workdir: Path, *, minutes: float, engine: str, players: int, batch: int, writers: int,
               readers: int, read_rate: float, subscribers: int, sample_s: float, calibrate_s: float,
               fraction: float, warmup_fraction: float, seed: int, server_args: tuple[str, ...] = (),
               webhooks: bool = False, prize_board_s: float = 10.0, awards: int = 2000,
               webhook_fail_ratio: float = 0.1, log=print) -> dict:
    from tests.chaos.harness import Server  # noqa: PLC0415 - the owned server of the chaos runs

    receiver = None
    if webhooks:
        from .webhook_receiver import Receiver  # noqa: PLC0415

        receiver = Receiver(fail_ratio=webhook_fail_ratio)
        server_args = (*server_args, "--webhook-url", await receiver.start())
    server = Server(workdir, engine=engine, shards=2, extra_args=server_args)
    tasks: list[asyncio.Task] = []  # every load task of the run: cancelled on every exit path
    with signals_cancel() as received:
        try:
            return await _soak(server, tasks, minutes=minutes, players=players, batch=batch,
                               writers=writers, readers=readers, read_rate=read_rate, subscribers=subscribers,
                               sample_s=sample_s, calibrate_s=calibrate_s, fraction=fraction,
                               warmup_fraction=warmup_fraction, seed=seed, log=log,
                               hooks=None if receiver is None else (prize_board_s, awards))
        except asyncio.CancelledError:
            if received:  # Ctrl-C or SIGTERM: the finally below stops the server and the load
                raise Interrupted(received[0]) from None
            raise
        finally:
            server.cleanup()  # first, and synchronous: a second signal cannot cut it short
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            if receiver is not None:
                await receiver.stop()


async def _soak(server, tasks: list, *, minutes: float, players: int, batch: int, writers: int,
                readers: int, read_rate: float, subscribers: int, sample_s: float, calibrate_s: float,
                fraction: float, warmup_fraction: float, seed: int, log,
                hooks: tuple[float, int] | None = None) -> dict:
    from tests.chaos.harness import KEYS  # noqa: PLC0415 - the owned server of the chaos runs

    failure = None
    samples: list[dict] = []
    log(f"soak: starting {server.engine} server on {server.url}")
    server.start()
    async with httpx.AsyncClient(base_url=server.url, timeout=30.0) as c:
        r = await c.post("/v1/boards", json={"board_id": BOARD, "policy": "best_score", "shards": 2},
                         headers={"Authorization": f"Bearer {KEYS['admin']}"})
        assert r.status_code == 201, r.text
    load = Load(server.url, KEYS, players, seed)

    # capacity: full speed for calibrate_s (longer while nothing is acknowledged yet: a
    # server still warming up must not make the steady phase unpaced)
    tasks += [asyncio.create_task(load.writer(i, batch, None)) for i in range(writers)]
    t0 = time.monotonic()
    await asyncio.sleep(calibrate_s)
    while load.win.acked == 0 and time.monotonic() - t0 < calibrate_s + 120:
        await asyncio.sleep(1.0)
    load.stop.set()
    await asyncio.gather(*tasks)
    tasks.clear()
    capacity = load.take().acked / (time.monotonic() - t0)
    if capacity <= 0:
        raise RuntimeError("no event was acknowledged while measuring capacity")
    target = capacity * fraction
    log(f"soak: capacity {capacity:,.0f} events/s (batches of {batch}, {writers} writers); "
        f"steady ingest at {target:,.0f}/s")

    load.stop = asyncio.Event()
    tasks += [asyncio.create_task(load.writer(i, batch, target / writers)) for i in range(writers)]
    tasks += [asyncio.create_task(load.reader(read_rate)) for _ in range(readers)]
    tasks += [asyncio.create_task(load.subscriber()) for _ in range(subscribers)]
    if hooks is not None:
        tasks.append(asyncio.create_task(load.prize_boards(*hooks)))
    start = last = time.monotonic()
    prev_fsync = None
    k = 0
    # /metrics every sample_s (5 s) on one connection: uvicorn closes a keep-alive connection idle
    # for 5 s, and a request sent as it does got RemoteProtocolError (a sample without fsync p99,
    # 6-12 per 30-minute run); connections idle 2 s are not reused.
    async with httpx.AsyncClient(base_url=server.url, timeout=30.0,
                                 limits=httpx.Limits(keepalive_expiry=2.0)) as c:
        while time.monotonic() - start < minutes * 60:
            await asyncio.sleep(max(0.0, sample_s - (time.monotonic() - last) - 0.05))
            k += 1
            lag = await load.lag_probe(k)
            now = time.monotonic()
            w = load.take()
            mem = session_memory(server)
            if server.proc is None or server.proc.poll() is not None:
                code = None if server.proc is None else server.proc.returncode
                failure = f"the server exited (code {code}) at t={now - start:.0f}s; see {server.workdir}"
                log("soak: " + failure)
                break
            try:
                m = await c.get("/metrics", headers={"Authorization": f"Bearer {KEYS['admin']}"})
                fs = fsync_reading(m.text) if m.status_code == 200 else {"buckets": {}, "quantiles": {}}
                hook_reading = webhook_reading(m.text) if m.status_code == 200 and hooks else {}
            except httpx.HTTPError as e:
                log(f"soak: /metrics failed ({type(e).__name__}); sample without fsync")
                fs = {"buckets": {}, "quantiles": {}}
                hook_reading = {}
            f99 = fsync_p99(prev_fsync, fs)
            prev_fsync = fs
            s = {"t": round(now - start, 2), "events_per_s": w.acked / (now - last),
                 "read_p50_ms": p(w.read_ms, 0.5), "read_p99_ms": p(w.read_ms, 0.99), "reads": len(w.read_ms),
                 "read_errors": w.read_errors, "write_errors": w.write_errors, "live_messages": w.live_messages,
                 "lag_ms": lag, "fsync_p99_ms": None if f99 is None else f99 * 1000,
                 "rss_total": sum(x["rss"] for x in mem), "rss_anon_total": sum(x["rss_anon"] for x in mem),
                 "rss_file_total": sum(x["rss_file"] for x in mem), "processes": mem,
                 **({"prize_boards": w.prize_boards, **hook_reading} if hooks else {})}
            samples.append(s)
            last = now
            log(f"soak: t={s['t']:7.1f}s ingest {s['events_per_s']:8,.0f}/s read p99 "
                f"{(s['read_p99_ms'] or 0):6.1f} ms lag {(lag or -1):6.1f} ms fsync p99 "
                f"{(s['fsync_p99_ms'] or -1):6.2f} ms RSS {s['rss_total'] / 2**20:7.1f} MiB "
                f"(anon {s['rss_anon_total'] / 2**20:7.1f}) live msgs {w.live_messages}"
                + (f" outbox {(s.get('outbox_bytes') or 0) / 2**10:8.1f} KiB pending {s.get('webhook_pending')} "
                   f"delivered {s.get('webhook_delivered')}" if hooks else ""))
    load.stop.set()
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    tasks.clear()
    server.stop()
    warmup = minutes * 60 * warmup_fraction
    analysis = analyse(samples, warmup)
    if hooks is not None:
        analysis["webhooks"] = webhook_analysis(samples)
    return {"capacity_events_per_s": capacity, "target_events_per_s": target, "warmup_s": warmup,
            "failure": failure, "analysis": analysis, "samples": samples}


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ss = result["samples"]
    t = [s["t"] / 60 for s in ss]
    fig, axes = plt.subplots(4, 1, figsize=(9, 10), sharex=True)
    axes[0].plot(t, [s["rss_total"] / 2**20 for s in ss], label="RSS, all server processes")
    axes[0].plot(t, [s["rss_anon_total"] / 2**20 for s in ss], label="RssAnon")
    axes[0].plot(t, [s["rss_file_total"] / 2**20 for s in ss], label="RssFile")
    axes[0].set_ylabel("MiB")
    axes[0].legend(fontsize=8)
    axes[1].plot(t, [s["read_p99_ms"] for s in ss], label="read p99")
    axes[1].plot(t, [s["read_p50_ms"] for s in ss], label="read p50")
    axes[1].set_ylabel("ms")
    axes[1].legend(fontsize=8)
    axes[2].plot(t, [s["lag_ms"] for s in ss], label="ingest-to-rank lag (probe)")
    axes[2].plot(t, [s["fsync_p99_ms"] for s in ss], label="fsync p99")
    axes[2].set_ylabel("ms")
    axes[2].legend(fontsize=8)
    axes[3].plot(t, [s["events_per_s"] for s in ss])
    axes[3].set_ylabel("events/s acked")
    axes[3].set_xlabel("minutes")
    for ax in axes:
        ax.axvline(result["warmup_s"] / 60, color="grey", lw=0.8, ls="--")
    fig.suptitle(f"soak, {result['params']['engine']} engine, {result['params']['minutes']} min")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks soak", description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--engine", choices=("ray", "local"), default="ray")
    ap.add_argument("--players", type=int, default=100_000)
    ap.add_argument("--batch", type=int, default=200)
    ap.add_argument("--writers", type=int, default=4)
    ap.add_argument("--readers", type=int, default=4)
    ap.add_argument("--read-rate", type=float, default=25.0, help="requests/s per reader")
    ap.add_argument("--subscribers", type=int, default=8)
    ap.add_argument("--sample-s", type=float, default=5.0)
    ap.add_argument("--calibrate-s", type=float, default=20.0)
    ap.add_argument("--fraction", type=float, default=0.5, help="steady ingest as a fraction of capacity")
    ap.add_argument("--warmup-fraction", type=float, default=0.2)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--dedup-retention", type=int, default=None,
                    help="the server's --dedup-retention (default: the server's own); a window that fills "
                         "within the warm-up lets RSS drift show what is not bounded")
    ap.add_argument("--webhooks", action="store_true",
                    help="also deliver webhooks to a receiver here: prize boards finalized, outbox bytes sampled")
    ap.add_argument("--prize-board-s", type=float, default=10.0, help="with --webhooks: a prize board this often")
    ap.add_argument("--awards", type=int, default=2000, help="with --webhooks: awards per prize board")
    ap.add_argument("--webhook-fail-ratio", type=float, default=0.1,
                    help="with --webhooks: first attempts the receiver answers 503")
    ap.add_argument("--out", default=None, help="output directory (default results/soak-<UTC time>)")
    a = ap.parse_args(argv)
    params = {k: v for k, v in vars(a).items() if k != "out"}
    machine = describe()
    print(header(params, machine), flush=True)
    load_before = os.getloadavg()
    print(f"  load    : {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f} (1/5/15 min) before", flush=True)
    work = Path(tempfile.mkdtemp(prefix="fr-soak-"))
    res = None
    try:
        res = asyncio.run(soak(work, minutes=a.minutes, engine=a.engine, players=a.players, batch=a.batch,
                               writers=a.writers, readers=a.readers, read_rate=a.read_rate,
                               subscribers=a.subscribers, sample_s=a.sample_s, calibrate_s=a.calibrate_s,
                               fraction=a.fraction, warmup_fraction=a.warmup_fraction, seed=a.seed,
                               server_args=() if a.dedup_retention is None
                               else ("--dedup-retention", str(a.dedup_retention)),
                               webhooks=a.webhooks, prize_board_s=a.prize_board_s, awards=a.awards,
                               webhook_fail_ratio=a.webhook_fail_ratio))
    except Interrupted as e:  # Ctrl-C or SIGTERM: soak() has stopped the server and the load
        print(f"soak: stopped by {e}; the server and every process it started are stopped", flush=True)
        return 128 + e.signum
    finally:
        if res is not None and res["failure"] is None:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"work directory kept for its server logs: {work}")
    load_after = os.getloadavg()
    result = {"machine": machine, "params": params, "load_before": load_before, "load_after": load_after, **res}
    out = Path(a.out or f"results/soak-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}")
    out.mkdir(parents=True, exist_ok=True)
    (out / "soak.json").write_text(json.dumps(result, indent=1) + "\n")
    plot(result, out / "soak.png")
    an = res["analysis"]
    print(json.dumps(an, indent=1))
    print(f"load {load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f} after; wrote {out}/soak.json, soak.png")
    if res["failure"]:
        print("FAILED: " + res["failure"])
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""``flowrank serve`` as a real process: SIGKILL mid-ingest loses no
acknowledged event; SIGTERM drains and exits 0 with the data intact.

The server runs in its own session (``start_new_session=True``) so a kill
takes its whole process group (the gateway, and with ``--engine ray`` the
embedded Ray's processes). Any of *this* server's Ray processes that left the
group are found by a per-run marker in their environment and killed by pid;
``ray stop`` is never used. Oracle: acknowledged events must all be present
(redelivery answers ``DUPLICATE_IGNORED``, each player's history holds them);
unacknowledged ones may or may not be. The board must equal the fold of
exactly what survived (per-player history), version included.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import httpx
import pytest
from benchmarks.processes import Owned, kill_marked, processes_with_marker
from tests.loopback import free_port

BOARD = "e2e:solo:S1:global"
KEYS = {"admin": "e2e-admin", "game_server": "e2e-gs", "moderator": "e2e-mod"}
PLAYERS = 40
BATCH = 100
BASE_MS = 1_793_527_200_000


def H(role: str) -> dict:
    return {"Authorization": f"Bearer {KEYS[role]}"}


def make_events(start: int, count: int, prefix: str = "e") -> list[dict]:
    return [{"event_id": f"{prefix}{i}", "board_id": BOARD, "player_id": f"p{i % PLAYERS}",
             "value": (i * 7919) % 10007, "achieved_at": BASE_MS + i} for i in range(start, start + count)]


class Served:
    """One data dir, served by successive ``flowrank serve`` processes."""

    def __init__(self, tmp: Path, engine: str, workers: int = 1, extra: tuple[str, ...] = (), keys: bool = True):
        self.engine = engine
        self.workers = workers
        self.extra = extra  # more serve options (tests/e2e/test_serve_pg.py: --log, --lease-s)
        self.use_keys = keys  # False: no --keys, the server generates (or, with --log, shares) keys.json
        tmp.mkdir(parents=True, exist_ok=True)
        self.data = tmp / "data"
        self.keys = tmp / "keys.json"
        self.keys.write_text(json.dumps({"keys": [{"name": r, "role": r, "key": k} for r, k in KEYS.items()]}))
        self.log_path = tmp / "serve.log"
        self.marker = uuid.uuid4().hex
        self.ray_tmp = tempfile.mkdtemp(prefix="fr-e2e-", dir="/tmp")  # short: unix socket paths are limited
        self.proc: subprocess.Popen | None = None
        self.owned: Owned | None = None  # benchmarks.processes: own session, marker, SIGTERM unwinds
        self.url = ""

    def start(self, timeout: float = 90.0, ready: str = "/readyz") -> None:
        """Start a server and wait until ``ready`` answers 200 (a standby: ``/readyz/reads``)."""
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_ADDRESS")}
        env.update(RAY_AUTH_MODE="disabled", RAY_TMPDIR=self.ray_tmp, RAY_USAGE_STATS_ENABLED="0",
                   PYTHONUNBUFFERED="1")
        keys = ("--keys", str(self.keys)) if self.use_keys else ()
        cmd = [sys.executable, "-m", "gateway", "serve", "--data-dir", str(self.data), "--host", "127.0.0.1",
               "--port", str(port), *keys, "--engine", self.engine, "--shards", "2",
               "--shard-actors", "2", "--write-rate", "100000", "--graceful-timeout", "10",
               "--workers", str(self.workers), *self.extra]
        log = open(self.log_path, "a")
        log.write(f"\n--- start {' '.join(cmd)}\n")
        log.flush()
        if self.owned is not None:
            self.owned.stop()  # the previous incarnation: reaped, strays swept
        self.owned = Owned(cmd, env=env, marker=self.marker, stdout=log, stderr=subprocess.STDOUT,
                           cwd=str(self.data.parent))
        try:
            self.proc = self.owned.start()
        finally:
            log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"server exited with {self.proc.returncode}:\n{self.tail()}")
            try:
                if httpx.get(f"{self.url}{ready}", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        raise AssertionError(f"server not ready after {timeout} s:\n{self.tail()}")

    def tail(self, n: int = 40) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])

    def kill(self) -> None:
        """SIGKILL the server's whole process group, then its strays."""
        proc = self.proc
        self.owned.kill()
        proc.wait(timeout=30)

    def terminate(self, timeout: float = 60.0) -> int:
        """SIGTERM the server process only (as a supervisor would) and wait for its exit code."""
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout)
        finally:
            self.kill_strays()

    def strays(self) -> list[int]:
        """Live processes started for this server (they carry our marker)."""
        return processes_with_marker(self.marker)

    def kill_strays(self) -> None:
        kill_marked(self.marker)

    def cleanup(self) -> None:
        if self.owned is not None:
            self.owned.kill()
        self.kill_strays()
        shutil.rmtree(self.ray_tmp, ignore_errors=True)


class Ingest:
    """Concurrent posters of numbered batches; records what was sent and what was acknowledged."""

    def __init__(self, url: str, start: int, batches: int, posters: int = 4):
        self.url, self.start, self.batches, self.posters = url, start, batches, posters
        self.sent: dict[str, dict] = {}
        self.acked: dict[str, dict] = {}
        self.acked_batches = 0
        self._next = 0

    async def run(self, stop_after_errors: bool = True) -> None:
        async with httpx.AsyncClient(base_url=self.url, timeout=30) as c:
            await asyncio.gather(*(self._poster(c) for _ in range(self.posters)))

    async def _poster(self, c: httpx.AsyncClient) -> None:
        while self._next < self.batches:
            b = self._next
            self._next += 1
            events = make_events(self.start + b * BATCH, BATCH)
            for e in events:
                self.sent[e["event_id"]] = e
            try:
                r = await c.post("/v1/events", json={"events": events}, headers=H("game_server"))
            except httpx.TransportError:
                return  # the server is gone
            if r.status_code != 200:
                continue  # e.g. 503 while shutting down: not acknowledged
            results = r.json()["results"]
            assert [x["event_id"] for x in results] == [e["event_id"] for e in events]
            assert all(x["outcome"] != "DUPLICATE_IGNORED" for x in results), results
            for e in events:
                self.acked[e["event_id"]] = e
            self.acked_batches += 1


async def ingest_then(served: Served, ingest: Ingest, action, after_batches: int):
    """Run ``ingest``; once ``after_batches`` are acknowledged, run ``action`` (in a thread) mid-ingest."""
    task = asyncio.ensure_future(ingest.run())
    while ingest.acked_batches < after_batches and not task.done():
        await asyncio.sleep(0.005)
    assert not task.done(), "ingest finished before the action: raise the batch count"
    result = await asyncio.to_thread(action)
    await asyncio.wait_for(task, 60)
    return result


def check_intact(url: str, acked: dict[str, dict], sent: dict[str, dict]) -> None:
    """Every acked event is present, nothing unsent is, and the board is the fold of what survived."""
    with httpx.Client(base_url=url, timeout=60) as c:
        survived: dict[str, dict] = {}
        applied = 0
        for p in range(PLAYERS):
            pid = f"p{p}"
            r = c.get(f"/v1/boards/{BOARD}/players/{pid}/history", headers=H("moderator"))
            assert r.status_code == 200, r.text
            everything = r.json()["events"]
            # redeliveries are logged too (as DUPLICATE_IGNORED): only acknowledged ones were redelivered
            redelivered = [h["event_id"] for h in everything if h["outcome"] == "DUPLICATE_IGNORED"]
            assert set(redelivered) <= set(acked), f"{pid}: an unacknowledged event was applied twice"
            hist = [h for h in everything if h["outcome"] != "DUPLICATE_IGNORED"]
            hist_ids = [h["event_id"] for h in hist]
            assert len(hist_ids) == len(set(hist_ids)), f"{pid}: an event was applied twice"
            assert all(h["kind"] == "score" for h in hist)
            want = {x for x, e in acked.items() if e["player_id"] == pid}
            assert want <= set(hist_ids), f"{pid}: acked events missing from history: {sorted(want - set(hist_ids))[:5]}"
            assert set(hist_ids) <= set(sent), f"{pid}: history holds events never sent"
            applied += sum(h["outcome"].startswith("APPLIED") for h in hist)
            for x in hist_ids:
                e = sent[x]
                best = survived.get(pid)
                if best is None or (-e["value"], e["achieved_at"]) < (-best["value"], best["achieved_at"]):
                    survived[pid] = e
        expect = sorted(survived.values(), key=lambda e: (-e["value"], e["achieved_at"], e["player_id"]))
        top = c.get(f"/v1/boards/{BOARD}/top", params={"limit": 1000}, headers=H("admin")).json()
        assert [(e["player_id"], e["value"]) for e in top["entries"]] == [(e["player_id"], e["value"]) for e in expect]
        board = c.get(f"/v1/boards/{BOARD}", headers=H("admin")).json()
        assert board["version"] == applied == top["version"], (board, applied)
        assert board["size"] == len(expect)
        # redelivery is a no-op for every acknowledged event (dedup state survived too)
        ids = list(acked)
        for i in range(0, len(ids), 1000):
            chunk = [acked[x] for x in ids[i:i + 1000]]
            r = c.post("/v1/events", json={"events": chunk}, headers=H("game_server"))
            assert r.status_code == 200, r.text
            bad = [x for x in r.json()["results"] if x["outcome"] != "DUPLICATE_IGNORED"]
            assert not bad, f"{len(bad)} acknowledged events were not durable, e.g. {bad[:3]}"
        again = c.get(f"/v1/boards/{BOARD}", headers=H("admin")).json()
        assert again["version"] == board["version"]


def create_board(url: str) -> None:
    r = httpx.post(f"{url}/v1/boards", json={"board_id": BOARD, "policy": "best_score", "shards": 2},
                   headers=H("admin"), timeout=30)
    assert r.status_code == 201, r.text


def sigkill_round(s: Served, first: int, acked: dict, sent: dict) -> None:
    """Ingest, SIGKILL the process group with batches in flight, restart, check."""
    ingest = Ingest(s.url, start=first, batches=400)
    asyncio.run(ingest_then(s, ingest, s.kill, after_batches=12))
    assert ingest.acked_batches >= 12 and len(ingest.sent) > len(ingest.acked)  # killed with batches in flight
    acked.update(ingest.acked)
    sent.update(ingest.sent)
    s.start()
    try:
        check_intact(s.url, acked, sent)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n--- server log:\n{s.tail()}") from None


def sigterm_mid_ingest(s: Served, first: int, acked: dict, sent: dict) -> None:
    """Ingest, SIGTERM the server mid-ingest: exit 0, no traceback, no stray process."""
    ingest = Ingest(s.url, start=first, batches=400)
    rc = asyncio.run(ingest_then(s, ingest, s.terminate, after_batches=8))
    assert rc == 0, f"exit code {rc}\n{s.tail()}"
    assert "Traceback" not in s.log_path.read_text(errors="replace"), s.tail()
    assert s.strays() == []
    acked.update(ingest.acked)
    sent.update(ingest.sent)


def test_sigkill_mid_ingest_loses_no_acknowledged_event(served_factory):
    s = served_factory("local")
    s.start()
    create_board(s.url)
    sigkill_round(s, 0, {}, {})
    assert s.terminate() == 0, s.tail()


def test_sigterm_drains_and_exits_zero_with_data_intact(served_factory):
    s = served_factory("local")
    s.start()
    create_board(s.url)
    acked: dict = {}
    sent: dict = {}
    sigterm_mid_ingest(s, 0, acked, sent)
    s.start()
    check_intact(s.url, acked, sent)
    assert s.terminate() == 0, s.tail()


@pytest.mark.slow
@pytest.mark.parametrize("workers", [1, 2], ids=["1-worker", "2-workers"])
def test_on_ray_sigkill_then_sigterm_lose_no_acknowledged_event(served_factory, workers):
    """The default engine (embedded Ray, two shard actors), with one gateway
    and with ``--workers 2`` (a supervisor, the engine host actor and two
    gateway processes on one port; the posters' connections land on both):
    SIGKILL of the whole process group mid-ingest, restart and check, then
    SIGTERM mid-ingest exits 0 leaving no Ray process behind, and a restart
    finds every acknowledged event. (Three starts, ~12 s each on 2 cores,
    most of it ray.init and actor start.)"""
    s = served_factory("ray", workers=workers)
    s.start()
    create_board(s.url)
    acked: dict = {}
    sent: dict = {}
    sigkill_round(s, 0, acked, sent)
    sigterm_mid_ingest(s, 1_000_000, acked, sent)
    s.start()
    check_intact(s.url, acked, sent)
    assert s.terminate() == 0, s.tail()
    assert acked and set(acked) <= set(sent), "the rounds above checked acknowledged events; there were some"

"""Fault-injection checker: writers, a nemesis and a history checker around a
``flowrank serve`` subprocess on a loopback port.

Shared by ``tests/chaos/test_chaos.py`` (short CI runs) and
``benchmarks/chaos.py`` (long runs: ``python -m benchmarks chaos --kills N``).

* :class:`Server` starts ``python -m gateway serve`` in its own session
  (``start_new_session``), so the server, its embedded Ray (gcs, raylet) and
  every Ray worker share one session id. A kill SIGKILLs every process of
  that session, repeatedly until none is left: nothing else on the machine
  is touched (never ``ray stop``).
* Writers are asyncio tasks posting small batches. Each event's attempts are
  recorded (sent, then the outcome or the error). Failed batches are retried
  with the same event ids half of the time (at-least-once clients); a few
  requests redeliver an older event on purpose.
* The nemesis SIGKILLs the whole server at random moments and restarts it on
  the same data directory; with the Ray engine it also SIGKILLs single shard
  actor processes (``ray::ShardActor`` in that session).
* :func:`check` reads back every player's history (moderator route) and
  compares it with the recorded history: every acknowledged event admitted
  exactly once with its acknowledged outcome, no event admitted twice, no
  phantom, final top lists equal a brute-force oracle over the durable
  events, and checksums equal across two further kill-and-replay restarts.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psutil
from benchmarks.processes import Owned
from tests.loopback import free_port

REPO = Path(__file__).resolve().parents[2]
KEYS = {"admin": "chaos-admin-key", "game_server": "chaos-gs-key", "moderator": "chaos-mod-key"}
BOARDS = {"chaos:solo:S1:best": "best_score", "chaos:solo:S1:total": "cumulative"}
NOT_ADMITTED = {"DUPLICATE_IGNORED", "REJECTED_EVENT_ID_CONFLICT"}
BASE_MS = 1_790_000_000_000


def H(role: str) -> dict:
    return {"Authorization": f"Bearer {KEYS[role]}"}


# ---------------------------------------------------------------- the server


class Server:
    """One ``flowrank serve`` subprocess (restartable on the same data dir)."""

    def __init__(self, workdir: Path, engine: str = "local", shards: int = 2, port: int | None = None,
                 extra_args: tuple[str, ...] = ()):
        self.workdir = workdir
        self.data_dir = workdir / "data"
        self.engine = engine
        self.shards = shards
        self.extra_args = tuple(extra_args)  # more `flowrank serve` flags
        self.port = port or free_port()
        self.proc: subprocess.Popen | None = None
        self.owned: Owned | None = None  # benchmarks.processes: own session, marker, SIGTERM unwinds
        self.starts = 0
        self.failed_starts = 0
        self.ray_tmp = Path(tempfile.mkdtemp(prefix="frc-", dir="/tmp")) if engine == "ray" else None
        keys = {"keys": [{"name": r, "role": r, "key": k} for r, k in KEYS.items()]}
        self.keys_file = workdir / "keys.json"
        self.keys_file.write_text(json.dumps(keys))
        self.url = f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 90.0, attempts: int = 3) -> float:
        """Start and wait until /readyz is 200; returns seconds taken.

        An embedded Ray can fail to come up on an overloaded machine ("node
        timed out during startup"): such a failed start is killed and retried
        (counted in ``failed_starts``); a FlowRank recovery error is not
        retried (the log says which)."""
        for i in range(attempts):
            try:
                return self._start_once(timeout)
            except (RuntimeError, TimeoutError) as e:
                log_text = (self.workdir / f"server-{self.starts - 1}.log").read_text(errors="replace")
                self.kill()
                self.failed_starts += 1
                retryable = isinstance(e, TimeoutError) or "timed out during startup" in log_text
                if i == attempts - 1 or not retryable:
                    raise
        raise AssertionError("unreachable")

    def _start_once(self, timeout: float) -> float:
        env = dict(os.environ)
        env["RAY_AUTH_MODE"] = "disabled"
        env.pop("RAY_ADDRESS", None)
        if self.ray_tmp is not None:
            env["RAY_TMPDIR"] = str(self.ray_tmp)
        cmd = [sys.executable, "-m", "gateway", "serve", "--engine", self.engine, "--data-dir", str(self.data_dir),
               "--port", str(self.port), "--keys", str(self.keys_file), "--shards", str(self.shards),
               "--shard-actors", str(self.shards), "--write-rate", "100000", "--read-rate", "100000", *self.extra_args]
        out = open(self.workdir / f"server-{self.starts}.log", "wb")
        t0 = time.monotonic()
        self.owned = Owned(cmd, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
        try:
            self.proc = self.owned.start()
        finally:
            out.close()
        self.starts += 1
        deadline = t0 + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}; see {out.name}")
            try:
                if httpx.get(self.url + "/readyz", timeout=1.0).status_code == 200:
                    return time.monotonic() - t0
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        self.kill()
        raise TimeoutError(f"server not ready after {timeout}s; see {out.name}")

    def session_procs(self) -> list[psutil.Process]:
        if self.proc is None:
            return []
        sid = self.proc.pid
        out = []
        for p in psutil.process_iter(["pid"]):
            try:
                if os.getsid(p.pid) == sid and p.status() != psutil.STATUS_ZOMBIE:
                    out.append(p)
            except (ProcessLookupError, PermissionError, psutil.Error):
                pass
        return out

    def kill(self) -> None:
        """SIGKILL every process of the server's session until none is left."""
        if self.proc is None:
            return
        for _ in range(50):
            procs = self.session_procs()
            if not procs:
                break
            for p in procs:
                try:
                    p.send_signal(signal.SIGKILL)
                except psutil.Error:
                    pass
            self.proc.poll()  # reap the server itself
            time.sleep(0.02)
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        self.proc = None
        if self.owned is not None:
            self.owned.kill()  # and anything that left the session but carries the marker

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM (graceful drain and snapshot), then kill whatever is left."""
        if self.proc is None:
            return
        try:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=timeout)
        except (subprocess.TimeoutExpired, ProcessLookupError):
            pass
        self.kill()

    def shard_pids(self) -> list[int]:
        pids = []
        for p in self.session_procs():
            try:
                if "ray::ShardActor" in " ".join(p.cmdline()):
                    pids.append(p.pid)
            except psutil.Error:
                pass
        return pids

    def cleanup(self) -> None:
        self.kill()
        if self.ray_tmp is not None:
            shutil.rmtree(self.ray_tmp, ignore_errors=True)


# ---------------------------------------------------------------- history


@dataclass
class Record:
    event: dict
    attempts: list = field(default_factory=list)  # (t_sent, t_done, outcome | "ERR:...")

    @property
    def acked(self) -> list[str]:
        return [a[2] for a in self.attempts if not a[2].startswith("ERR")]


@dataclass
class Report:
    engine: str
    seed: int
    duration_s: float = 0.0
    server_kills: int = 0
    shard_kills: int = 0
    restarts: int = 0
    failed_starts: int = 0
    requests: int = 0
    requests_failed: int = 0
    events_sent: int = 0
    events_acked: int = 0
    events_checked: int = 0
    durable_events: int = 0
    replays_compared: int = 0
    anomalies: list = field(default_factory=list)
    kills: list = field(default_factory=list)  # one Kill per nemesis action, in order

    @property
    def kill_count(self) -> int:
        return self.server_kills + self.shard_kills

    def line(self) -> str:
        return (f"engine={self.engine} seed={self.seed} duration={self.duration_s:.1f}s "
                f"server_kills_survived={self.server_kills} shard_kills_survived={self.shard_kills} "
                f"restarts={self.restarts} failed_starts={self.failed_starts} requests={self.requests} "
                f"failed_requests={self.requests_failed} "
                f"events_sent={self.events_sent} acked={self.events_acked} durable={self.durable_events} "
                f"events_checked={self.events_checked} replays_compared={self.replays_compared} "
                f"anomalies={len(self.anomalies)}")


@dataclass(frozen=True)
class Kill:
    """One nemesis action: what was killed, when (seconds into the run), how
    long until the service answered again, and how many events had been
    acknowledged by then."""

    n: int
    kind: str  # "server" (the whole session, then a restart) | "shard" (one Ray shard actor)
    at_s: float
    recovery_s: float
    acked_before: int
    load1: float  # the machine's 1-minute load average when it answered again


class Workload:
    def __init__(self, seed: int, players: int = 40):
        self.seed = seed
        self.players = [f"p{i:03d}" for i in range(players)]
        self.records: dict[tuple[str, str], Record] = {}

    def new_event(self, rng: random.Random, writer: int, n: int) -> dict:
        board = rng.choice(list(BOARDS))
        value = rng.randint(0, 1_000_000) if BOARDS[board] == "best_score" else rng.randint(-20, 100)
        ev = {"event_id": f"w{writer}-{n}", "board_id": board, "player_id": rng.choice(self.players),
              "value": value, "achieved_at": BASE_MS + rng.randint(0, 10_000_000)}
        self.records[(board, ev["event_id"])] = Record(ev)
        return ev


async def writer(url: str, wl: Workload, idx: int, stop: asyncio.Event, rep: Report) -> None:
    rng = random.Random(wl.seed * 1000 + idx)
    n = 0
    retry: list[dict] | None = None
    async with httpx.AsyncClient(base_url=url, timeout=10.0, headers=H("game_server")) as c:
        while not stop.is_set():
            if retry is not None:
                batch, retry = retry, None
            else:
                batch = []
                for _ in range(rng.randint(1, 4)):
                    batch.append(wl.new_event(rng, idx, n))
                    n += 1
                rep.events_sent += len(batch)
                if rng.random() < 0.1 and len(wl.records) > 10:  # redeliver an older event on purpose
                    old = rng.choice(list(wl.records.values())).event
                    if all(e["event_id"] != old["event_id"] or e["board_id"] != old["board_id"] for e in batch):
                        batch.append(old)
            t0 = time.monotonic()
            rep.requests += 1
            try:
                r = await c.post("/v1/events", json={"events": batch})
                if r.status_code == 200:
                    results = r.json()["results"]
                    for ev, res in zip(batch, results):
                        assert res["event_id"] == ev["event_id"]
                        wl.records[(ev["board_id"], ev["event_id"])].attempts.append(
                            (t0, time.monotonic(), res["outcome"]))
                    continue
                err = f"ERR:{r.status_code}"
            except (httpx.HTTPError, OSError) as e:
                err = f"ERR:{type(e).__name__}"
            rep.requests_failed += 1
            for ev in batch:
                wl.records[(ev["board_id"], ev["event_id"])].attempts.append((t0, time.monotonic(), err))
            if rng.random() < 0.5:
                retry = batch  # at-least-once: resend the same ids
            await asyncio.sleep(0.05)


async def _answers_again(url: str, timeout: float = 120.0) -> None:
    """Until every board's top (a read over all its partitions) answers 200."""
    deadline = time.monotonic() + timeout
    async with httpx.AsyncClient(base_url=url, timeout=5.0) as c:
        while time.monotonic() < deadline:
            try:
                codes = [(await c.get(f"/v1/boards/{b}/top", params={"limit": 1}, headers=H("moderator"))).status_code
                         for b in BOARDS]
                if all(code == 200 for code in codes):
                    return
            except (httpx.HTTPError, OSError):
                pass
            await asyncio.sleep(0.05)


async def nemesis(server: Server, stop: asyncio.Event, rep: Report, rng: random.Random,
                  min_gap: float, max_gap: float, max_kills: int | None = None, t_start: float = 0.0,
                  wl: Workload | None = None, log=None) -> None:
    """SIGKILL at random moments; on Ray, shard actors and whole servers
    alternate. With ``max_kills`` it sets ``stop`` itself after that many."""
    round_ = 0
    while not stop.is_set():
        if max_kills is not None and rep.kill_count >= max_kills:
            stop.set()
            return
        try:
            await asyncio.wait_for(stop.wait(), rng.uniform(min_gap, max_gap))
            return
        except asyncio.TimeoutError:
            pass
        round_ += 1
        at = time.monotonic()
        acked = sum(1 for r in wl.records.values() if r.acked) if wl is not None else 0
        pids = server.shard_pids() if server.engine == "ray" and round_ % 2 == 1 else []
        if pids:
            pid = rng.choice(pids)
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                continue
            rep.shard_kills += 1
            await asyncio.sleep(0.05)
            await _answers_again(server.url)
            kind = "shard"
        else:
            await asyncio.to_thread(server.kill)
            await asyncio.to_thread(server.start)
            rep.server_kills += 1
            rep.restarts += 1
            kind = "server"
        kill = Kill(rep.kill_count, kind, round(at - t_start, 3), round(time.monotonic() - at, 3), acked,
                    round(os.getloadavg()[0], 2))
        rep.kills.append(kill)
        if log:
            log(f"chaos: kill {kill.n} {kind} at {kill.at_s:.1f}s, answering again after {kill.recovery_s:.2f}s"
                f" (load {kill.load1:.2f})")


# ---------------------------------------------------------------- checking


def oracle_top(policy: str, events: list[dict]) -> list[tuple[str, int]]:
    by_player: dict[str, list[dict]] = {}
    for e in events:
        by_player.setdefault(e["player_id"], []).append(e)
    rows = {}
    for pid, evs in by_player.items():
        if policy == "cumulative":
            rows[pid] = (sum(e["value"] for e in evs), max(e["achieved_at"] for e in evs))
        else:
            best = sorted(evs, key=lambda e: (-e["value"], e["achieved_at"]))[0]
            rows[pid] = (best["value"], best["achieved_at"])
    order = sorted(rows, key=lambda p: (-rows[p][0], rows[p][1], p))
    return [(p, rows[p][0]) for p in order]


async def _get(c: httpx.AsyncClient, path: str, role: str, **params) -> httpx.Response:
    """GET, retrying 503 (a restarted shard still replaying) for up to 60 s."""
    deadline = time.monotonic() + 60
    while True:
        r = await c.get(path, params=params or None, headers=H(role))
        if r.status_code != 503 or time.monotonic() > deadline:
            return r
        await asyncio.sleep(0.2)


async def read_state(url: str, wl: Workload) -> dict:
    """Histories, full top lists and checksums of every board."""
    out: dict = {"history": {}, "top": {}, "checksum": {}}
    async with httpx.AsyncClient(base_url=url, timeout=30.0) as c:
        for board in BOARDS:
            for pid in wl.players:
                r = await _get(c, f"/v1/boards/{board}/players/{pid}/history", "moderator")
                if r.status_code == 404:
                    out["history"][(board, pid)] = []
                    continue
                r.raise_for_status()
                out["history"][(board, pid)] = r.json()["events"]
            r = await _get(c, f"/v1/boards/{board}/top", "moderator", limit=1000)
            r.raise_for_status()
            out["top"][board] = r.json()
            r = await _get(c, f"/v1/boards/{board}/checksum", "admin")
            r.raise_for_status()
            out["checksum"][board] = r.json()
    return out


def check_history(wl: Workload, state: dict, rep: Report) -> None:
    admitted: dict[tuple[str, str], list[dict]] = {}
    for (board, pid), entries in state["history"].items():
        for h in entries:
            if h["kind"] != "score":
                continue
            key = (board, h["event_id"])
            rec = wl.records.get(key)
            if rec is None:
                rep.anomalies.append(f"phantom event {key} in history")
                continue
            if rec.event["player_id"] != pid:
                rep.anomalies.append(f"{key} in the history of {pid}, sent for {rec.event['player_id']}")
            if h["outcome"] not in NOT_ADMITTED:
                admitted.setdefault(key, []).append(h)
                if h["value"] != rec.event["value"]:
                    rep.anomalies.append(f"{key} stored value {h['value']} != sent {rec.event['value']}")
    durable: dict[str, list[dict]] = {b: [] for b in BOARDS}
    for key, rec in wl.records.items():
        got = admitted.get(key, [])
        acked = rec.acked
        rep.events_checked += 1
        if acked:
            rep.events_acked += 1
        if len(got) > 1:
            rep.anomalies.append(f"{key} admitted {len(got)} times (acked={bool(acked)})")
        if acked and not got:
            rep.anomalies.append(f"acknowledged event {key} lost (acks: {acked})")
        if got:
            durable[key[0]].append(rec.event)
            firsts = [a for a in acked if a not in NOT_ADMITTED]
            if firsts and any(a != got[0]["outcome"] for a in firsts):
                rep.anomalies.append(f"{key} acked {firsts} but history says {got[0]['outcome']}")
            if len(firsts) > 1:
                rep.anomalies.append(f"{key} acknowledged as admitted {len(firsts)} times")
        elif any(a == "DUPLICATE_IGNORED" for a in acked):
            rep.anomalies.append(f"{key} acked DUPLICATE_IGNORED but never admitted")
    rep.durable_events = sum(len(v) for v in durable.values())
    for board, policy in BOARDS.items():
        want = oracle_top(policy, durable[board])
        got = [(e["player_id"], e["value"]) for e in state["top"][board]["entries"]]
        if got != want:
            rep.anomalies.append(f"{board}: top {got[:5]}... != oracle {want[:5]}...")


def same_replay(a: dict, b: dict, rep: Report, label: str) -> None:
    rep.replays_compared += 1
    for board in BOARDS:
        if a["checksum"][board] != b["checksum"][board]:
            rep.anomalies.append(f"{label}: {board} checksum {a['checksum'][board]} != {b['checksum'][board]}")
        if a["top"][board] != b["top"][board]:
            rep.anomalies.append(f"{label}: {board} top list differs after replay")
    if a["history"] != b["history"]:
        rep.anomalies.append(f"{label}: histories differ after replay")


# ---------------------------------------------------------------- a run


async def _setup_boards(url: str) -> None:
    async with httpx.AsyncClient(base_url=url, timeout=30.0) as c:
        for board, policy in BOARDS.items():
            r = await c.post("/v1/boards", json={"board_id": board, "policy": policy, "shards": 2},
                             headers=H("admin"))
            assert r.status_code in (201, 409), r.text


async def run(workdir: Path, *, engine: str = "local", duration: float = 10.0, seed: int = 1, writers: int = 4,
              min_gap: float = 0.5, max_gap: float = 2.0, kills: int | None = None, log=print) -> Report:
    """One bounded chaos run; returns the report (anomalies must be empty).
    Writes last ``duration`` seconds, or with ``kills`` until the nemesis has
    made that many kills (``duration`` is then only a safety cap)."""
    rep = Report(engine=engine, seed=seed)
    wl = Workload(seed)
    rng = random.Random(seed)
    server = Server(workdir, engine=engine)
    t0 = time.monotonic()
    try:
        log(f"chaos: starting {engine} server on {server.url} (data {server.data_dir})")
        server.start()
        await _setup_boards(server.url)
        stop = asyncio.Event()
        tasks = [asyncio.create_task(writer(server.url, wl, i, stop, rep)) for i in range(writers)]
        nem = asyncio.create_task(nemesis(server, stop, rep, rng, min_gap, max_gap, max_kills=kills,
                                          t_start=t0, wl=wl, log=log if kills else None))
        stopped = asyncio.create_task(stop.wait())
        await asyncio.wait({stopped, nem}, timeout=duration, return_when=asyncio.FIRST_COMPLETED)
        if not stop.is_set() and not nem.done() and kills is not None:
            log(f"chaos: only {rep.kill_count} of {kills} kills within the {duration:.0f}s cap")
        stop.set()
        stopped.cancel()
        try:
            await nem
        except Exception as e:  # noqa: BLE001 - a server that does not come back is the finding
            rep.anomalies.append(f"the server did not come back after kill {rep.kill_count + 1}: "
                                 f"{type(e).__name__}: {e}")
        await asyncio.gather(*tasks)
        if rep.anomalies:  # nothing left to check against
            return rep
        if server.proc is None:
            await asyncio.to_thread(server.start)
        # Let a restarted shard finish replaying before the checker reads.
        await asyncio.sleep(0.5)
        first = await read_state(server.url, wl)
        check_history(wl, first, rep)
        prev = first
        for i in range(2):  # replay twice more from the same directory
            await asyncio.to_thread(server.kill)
            await asyncio.to_thread(server.start)
            rep.restarts += 1
            cur = await read_state(server.url, wl)
            same_replay(prev, cur, rep, f"replay {i + 1}")
            prev = cur
        server.stop()
    finally:
        rep.failed_starts = server.failed_starts
        server.cleanup()
        rep.duration_s = time.monotonic() - t0
        log("chaos: " + rep.line())
        for a in rep.anomalies[:20]:
            log("chaos: ANOMALY " + a)
    return rep

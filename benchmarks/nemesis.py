"""``python -m benchmarks nemesis``: faults against two FlowRank nodes on one PostgreSQL log, and a
checker over the whole history (issue 40; docs/api.md §19, docs/guarantees.md).

Setup: a PostgreSQL primary with a synchronous streaming standby (:class:`benchmarks.pg_cluster.PgCluster`),
two ``flowrank serve --log <multi-host URL>`` nodes (one active, one ``--standby``), one board with
two partitions. A client posts batches of fresh events to whichever node is active (following
``X-FlowRank-Leader``), retrying a batch with the same event ids until it has a definite answer;
readers poll each node's board version. Meanwhile the nemesis injects, one after another, bounded
in count and time:

* ``kill_active``: SIGKILL of the active node's process group (it is started again as ``--standby``
  on its data directory);
* ``pause_active``: SIGSTOP of the active node for longer than the lease, then SIGCONT (the other
  node takes over; the paused one must never append again and steps down to follow);
* ``kill_pg``: SIGKILL of the Postgres primary, ``pg_ctl promote`` of its standby (as Patroni or a
  cloud would), then the old primary re-cloned as the new standby;
* ``partition_active``: the active node cut off the network (Postgres, clients, everything) for
  longer than the lease, then joined again (the other node takes over; the cut-off one must never
  append again, and once joined it steps down to follow without a restart).

Faults come in rounds: every kind once per round, in a random order (seeded).

The network (``--network``): by default, when this process is root and the platform allows it
(:func:`benchmarks.netns.unavailable`), every FlowRank node runs in a network namespace of its own,
joined to the host by a veth pair (benchmarks/netns.py: host side 10.231.N.1, node side 10.231.N.2).
Both Postgres servers also listen on every host-side address (``PgCluster(listen=...)``); a node's
``--log`` URL names both servers at its own host-side address (multi-host,
``target_session_attrs=read-write``), its ``--host`` is its node-side address and its
``--advertise-url`` ``http://10.231.N.2:PORT``, so the client (on the host) reaches the nodes through
the veths and follows ``X-FlowRank-Leader`` there. ``partition_active`` sets the active's end of its
veth down. Otherwise (not root, no ``ip``, no namespaces) everything runs on 127.0.0.1 and there is
no ``partition_active``: the run says so (``Report.network``). Every namespace and veth is removed
at the end.

The checker, once the faults are over and both nodes have caught up:

* every acknowledged event is in the log exactly once, with the outcome it was acknowledged with (an
  event whose first attempt had no definite answer and whose retry answered ``DUPLICATE_IGNORED`` is
  in it exactly once); no event that was never sent; an answer ``DUPLICATE_IGNORED`` to a first
  attempt never happens;
* no reader saw a node's board version go backwards;
* the board's checksum is equal on both nodes and on a third node started afterwards on an empty
  data directory, which rebuilds from the log (its shards replay the whole log: their snapshots
  name journal files it does not have).

Real processes only; every child (servers, Postgres) is stopped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import httpx

from benchmarks import netns
from benchmarks.machine import describe
from benchmarks.netns import Link, Netns
from benchmarks.pg_cluster import PgCluster, free_port
from benchmarks.processes import Owned

BOARD = "nemesis:solo:S1:global"
KEYS = {"admin": "nem-admin", "game_server": "nem-gs", "moderator": "nem-mod", "reader": "nem-read"}
KINDS = ("kill_active", "pause_active", "kill_pg", "partition_active")
NEEDS_NETNS = ("partition_active",)
BASE_MS = 1_793_527_200_000


def headers(role: str) -> dict:
    return {"Authorization": f"Bearer {KEYS[role]}"}


@dataclass
class Config:
    faults: int = 100
    seconds: float = 1200.0  # the faults stop after this long, whatever their count
    lease_s: float = 1.5
    kinds: tuple[str, ...] = KINDS
    batch: int = 20
    players: int = 60
    engine: str = "local"
    seed: int = 11
    settle_s: float = 0.5  # writes flowing between two faults at least this long
    network: str = "auto"  # "netns": each node in a namespace of its own; "loopback"; "auto": netns if it can
    partition_s: float | None = None  # how long a partition lasts (None: lease_s + 0.5), at least until a takeover


@dataclass
class Report:
    config: dict
    faults: dict[str, int] = field(default_factory=dict)
    batches_acked: int = 0
    events_acked: int = 0
    events_ambiguous: int = 0  # sent, never definitely answered: may or may not be in the log
    retried_then_duplicate: int = 0
    lost: list = field(default_factory=list)  # acknowledged, not in the log
    duplicated: list = field(default_factory=list)  # in the log more than once
    wrong_outcome: list = field(default_factory=list)  # in the log with another outcome than acknowledged
    never_sent: list = field(default_factory=list)
    first_attempt_duplicates: list = field(default_factory=list)
    version_regressions: list = field(default_factory=list)
    checksums: dict[str, str] = field(default_factory=dict)
    takeover_s: list = field(default_factory=list)  # per fault: from the fault until a write is acknowledged again
    stepdown_s: list = field(default_factory=list)  # per partition: from its end until the cut-off node follows
    network: str = ""  # "netns", or "loopback: <why not netns>"
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not (self.lost or self.duplicated or self.wrong_outcome or self.never_sent or
                    self.first_attempt_duplicates or self.version_regressions) and len(set(self.checksums.values())) == 1


class Node:
    """One ``flowrank serve --log`` process (restartable on its data directory)."""

    def __init__(self, name: str, root: Path, log_url: str, cfg: Config, keys: Path, marker: str,
                 link: Link | None = None):
        self.name, self.log_url, self.cfg = name, log_url, cfg
        self.link = link  # its network namespace, or None: the host's loopback
        self.data = root / name
        self.data.mkdir(parents=True, exist_ok=True)
        self.host = link.node_ip if link is not None else "127.0.0.1"
        self.port = free_port()
        self.url = f"http://{self.host}:{self.port}"
        self.keys = keys
        self.out = root / f"{name}.log"
        self.owned: Owned | None = None
        self.marker = f"{marker}-{name}"  # its own: a kill sweeps every process carrying it
        self.paused = False
        self.cut = False  # its veth is down

    def start(self, standby: bool, timeout: float = 120.0) -> None:
        argv = [sys.executable, "-m", "gateway", "serve", "--engine", self.cfg.engine, "--data-dir", str(self.data),
                "--host", self.host, "--port", str(self.port), "--advertise-url", self.url, "--keys", str(self.keys),
                "--log", self.log_url,
                "--lease-s", str(self.cfg.lease_s), "--node", self.name, "--shards", "2", "--shard-actors", "2",
                "--write-rate", "1000000", "--read-rate", "1000000", "--graceful-timeout", "5",
                *(["--standby"] if standby else [])]
        if self.link is not None:
            argv = self.link.argv(argv)  # ip netns exec <ns> ...: the same process, in the namespace
        env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_ADDRESS")}
        env.update(RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0", PYTHONUNBUFFERED="1")
        with open(self.out, "a") as log:
            log.write(f"\n--- start {'standby' if standby else 'active'} {time.time():.3f}\n")
            log.flush()
            self.owned = Owned(argv, env=env, marker=self.marker, stdout=log, stderr=log, grace_s=10)
            self.owned.start()
        deadline = time.monotonic() + timeout
        path = "/readyz/reads" if standby else "/readyz"
        while time.monotonic() < deadline:
            assert self.owned.proc is not None
            if self.owned.proc.poll() is not None:
                raise RuntimeError(f"node {self.name} exited with {self.owned.proc.returncode}:\n{self.tail()}")
            try:
                if httpx.get(f"{self.url}{path}", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"node {self.name} not ready after {timeout} s:\n{self.tail()}")

    def kill(self) -> None:
        if self.owned is not None:
            self.owned.kill()
        self.paused = False

    def signal(self, sig: int) -> None:
        assert self.owned is not None and self.owned.proc is not None
        os.killpg(self.owned.proc.pid, sig)
        self.paused = sig == signal.SIGSTOP

    def stop(self) -> None:
        if self.owned is not None:
            if self.paused:
                self.signal(signal.SIGCONT)
            self.owned.stop(grace_s=10)

    def partition(self) -> None:
        assert self.link is not None
        self.link.cut()
        self.cut = True

    def heal(self) -> None:
        if self.link is not None and self.cut:
            self.link.restore()
        self.cut = False

    def tail(self, n: int = 30) -> str:
        try:
            return "\n".join(self.out.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def role(self) -> str | None:
        try:
            r = httpx.get(f"{self.url}/v1/cluster", headers=headers("admin"), timeout=2)
            return r.json()["role"] if r.status_code == 200 else None
        except (httpx.HTTPError, ValueError):
            return None


class Client:
    """Posts batches of fresh events to the active node, each until it has a definite answer."""

    def __init__(self, nodes: list[Node], cfg: Config, report: Report):
        self.nodes, self.cfg, self.report = nodes, cfg, report
        self.rng = random.Random(cfg.seed)
        self.sent: dict[str, dict] = {}
        self.acked: dict[str, str] = {}  # event id -> outcome acknowledged
        self.present: set[str] = set()  # retried after an ambiguous attempt, answered DUPLICATE_IGNORED
        self.ambiguous: set[str] = set()  # never definitely answered
        self.leader = 0
        self.seq = 0
        self.last_ack = time.monotonic()
        self.acks: list[tuple[float, float]] = []  # per acknowledged batch: when its last attempt was sent, answered
        self.error: BaseException | None = None
        self.stopping = False

    def _batch(self) -> list[dict]:
        out = []
        for _ in range(self.cfg.batch):
            i = self.seq
            self.seq += 1
            e = {"event_id": f"n{i}", "board_id": BOARD, "player_id": f"p{self.rng.randrange(self.cfg.players)}",
                 "value": self.rng.randrange(1_000_000), "achieved_at": BASE_MS + i}
            self.sent[e["event_id"]] = e
            out.append(e)
        return out

    async def run(self) -> None:
        try:
            async with httpx.AsyncClient(timeout=2) as http:  # a paused node holds a request: give up on it soon
                while not self.stopping:
                    await self._post_until_answered(http, self._batch())
        except Exception as exc:
            self.error = exc
            raise

    async def _post_until_answered(self, http: httpx.AsyncClient, events: list[dict]) -> None:
        ambiguous = False
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            node = self.nodes[self.leader]
            sent = time.monotonic()
            try:
                r = await http.post(f"{node.url}/v1/events", json={"events": events}, headers=headers("game_server"))
            except httpx.HTTPError:
                ambiguous = True  # it may have committed
                self.leader = (self.leader + 1) % len(self.nodes)
                await asyncio.sleep(0.05)
                continue
            if r.status_code == 200:
                self._answered(events, r.json()["results"], ambiguous, sent)
                return
            code = r.json().get("error", {}).get("code") if r.headers.get("content-type", "").startswith(
                "application/json") else None
            if code == "NOT_LEADER":  # refused before anything was decided: definite, nothing applied
                leader = r.headers.get("X-FlowRank-Leader")
                match = [i for i, n in enumerate(self.nodes) if n.url == leader]
                self.leader = match[0] if match else (self.leader + 1) % len(self.nodes)
            elif r.status_code in (429,):
                pass
            else:  # 503 OVERLOADED and the like: a durable batch may have failed in a shard; retry
                ambiguous = True
            await asyncio.sleep(0.05)
        self.ambiguous.update(e["event_id"] for e in events)

    def _answered(self, events: list[dict], results: list[dict], ambiguous: bool, sent: float) -> None:
        assert [x["event_id"] for x in results] == [e["event_id"] for e in events]
        for x in results:
            if x["outcome"] == "DUPLICATE_IGNORED":
                if ambiguous:
                    self.present.add(x["event_id"])
                else:
                    self.report.first_attempt_duplicates.append(x["event_id"])
            else:
                self.acked[x["event_id"]] = x["outcome"]
        self.report.batches_acked += 1
        self.last_ack = time.monotonic()
        self.acks.append((sent, self.last_ack))


async def read_versions(node: Node, seen: dict, report: Report, stop: asyncio.Event) -> None:
    """Poll the node's board version; a smaller one than seen before on this node is a regression."""
    async with httpx.AsyncClient(timeout=2) as http:
        while not stop.is_set():
            try:
                r = await http.get(f"{node.url}/v1/boards/{BOARD}", headers=headers("reader"))
                if r.status_code == 200:
                    v = r.json()["version"]
                    if v < seen.get(node.name, -1):
                        report.version_regressions.append([node.name, seen[node.name], v])
                    seen[node.name] = max(v, seen.get(node.name, -1))
            except (httpx.HTTPError, ValueError, KeyError):
                pass
            await asyncio.sleep(0.05)


def active_index(nodes: list[Node]) -> int | None:
    for i, n in enumerate(nodes):
        if not n.paused and not n.cut and n.role() == "active":
            return i
    return None


async def wait_for_writes(client: Client, since: float, timeout: float = 60.0) -> float:
    """Until a write sent after ``since`` is acknowledged; the seconds from ``since`` to that answer."""
    deadline = time.monotonic() + timeout
    while True:
        got = next((acked for sent, acked in reversed(client.acks) if sent > since), None)
        if got is not None:
            return min(acked for sent, acked in client.acks if sent > since) - since
        if client.error is not None:
            raise RuntimeError(f"the client failed: {client.error!r}") from client.error
        if time.monotonic() > deadline:
            raise RuntimeError(f"no write acknowledged within {timeout} s of a fault")
        await asyncio.sleep(0.01)


def cluster_info(node: Node) -> dict | None:
    try:
        r = httpx.get(f"{node.url}/v1/cluster", headers=headers("admin"), timeout=2)
        return r.json() if r.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return None


async def wait_following(node: Node, active: Node, timeout: float) -> float:
    """Until ``node`` is a standby that has applied what ``active`` had applied when this began (it
    follows the log); the seconds it took. RuntimeError after ``timeout``, with what it last said."""
    began = time.monotonic()
    target = None
    while True:
        if target is None and (info := await asyncio.to_thread(cluster_info, active)) is not None:
            target = info["applied"]
        got = await asyncio.to_thread(cluster_info, node)
        if target is not None and got is not None and got["role"] == "standby" and got["applied"] >= target:
            return time.monotonic() - began
        if time.monotonic() - began > timeout:
            raise RuntimeError(f"node {node.name} does not follow the log {timeout} s on (it says {got}; the "
                               f"active had applied {target}):\n{node.tail()}")
        await asyncio.sleep(0.05)


async def inject(kind: str, nodes: list[Node], pg: PgCluster, cfg: Config, client: Client,
                 report: Report) -> tuple[str, float]:
    """One fault; returns its kind (``kill_pg`` when there was no active node to fault) and the seconds
    from it until writes were acknowledged again."""
    i = active_index(nodes)
    if kind in ("kill_active", "pause_active", "partition_active") and i is None:
        kind = "kill_pg"
    began = time.monotonic()
    if kind == "kill_active":
        assert i is not None
        nodes[i].kill()
        began = time.monotonic()  # it is dead: an answer from now on comes from the other node
        took = await wait_for_writes(client, began)
        await asyncio.to_thread(nodes[i].start, True)  # back as a standby
        return kind, took
    if kind == "pause_active":
        assert i is not None
        nodes[i].signal(signal.SIGSTOP)
        took = await wait_for_writes(client, began)
        await asyncio.sleep(max(0.0, cfg.lease_s + 0.5 - (time.monotonic() - began)))
        nodes[i].signal(signal.SIGCONT)  # fenced: it steps down and follows
        return kind, took
    if kind == "partition_active":
        assert i is not None
        await asyncio.to_thread(nodes[i].partition)
        began = time.monotonic()
        took = await wait_for_writes(client, began)  # the other node took over
        cut_s = cfg.lease_s + 0.5 if cfg.partition_s is None else cfg.partition_s
        await asyncio.sleep(max(0.0, cut_s - (time.monotonic() - began)))
        await asyncio.to_thread(nodes[i].heal)
        # fenced: its next renewal (or append) finds the new epoch; it steps down and follows, no restart
        report.stepdown_s.append(round(await wait_following(nodes[i], nodes[1 - i], 60.0), 3))
        return kind, took
    await asyncio.to_thread(pg.kill_primary)
    await asyncio.to_thread(pg.promote_standby)
    took = await wait_for_writes(client, time.monotonic())  # from the promotion's completion
    await asyncio.to_thread(pg.rebuild_standby)
    await asyncio.to_thread(pg.wait_replay)  # two copies of everything again before the next fault
    return kind, took


async def caught_up(nodes: list[Node], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    async with httpx.AsyncClient(timeout=5) as http:
        while True:
            infos = []
            for n in nodes:
                try:
                    infos.append((await http.get(f"{n.url}/v1/cluster", headers=headers("admin"))).json())
                except (httpx.HTTPError, ValueError):
                    infos.append(None)
            if all(x is not None for x in infos) and len({x["applied"] for x in infos}) == 1 and all(
                    x["lag_records"] == 0 for x in infos) and sum(x["role"] == "active" for x in infos) == 1:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"nodes not caught up after {timeout} s: {infos}")
            await asyncio.sleep(0.1)


def check(nodes: list[Node], client: Client, report: Report) -> None:
    """The history of every player from the active node against what the client was told."""
    url = nodes[active_index(nodes) or 0].url
    logged: dict[str, list[str]] = {}
    with httpx.Client(base_url=url, timeout=60) as c:
        for p in range(client.cfg.players):
            r = c.get(f"/v1/boards/{BOARD}/players/p{p}/history", headers=headers("moderator"))
            if r.status_code == 404:
                continue
            r.raise_for_status()
            for h in r.json()["events"]:
                if h["outcome"] != "DUPLICATE_IGNORED":
                    logged.setdefault(h["event_id"], []).append(h["outcome"])
    for x, outcome in client.acked.items():
        got = logged.get(x, [])
        if not got:
            report.lost.append(x)
        elif len(got) > 1:
            report.duplicated.append(x)
        elif got[0] != outcome:
            report.wrong_outcome.append([x, outcome, got[0]])
    for x in client.present:
        if len(logged.get(x, [])) != 1:
            (report.lost if not logged.get(x) else report.duplicated).append(x)
    report.never_sent = [x for x in logged if x not in client.sent]
    report.duplicated += [x for x, got in logged.items() if len(got) > 1 and x not in client.acked]
    report.events_acked = len(client.acked)
    report.retried_then_duplicate = len(client.present)
    report.events_ambiguous = len(client.ambiguous)


def checksum(node: Node) -> str:
    r = httpx.get(f"{node.url}/v1/boards/{BOARD}/checksum", headers=headers("admin"), timeout=30)
    r.raise_for_status()
    return r.json()["checksum"]


async def run(cfg: Config, root: Path, say=print) -> Report:
    report = Report(config=asdict(cfg))
    started = time.monotonic()
    os.chmod(root, 0o755)
    keys = root / "keys.json"
    keys.write_text(json.dumps({"keys": [{"name": r, "role": r, "key": k} for r, k in KEYS.items()]}))
    marker = f"nem-{os.getpid()}-{random.randrange(1 << 30)}"
    if cfg.network not in ("auto", "netns", "loopback"):
        raise ValueError(f"network must be auto, netns or loopback, not {cfg.network!r}")
    why = "asked for" if cfg.network == "loopback" else await asyncio.to_thread(netns.unavailable)
    if cfg.network == "netns" and why is not None:
        raise RuntimeError(f"no network namespaces here: {why}")
    kinds = cfg.kinds if why is None else tuple(k for k in cfg.kinds if k not in NEEDS_NETNS)
    if not kinds:
        raise RuntimeError(f"no fault kind left of {cfg.kinds} without network namespaces ({why})")
    report.network = "netns" if why is None else f"loopback: {why}"
    if kinds != cfg.kinds:
        say(f"nemesis: plain loopback, no {', '.join(NEEDS_NETNS)} ({why})")
    else:
        say(f"nemesis: network {report.network}")
    net = Netns(3) if why is None else None  # a0, a1 and the fresh node
    pg: PgCluster | None = None
    nodes: list[Node] = []
    stop_readers = asyncio.Event()
    readers: list[asyncio.Task] = []
    client_task: asyncio.Task | None = None
    try:
        links: list[Link | None] = [None] * 3
        if net is not None:
            await asyncio.to_thread(net.start)  # before Postgres: it binds the host-side addresses
            links = list(net.links)
        pg = PgCluster(root / "pg", listen=[x.host_ip for x in links if x is not None])
        await asyncio.to_thread(pg.start)

        def make(name: str, link: Link | None) -> Node:
            assert pg is not None
            url = pg.url_for(host=link.host_ip) if link is not None else pg.url
            return Node(name, root, url, cfg, keys, marker, link)

        nodes = [make(f"a{i}", links[i]) for i in range(2)]
        await asyncio.to_thread(nodes[0].start, False)
        r = httpx.post(f"{nodes[0].url}/v1/boards", json={"board_id": BOARD, "policy": "best_score", "shards": 2},
                       headers=headers("admin"), timeout=30)
        r.raise_for_status()
        await asyncio.to_thread(nodes[1].start, True)
        client = Client(nodes, cfg, report)
        client_task = asyncio.ensure_future(client.run())
        seen: dict = {}
        readers = [asyncio.ensure_future(read_versions(n, seen, report, stop_readers)) for n in nodes]
        await wait_for_writes(client, time.monotonic())
        rng = random.Random(cfg.seed)
        order: list[str] = []
        for k in range(cfg.faults):
            if time.monotonic() - started > cfg.seconds:
                say(f"nemesis: time is up after {k} faults")
                break
            if not order:  # a round: every kind once, in a random order
                order = rng.sample(kinds, len(kinds))
            kind, took = await inject(order.pop(), nodes, pg, cfg, client, report)
            report.faults[kind] = report.faults.get(kind, 0) + 1
            report.takeover_s.append(round(took, 3))
            say(f"nemesis: {time.monotonic() - started:7.1f} s fault {k + 1}/{cfg.faults} {kind}: writes again "
                f"after {took:.2f} s ({report.batches_acked} batches acknowledged)")
            if os.environ.get("NEMESIS_CHECK_EACH"):
                client.stopping = True
                await asyncio.wait_for(client_task, 150)
                await caught_up(nodes)
                sums = {n.name: await asyncio.to_thread(checksum, n) for n in nodes}
                infos = {n.name: httpx.get(f"{n.url}/v1/cluster", headers=headers("admin")).json() for n in nodes}
                say(f"nemesis: checksums {sums} {infos}")
                client.stopping = False
                client_task = asyncio.ensure_future(client.run())
            await asyncio.sleep(cfg.settle_s)
        client.stopping = True
        await asyncio.wait_for(client_task, 150)
        await caught_up(nodes)
        stop_readers.set()
        await asyncio.gather(*readers)
        check(nodes, client, report)
        for n in nodes:
            report.checksums[n.name] = checksum(n)
        fresh = make("fresh", links[2])
        nodes.append(fresh)
        await asyncio.to_thread(fresh.start, True)
        await caught_up(nodes)
        report.checksums[fresh.name] = checksum(fresh)
    finally:
        stop_readers.set()
        if client_task is not None and not client_task.done():
            client_task.cancel()
        for t in readers:
            t.cancel()
        for n in nodes:
            with contextlib.suppress(netns.NetnsError):  # joined again, so that it stops as it would
                await asyncio.to_thread(n.heal)
            await asyncio.to_thread(n.stop)
        if pg is not None:
            await asyncio.to_thread(pg.stop)
        if net is not None:
            await asyncio.to_thread(net.stop)  # after every process in its namespaces has gone
        report.seconds = round(time.monotonic() - started, 1)
    return report


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks nemesis", description=__doc__.split("\n\n")[0])
    p.add_argument("--faults", type=int, default=Config.faults)
    p.add_argument("--seconds", type=float, default=Config.seconds, help="stop injecting after this long")
    p.add_argument("--lease-s", type=float, default=Config.lease_s)
    p.add_argument("--kinds", default=",".join(KINDS), help=f"comma-separated, of {', '.join(KINDS)}")
    p.add_argument("--engine", choices=("local", "ray"), default=Config.engine)
    p.add_argument("--seed", type=int, default=Config.seed)
    p.add_argument("--partition-s", type=float, default=None, help="how long a partition_active lasts "
                   "(default: lease + 0.5 s; at least until the other node took over)")
    p.add_argument("--network", choices=("auto", "netns", "loopback"), default=Config.network,
                   help="each node in a network namespace of its own (needed by partition_active), or all on "
                        "127.0.0.1; auto: namespaces when root and the platform allow them")
    p.add_argument("--json", default=None, metavar="DIR", help="write report.json there")
    a = p.parse_args(argv)
    # the nodes load compiled kernels from one cache (as `python -m benchmarks` does), not one per data dir
    os.environ.setdefault("FLOWRANK_CACHE_DIR", str(Path(__file__).resolve().parent.parent / ".numba-cache"))
    cfg = Config(faults=a.faults, seconds=a.seconds, lease_s=a.lease_s, kinds=tuple(a.kinds.split(",")),
                 engine=a.engine, seed=a.seed, network=a.network, partition_s=a.partition_s)
    print(json.dumps({"machine": describe(), "config": asdict(cfg)}, indent=1))
    root = Path(tempfile.mkdtemp(prefix="fr-nem-", dir="/tmp"))
    try:
        report = asyncio.run(run(cfg, root))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    out = asdict(report) | {"ok": report.ok, "load_average": os.getloadavg()}
    print(json.dumps({k: v for k, v in out.items() if k not in ("takeover_s", "stepdown_s")} | {
        "takeover_s_median": sorted(report.takeover_s)[len(report.takeover_s) // 2] if report.takeover_s else None,
        "takeover_s_max": max(report.takeover_s, default=None),
        "stepdown_s_median": sorted(report.stepdown_s)[len(report.stepdown_s) // 2] if report.stepdown_s else None,
        "stepdown_s_max": max(report.stepdown_s, default=None)}, indent=1))
    if a.json:
        Path(a.json).mkdir(parents=True, exist_ok=True)
        (Path(a.json) / "report.json").write_text(json.dumps(out, indent=1))
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())

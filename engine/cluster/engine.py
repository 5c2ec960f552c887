"""``ClusterEngine``: the EngineClient whose shards are Ray actors.

The gateway process is a Ray driver. It runs the :class:`engine.router.router.Router`
(sequencing, admission, merges), appends to the event log itself (group
commit on its own writer thread: no Ray call between a batch and its fsync,
issue 29 item 4), and talks to one ``LogServer`` actor pinned to its own
node, which follows that log for the shard actors' recovery reads and keeps
the snapshots (:mod:`engine.log.follower`), and to ``n`` shard actors spread
over the cluster. Calls from this one driver reach each sync shard actor in
submission order, which is what makes a fan-out a consistent cut
(docs/consistency.md).
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import time
import uuid
from pathlib import Path
from typing import Callable

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from engine.log import SegmentedFileLog
from engine.log.places import is_database, open_reader, open_writer
from engine.log.secret import load_secret
from engine.log.framing import pack_in_pieces
from engine.cluster.actors import RemoteLogView, RemoteShard, spill_dir
from engine.cluster.log_actor import RemoteLogServer, pack, unpack
from engine.core import records as R
from engine.core.errors import Overloaded
from engine.core.model import DEFAULT_DEDUP_RETENTION, DEFAULT_DELTA_RETENTION
from engine.log.archives import FileArchiveStore
from engine.router.router import Router, RouterConfig
from engine.runtime.base import RouterClient
from engine.runtime.outbox_feed import WebhookConfig
from engine.runtime.leadership import Leadership, NodeIdentity
from engine.runtime.local import DirectLog, _lock
from engine.cluster.ray_start import init_ray

log = logging.getLogger("flowrank.cluster")


class RayShards:
    """Shard transport over sync Ray actors (order-preserving per caller)."""

    def __init__(self, actors: list):
        self.actors = actors
        self.n = len(actors)

    def apply(self, actor: int, through: int, items: list):
        return _unpacked(self.actors[actor].apply.remote(through, pack(items)))

    def read(self, actor: int, requests: list):
        return _unpacked(self.actors[actor].read.remote(pack(requests)))


async def _unpacked(ref):
    try:
        return unpack(await ref)
    except ray.exceptions.RayError as exc:
        raise Overloaded(f"A shard actor is restarting or unreachable ({type(exc).__name__}); retry shortly.",
                         retry_after=1) from exc


class ClusterEngine(RouterClient):
    def __init__(self, router: Router, log_server, shards: list, lock_fd, started_ray: bool,
                 event_log: SegmentedFileLog | None = None):
        self.router = router
        self.log_server = log_server
        self.event_log = event_log  # written here; the log server follows it
        self.shards = shards
        self._lock_fd = lock_fd
        self._started_ray = started_ray
        self._shard_stats: dict = {}
        self.recovery_seconds = 0.0
        self.prune_log = False
        self.namespace: str | None = None

    @classmethod
    async def open(
        cls,
        data_dir: str = "./flowrank-data",
        default_shards: int | None = None,
        dedup_retention: int = DEFAULT_DEDUP_RETENTION,
        delta_retention: int = DEFAULT_DELTA_RETENTION,
        n_shards: int | None = None,
        ray_address: str | None = None,
        snapshot_every_events: int = 1_000_000,
        snapshot_every_seconds: float = 300.0,
        max_queued_events: int = 200_000,
        appends_in_flight: int = 2,
        prune_log: bool = False,
        ray_dashboard: bool = False,
        wall_clock: Callable[[], int] | None = None,
        cache_dir: str | None = None,
        webhooks: WebhookConfig | None = None,
        erasure_deadline_s: float = 3600.0,
        rank_mirror_rows: int = RouterConfig.rank_mirror_rows,
        log_url: str | None = None,
        identity: NodeIdentity | None = None,
        standby: bool = False,
    ) -> "ClusterEngine":
        """``log_url``: the log and snapshots in that PostgreSQL database (docs/api.md §19), this node
        its active one under the lease (``identity``); None: files under ``data_dir``."""
        started = time.monotonic()
        root = Path(data_dir).resolve()
        root.mkdir(parents=True, exist_ok=True)
        lock_fd = _lock(root / "LOCK")
        standby = standby and is_database(log_url)
        leadership = (Leadership.single() if not is_database(log_url) else
                      await asyncio.to_thread(Leadership.follower if standby else Leadership.acquire, log_url,
                                              identity or NodeIdentity()))
        started_ray = init_ray(ray_address, dashboard=ray_dashboard)  # or waits for serve's early start
        n = n_shards or max(1, int(ray.cluster_resources().get("CPU", 1)))
        here = ray.get_runtime_context().get_node_id()
        namespace = ray.get_runtime_context().namespace
        log_name = f"flowrank-log-{uuid.uuid4().hex[:12]}"
        # the log's writer lives here (opened, torn tail truncated, durable mark written, before the log
        # server follows it and any shard reads it)
        event_log = await asyncio.to_thread(open_reader, root, log_url) if standby else (
            await asyncio.to_thread(open_writer, root, log_url, epoch=leadership.epoch, mark=True))
        log_server = RemoteLogServer.options(
            name=log_name, scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=here, soft=False)
        ).remote(str(root), R.DEAD_LETTER_HEAD, follow=True, log_url=log_url)
        # The shard actors' processes start (imports, kernel loads) while the log server's does: a named
        # actor is registered when created, so a shard finds it by name at once; its recovery's reads
        # wait for the log server to be up. cache_dir: the compile cache each shard actor points its
        # kernels at (engine.runtime.warm)
        shards = [RemoteShard.options(scheduling_strategy="SPREAD").remote(i, n, log_name, namespace, cache_dir)
                  for i in range(n)]
        await asyncio.gather(log_server.end_offset.remote(), *(s.pid.remote() for s in shards))  # all recovered
        secret = await asyncio.to_thread(load_secret, root, log_url)
        router = Router(RayShards(shards), DirectLog(event_log), RouterConfig(
            dedup_retention=dedup_retention, delta_retention=delta_retention, max_queued_events=max_queued_events,
            appends_in_flight=appends_in_flight, erasure_secret=secret, rank_mirror_rows=rank_mirror_rows),
            archives=FileArchiveStore(root / "archives"),
            wall_clock=wall_clock)  # epoch ms for scheduled season closes (None: time.time); a test seam
        eng = cls(router, log_server, shards, lock_fd, started_ray, event_log)
        eng.leadership = leadership
        eng.namespace = namespace
        eng.default_shards = default_shards or n
        eng.snapshot_every_events = snapshot_every_events
        eng.snapshot_every_seconds = snapshot_every_seconds
        eng.prune_log = prune_log
        eng.webhooks, eng.webhook_dir = webhooks, str(root)
        eng.erasure_deadline_s = erasure_deadline_s
        view = RemoteLogView(log_server)
        # the same start sequence as the local service (RouterClient._start): the router's recovery and the
        # erasure job read and rewrite the log here, snapshots go through the log server
        eng._root, eng._log_url, eng._view = root, log_url, view
        if standby:  # follow the log; take over when the lease frees (engine.runtime.standby)
            await eng._recover(event_log, view)
            await eng._follow(event_log)
        else:
            await eng._start(event_log, view)
            leadership.start(event_log, eng.step_down)  # renew from now on; a lost lease fences, steps down
        eng.recovery_seconds = time.monotonic() - started
        eng._stats_task = asyncio.ensure_future(eng._refresh_stats())
        return eng

    async def _shard_offsets(self) -> list[int]:
        return [st["applied_offset"] for st in await asyncio.gather(*(s.stats.remote() for s in self.shards))]

    def _open_log(self, epoch: int | None):
        """The log of ``--log`` again: its writer under ``epoch`` (a standby that took over), or a reader
        (None: an active node that stepped down)."""
        if epoch is None:
            return open_reader(self._root, self._log_url)
        return open_writer(self._root, self._log_url, epoch=epoch, mark=True)

    @property
    def _snapshot_store(self):
        return self._view

    async def warm(self, claims: str | None = None) -> list[dict]:
        """Every shard actor compiles or loads every kernel, in parallel (engine.runtime.warm);
        one WarmReport (as a dict) per actor. Calls sent after it wait for it. ``claims``: a cold
        cache's compile shared out among the processes of this start (engine.runtime.compile_share)."""
        return list(await asyncio.gather(*(s.warm.remote(claims) for s in self.shards)))

    async def _take_snapshot(self) -> float:
        """Cut router and shards between two cycles, then wait until every part is durably saved
        (only then does the caller count the snapshot as taken). Each shard actor makes its cut on
        its request thread and saves it on its snapshot thread (ShardActor.snapshot), so reads and
        batches go on meanwhile. The pause: the router's hold plus the longest time a shard actor's
        request thread spent on its cut (what a read queued behind it waits at most)."""
        paused = time.monotonic()
        async with self.router.sequencing():
            offset = self.router.log_offset
            refs = [s.snapshot.remote() for s in self.shards]  # ordered after every dispatched batch
            # The router's own cut (its dedup tables: tens of MB at millions of events) is copied on
            # a worker thread while the sequencing lock keeps every fold out: writes wait, reads are
            # answered on this loop meanwhile (numpy's copies let go of the GIL).
            state = await asyncio.to_thread(self.router.to_state)
        held = time.monotonic() - paused
        begun = await asyncio.gather(*refs)
        cut = max((b[2] for b in begun), default=0.0)
        await asyncio.gather(*(self._saved(s, job) for s, (_o, job, _c) in zip(self.shards, begun)))
        shard_offsets = [b[0] for b in begun]
        if offset >= 0:
            packed = await asyncio.to_thread(pack_in_pieces, state)  # a piece at a time: the loop gets in between
            await self.log_server.save_snapshot.remote("router", offset + 1, packed)
            if self.prune_log:  # segments wholly before every snapshot
                await asyncio.to_thread(self.event_log.delete_segments_before, min([offset, *shard_offsets]) + 1)
        return held + cut

    #: how often the router asks a shard actor whether its background save is done (a cheap call)
    SAVE_POLL_S = 0.05

    async def _saved(self, shard, job: str | None) -> None:
        """Until the shard actor's background save ``job`` is durable; raises RuntimeError when it failed
        (or its process restarted meanwhile: the snapshot is then not taken, the next one is)."""
        while job is not None:
            got = await shard.snapshot_result.remote(job)
            if got is not None:
                if got[0] is not None:
                    raise RuntimeError(f"shard snapshot failed: {got[0]}")
                return
            await asyncio.sleep(self.SAVE_POLL_S)

    async def _refresh_stats(self) -> None:
        while True:
            try:
                await self.refresh_stats()
            except Exception:
                pass
            await asyncio.sleep(2.0)

    async def refresh_stats(self) -> None:
        """Ask every shard actor for its stats now. An actor runs calls in the order they were sent,
        so the answer includes every batch dispatched to it before this call: a scrape after an
        acknowledged write sees that write's rows (the 2 s loop only covers stats() between scrapes)."""
        stats = await asyncio.gather(*(s.stats.remote() for s in self.shards))
        self._shard_stats = {i: st for i, st in enumerate(stats)}

    def stats(self) -> dict:
        return self.router_stats() | {
            "shard_rows": {i: sum(st["rows"].values()) for i, st in self._shard_stats.items()},
            "dead_letters": [d for st in self._shard_stats.values() for d in st["dead_letters"]],
        }

    async def shard_pids(self) -> list[int]:
        return list(await asyncio.gather(*(s.pid.remote() for s in self.shards)))

    async def close(self) -> None:
        self._stats_task.cancel()
        await self._stop()
        try:
            await self.log_server.close.remote()
        except Exception:
            pass
        if self.event_log is not None:
            await asyncio.to_thread(self.event_log.close)
        await asyncio.to_thread(self.leadership.release)  # another node may take over at once
        for a in [*self.shards, self.log_server]:
            ray.kill(a)
        if self.namespace is not None:  # the shard actors' export spill directories on this node (empty by now)
            shutil.rmtree(spill_dir(self.namespace), ignore_errors=True)
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None
        if self._started_ray:
            ray.shutdown()

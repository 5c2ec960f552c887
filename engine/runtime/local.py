"""The engine service: router + shards + log + snapshots, in one process.

``LocalService`` implements :class:`engine.router.api.EngineClient` with every
shard an in-process :class:`engine.runtime.shard.ShardCore`. It is the embedded
engine (tests, a single-process deployment) and it shares all of its logic
with the Ray cluster client (:mod:`engine.cluster`), which only swaps the
shard transport and the log adapter. Recovery, snapshots and retention
live here and in :mod:`engine.runtime.recovery`.
"""

from __future__ import annotations

import asyncio
import fcntl
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import msgpack

from engine.core.errors import Overloaded
from engine.log import InMemoryLog, InMemorySnapshotStore
from engine.log.places import is_database, open_reader, open_snapshots, open_writer
from engine.runtime.leadership import Leadership, NodeIdentity
from engine.log.archives import FileArchiveStore, MemoryArchiveStore
from engine.core.model import DEFAULT_DEDUP_RETENTION, DEFAULT_DELTA_RETENTION
from engine.core.journal import TAIL_ROWS, JournalPlace
from engine.runtime.recovery import DeadLetterIndex, recover_shard
from engine.log.secret import load_secret
from engine.router.router import Router, RouterConfig
from engine.runtime.base import RouterClient
from engine.runtime.outbox_feed import WebhookConfig
from engine.runtime.shard import ShardCore

log = logging.getLogger("flowrank.service")


@dataclass
class ServiceConfig:
    data_dir: str | None = None  # None: log and snapshots in memory (tests)
    n_shards: int = 2  # shard count (in-process partitions hosts)
    default_shards: int = 1  # partitions of a new board when the caller gives none
    dedup_retention: int = DEFAULT_DEDUP_RETENTION
    delta_retention: int = DEFAULT_DELTA_RETENTION
    snapshot_every_events: int = 1_000_000
    snapshot_every_seconds: float = 300.0
    prune_log: bool = False  # delete segments wholly before every snapshot (keeps an audit window otherwise)
    segment_bytes: int = 64 * 2**20
    max_queued_events: int = 200_000
    appends_in_flight: int = 2  # --appends-in-flight: log appends the sequencer keeps in flight (1: serial)
    fault_hook: Callable[[str, str], None] | None = None  # test seam: engine.log FaultHook for log + snapshots
    journal_tail_rows: int = TAIL_ROWS  # journal rows per partition kept in memory (the rest under data_dir/journal)
    wall_clock: Callable[[], int] | None = None  # epoch ms for scheduled season closes (None: time.time); a test seam
    # shard calls and answers cross msgpack, as they do across Ray (engine.runtime.warm: the shard kernels then see
    # exactly the argument types a shard actor sees)
    packed_wire: bool = False
    webhooks: WebhookConfig | None = None  # --webhook-url and its settings (docs/api.md §16)
    erasure_deadline_s: float = 3600.0  # --erasure-deadline-s (docs/api.md §17)
    erasure_delay_s: float | None = None  # test seam: the erasure job's wait after a request (None: the default)
    erasure_snapshot_wait_s: float | None = None  # test seam: its wait for a periodic snapshot (None: the default)
    rank_mirror_rows: int = RouterConfig.rank_mirror_rows  # --rank-mirror-rows (engine.core.rank_mirror; 0: none)
    log_url: str | None = None  # --log: the log and snapshots in PostgreSQL (docs/api.md §19); None: under data_dir
    identity: NodeIdentity | None = None  # --node, --advertise-url, --lease-s (with log_url)
    standby: bool = False  # --standby (with log_url): follow the log, take over when the lease frees


class InProcessShards:
    """Shard transport (:class:`engine.core.wire.ShardTransport`) whose shard actors
    are objects in this process: a call runs at submission, so submission
    order is execution order. ``packed``: calls and answers go through msgpack
    as they do to a shard actor over Ray (:mod:`engine.cluster.actors`)."""

    def __init__(self, cores: list[ShardCore], packed: bool = False):
        self.cores = cores
        self.n = len(cores)
        self.packed = packed

    def apply(self, actor: int, through: int, items: list):
        if self.packed:
            return _done(lambda: _wire(self.cores[actor].apply(through, _wire(items))))
        return _done(lambda: self.cores[actor].apply(through, items))

    def read(self, actor: int, requests: list):
        if self.packed:
            return _done(lambda: _wire(self.cores[actor].read(_wire(requests))))
        return _done(lambda: self.cores[actor].read(requests))


def _wire(obj):
    """``obj`` as the other side of a Ray call gets it (engine.cluster.log_actor.pack / unpack)."""
    return msgpack.unpackb(msgpack.packb(obj, use_bin_type=True), raw=False, strict_map_key=False)


def _done(fn):
    fut = asyncio.get_running_loop().create_future()
    try:
        fut.set_result(fn())
    except BaseException as exc:  # surfaces at await, like a remote call would
        fut.set_exception(exc)
    return fut


class DirectLog:
    """LogPort over an EventLog in this process; fsync runs in a thread (the
    log's writer thread commits the appends in flight together: group commit)."""

    def __init__(self, event_log):
        self.event_log = event_log

    async def append(self, payloads: list[bytes], at: int | None = None) -> int:
        # two appends in flight may start out of order in the thread pool: ``at`` puts them back in order
        offsets = await asyncio.to_thread(self.event_log.append_payloads, payloads, at)
        return offsets[0]


class LocalService(RouterClient):
    """EngineClient with every shard in this process."""

    def __init__(self, cfg: ServiceConfig, event_log, store, cores: list[ShardCore], router: Router, lock_fd):
        self.cfg = cfg
        self.event_log = event_log
        self.store = store
        self.cores = cores
        self.router = router
        self._lock_fd = lock_fd
        self.default_shards = cfg.default_shards  # partitions of a board created without "shards"
        self.snapshot_every_events = cfg.snapshot_every_events
        self.snapshot_every_seconds = cfg.snapshot_every_seconds
        self.recovery_seconds = 0.0

    @classmethod
    async def open(
        cls,
        data_dir: str | None = None,
        default_shards: int = 1,
        dedup_retention: int = DEFAULT_DEDUP_RETENTION,
        delta_retention: int = DEFAULT_DELTA_RETENTION,
        n_shards: int | None = None,
        **options,
    ) -> "LocalService":
        cfg = ServiceConfig(
            data_dir=data_dir, default_shards=default_shards, dedup_retention=dedup_retention,
            delta_retention=delta_retention, n_shards=n_shards or max(default_shards, 2), **options,
        )
        started = time.monotonic()
        lock_fd = None
        leadership = Leadership.single()
        if data_dir is None:
            event_log, store = InMemoryLog(), InMemorySnapshotStore()
        else:
            root = Path(data_dir)
            root.mkdir(parents=True, exist_ok=True)
            lock_fd = _lock(root / "LOCK")
            if is_database(cfg.log_url) and cfg.standby:
                leadership = await asyncio.to_thread(Leadership.follower, cfg.log_url, cfg.identity or NodeIdentity())
                event_log = await asyncio.to_thread(open_reader, root, cfg.log_url)
            else:
                if is_database(cfg.log_url):
                    leadership = await asyncio.to_thread(Leadership.acquire, cfg.log_url,
                                                        cfg.identity or NodeIdentity())
                event_log = await asyncio.to_thread(open_writer, root, cfg.log_url, epoch=leadership.epoch,
                                                    segment_bytes=cfg.segment_bytes, fault_hook=cfg.fault_hook)
            store = open_snapshots(root, cfg.log_url, fault_hook=cfg.fault_hook)
        dead = DeadLetterIndex(event_log)  # one scan of the log for the dead letters every shard's replay skips
        cores = [(await asyncio.to_thread(recover_shard, i, cfg.n_shards, event_log, store, JournalPlace(
                     None if data_dir is None else str(Path(data_dir) / "journal" / f"shard-{i}"), cfg.journal_tail_rows),
                     dead)).core
                 for i in range(cfg.n_shards)]
        for i, core in enumerate(cores):  # export spill files (stale ones from a crash go now); else a temp dir
            if data_dir is not None:
                core.use_spill_dir(str(Path(data_dir) / "spill" / f"shard-{i}"))
        transport = InProcessShards(cores, packed=cfg.packed_wire)
        archives = MemoryArchiveStore() if data_dir is None else FileArchiveStore(
            Path(data_dir) / "archives", fault_hook=cfg.fault_hook)
        secret = os.urandom(32) if data_dir is None else await asyncio.to_thread(load_secret, Path(data_dir), cfg.log_url)
        router = Router(transport, DirectLog(event_log), RouterConfig(
            dedup_retention=dedup_retention, delta_retention=delta_retention,
            max_queued_events=cfg.max_queued_events, appends_in_flight=cfg.appends_in_flight,
            erasure_secret=secret, rank_mirror_rows=cfg.rank_mirror_rows), archives=archives,
            wall_clock=cfg.wall_clock)
        svc = cls(cfg, event_log, store, cores, router, lock_fd)
        svc.erasure_deadline_s, svc.erasure_delay_s = cfg.erasure_deadline_s, cfg.erasure_delay_s
        svc.erasure_snapshot_wait_s = cfg.erasure_snapshot_wait_s
        svc.webhooks, svc.webhook_dir = cfg.webhooks, data_dir
        svc.leadership = leadership
        if leadership.role == "standby":
            await svc._recover(event_log, store)
            await svc._follow(event_log)
        else:
            await svc._start(event_log, store)
            leadership.start(event_log, svc.step_down)  # renew from now on; a lost lease fences, steps down
        svc.recovery_seconds = time.monotonic() - started
        return svc

    async def _shard_offsets(self) -> list[int]:
        return [c.applied_offset for c in self.cores]

    def _open_log(self, epoch: int | None):
        """The log of ``--log`` again: its writer under ``epoch`` (a standby that took over), or a reader
        (None: an active node that stepped down)."""
        root, cfg = Path(self.cfg.data_dir or "."), self.cfg
        if epoch is None:
            return open_reader(root, cfg.log_url)
        return open_writer(root, cfg.log_url, epoch=epoch, segment_bytes=cfg.segment_bytes, fault_hook=cfg.fault_hook)

    @property
    def _snapshot_store(self):
        return self.store

    def stats(self) -> dict:
        return self.router_stats() | {
            "shard_rows": {i: sum(c.stats()["rows"].values()) for i, c in enumerate(self.cores)},
            "dead_letters": [d for c in self.cores for d in c.dead_letters],
            "log_end_offset": self.event_log.end_offset(),
        }

    # ------------------------------------------------------------ snapshots

    async def _take_snapshot(self) -> float:
        """Copy router and shard states between two cycles (the pause: the loop is held for the
        copies only), then fsync the journals and write the snapshots off-loop."""
        paused = time.monotonic()
        async with self.router.sequencing():
            router_state = (self.router.log_offset, self.router.to_state())
            cuts = [c.snapshot_cut() for c in self.cores]
        pause = time.monotonic() - paused
        await asyncio.to_thread(self._write_snapshots, router_state, cuts)
        return pause

    def _write_snapshots(self, router_state, cuts) -> None:
        if router_state[0] < 0:  # empty log: nothing to snapshot (a store refuses offset -1)
            return
        for _offset, _state, syncs in cuts:  # what each shard's cut named, durable before it is saved
            for sync in syncs:
                sync()
        # A snapshot named N holds the state after every record < N (docs/storage.md).
        self.store.save("router", router_state[0] + 1, router_state[1])
        for i, (offset, state, _syncs) in enumerate(cuts):
            self.store.save(f"shard-{i}", offset + 1, state)
        if self.cfg.prune_log and hasattr(self.event_log, "delete_segments_before"):
            oldest = min([router_state[0]] + [o for o, _s, _y in cuts])
            self.event_log.delete_segments_before(oldest + 1)

    async def close(self) -> None:
        """Drain in-flight batches, snapshot, close the log, release the lock."""
        await self._stop()
        close = getattr(self.event_log, "close", None)
        if close:
            close()
        self.leadership.release()  # another node may take over at once
        for core in self.cores:
            core.close()
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None


def _lock(path: Path) -> int:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise Overloaded(f"Another FlowRank process holds {path}; one writer per data directory.") from None
    return fd

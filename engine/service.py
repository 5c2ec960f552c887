"""The engine service: router + shards + log + snapshots, in one process.

``LocalService`` implements :class:`engine.client.EngineClient` with every
shard an in-process :class:`engine.shard.ShardCore`. It is the embedded
engine (tests, a single-process deployment) and it shares all of its logic
with the Ray cluster client (:mod:`engine.cluster`), which only swaps the
shard transport and the log adapter. Recovery, snapshots and retention
live here and in :mod:`engine.recovery`.
"""

from __future__ import annotations

import asyncio
import fcntl
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from engine.errors import FlowRankError, Overloaded
from engine.log import FileSnapshotStore, InMemoryLog, InMemorySnapshotStore, SegmentedFileLog
from engine.model import (
    DEFAULT_DEDUP_RETENTION,
    DEFAULT_DELTA_RETENTION,
    BoardSpec,
    BoardState,
    Invalidation,
    QuarantineDecision,
    ScoreEvent,
)
from engine.recovery import recover_router, recover_shard
from engine.router import Router, RouterConfig
from engine.shard import ShardCore

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


class InProcessShards:
    """Shard transport whose shards are objects in this process: a call runs
    at submission, so submission order is execution order."""

    def __init__(self, cores: list[ShardCore]):
        self.cores = cores
        self.n = len(cores)

    def apply(self, shard: int, through: int, items: list):
        return _done(lambda: self.cores[shard].apply(through, items))

    def read(self, shard: int, requests: list):
        return _done(lambda: self.cores[shard].read(requests))


def _done(fn):
    fut = asyncio.get_running_loop().create_future()
    try:
        fut.set_result(fn())
    except BaseException as exc:  # surfaces at await, like a remote call would
        fut.set_exception(exc)
    return fut


class DirectLog:
    """LogPort over an EventLog in this process; fsync runs in a thread."""

    def __init__(self, event_log):
        self.event_log = event_log

    async def append(self, records: list) -> int:
        offsets = await asyncio.to_thread(self.event_log.append_batch, records)
        return offsets[0]


class LocalService:
    """EngineClient with every shard in this process."""

    def __init__(self, cfg: ServiceConfig, event_log, store, cores: list[ShardCore], router: Router, lock_fd):
        self.cfg = cfg
        self.event_log = event_log
        self.store = store
        self.cores = cores
        self.router = router
        self._lock_fd = lock_fd
        self._events_since_snapshot = 0
        self._last_snapshot = time.monotonic()
        self._snapshot_task: asyncio.Task | None = None
        self._snapshot_lock = asyncio.Lock()
        self.snapshot_pauses: list[float] = []
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
        if data_dir is None:
            event_log, store = InMemoryLog(), InMemorySnapshotStore()
        else:
            root = Path(data_dir)
            root.mkdir(parents=True, exist_ok=True)
            lock_fd = _lock(root / "LOCK")
            event_log = await asyncio.to_thread(SegmentedFileLog.open, root / "log", segment_bytes=cfg.segment_bytes)
            store = FileSnapshotStore(root / "snapshots")
        cores = [await asyncio.to_thread(recover_shard, i, cfg.n_shards, event_log, store) for i in range(cfg.n_shards)]
        transport = InProcessShards(cores)
        router = Router(transport, DirectLog(event_log), RouterConfig(
            dedup_retention=dedup_retention, delta_retention=delta_retention,
            max_queued_events=cfg.max_queued_events))
        await asyncio.to_thread(recover_router, router, event_log, store)
        await router.sync_versions()
        router.start()
        svc = cls(cfg, event_log, store, cores, router, lock_fd)
        svc.recovery_seconds = time.monotonic() - started
        svc._snapshot_task = asyncio.ensure_future(svc._snapshot_loop())
        return svc

    # --------------------------------------------------------------- writes

    async def create_board(self, spec: BoardSpec):
        return await self.router.create_board(spec)

    async def set_state(self, board_id: str, state: BoardState):
        return await self.router.set_state(board_id, state)

    async def submit(self, events: Sequence[ScoreEvent]):
        results = await self.router.submit(events)
        self._events_since_snapshot += len(events)
        return results

    async def decide(self, decision: QuarantineDecision):
        return await self.router.decide(decision)

    async def invalidate(self, invalidation: Invalidation):
        return await self.router.invalidate(invalidation)

    # ---------------------------------------------------------------- reads

    async def list_boards(self):
        return await self.router.list_boards()

    async def board(self, board_id: str):
        return await self.router.board(board_id)

    async def top(self, board_id: str, offset: int, limit: int, at_version: int | None = None):
        return await self.router.top(board_id, offset, limit, at_version)

    async def player(self, board_id: str, player_id: str):
        return await self.router.player(board_id, player_id)

    async def approximate_player(self, board_id: str, player_id: str):
        return await self.router.approximate_player(board_id, player_id)

    async def around(self, board_id: str, player_id: str, radius: int):
        return await self.router.around(board_id, player_id, radius)

    async def ranked_subset(self, board_id: str, player_ids):
        return await self.router.ranked_subset(board_id, player_ids)

    async def changes(self, board_id: str, since_version: int):
        return await self.router.changes(board_id, since_version)

    async def quarantine(self, board_id: str):
        return await self.router.quarantine(board_id)

    async def history(self, board_id: str, player_id: str):
        return await self.router.history(board_id, player_id)

    async def checksum(self, board_id: str):
        return await self.router.checksum(board_id)

    def subscribe(self, listener):
        return self.router.subscribe(listener)

    def stats(self) -> dict:
        m = self.router.metrics
        return {
            "queue_depth": self.router.queue_depth(),
            "fsync_seconds": list(m["fsync_seconds"]),
            "ingest_to_rank_seconds": list(m["ingest_to_rank_seconds"]),
            "outcomes": dict(m["outcomes"]),
            "storage_errors": m["storage_errors"],
            "shard_rows": {i: sum(c.stats()["rows"].values()) for i, c in enumerate(self.cores)},
            "dead_letters": [d for c in self.cores for d in c.dead_letters],
            "snapshot_pause_seconds": list(self.snapshot_pauses),
            "log_end_offset": self.event_log.end_offset(),
        }

    async def ready(self) -> bool:
        return not self.router._closing

    # ------------------------------------------------------------ snapshots

    async def snapshot(self) -> float:
        """Snapshot the router and every shard; returns the pause in seconds
        (the time ingestion waited: state is copied between two batches)."""
        async with self._snapshot_lock:
            paused = time.monotonic()
            async with self.router.sequencing():
                router_state = (self.router.log_offset, self.router.to_state())
                shard_states = [(c.applied_offset, c.to_state()) for c in self.cores]
            pause = time.monotonic() - paused
            await asyncio.to_thread(self._write_snapshots, router_state, shard_states)
            self.snapshot_pauses.append(pause)
            del self.snapshot_pauses[:-256]
            self._events_since_snapshot = 0
            self._last_snapshot = time.monotonic()
            return pause

    def _write_snapshots(self, router_state, shard_states) -> None:
        self.store.save("router", router_state[0], router_state[1])
        for i, (offset, state) in enumerate(shard_states):
            self.store.save(f"shard-{i}", offset, state)
        if self.cfg.prune_log and hasattr(self.event_log, "delete_segments_before"):
            oldest = min([router_state[0]] + [o for o, _ in shard_states])
            self.event_log.delete_segments_before(oldest + 1)

    async def _snapshot_loop(self) -> None:
        while True:
            await asyncio.sleep(0.5)
            due = (
                self._events_since_snapshot >= self.cfg.snapshot_every_events
                or (self._events_since_snapshot and time.monotonic() - self._last_snapshot >= self.cfg.snapshot_every_seconds)
            )
            if due:
                try:
                    await self.snapshot()
                except Exception:
                    log.exception("periodic snapshot failed; will retry")

    async def close(self) -> None:
        """Drain in-flight batches, snapshot, close the log, release the lock."""
        if self._snapshot_task is not None:
            self._snapshot_task.cancel()
        await self.router.stop()
        try:
            await self.snapshot()
        except FlowRankError:
            pass
        close = getattr(self.event_log, "close", None)
        if close:
            close()
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

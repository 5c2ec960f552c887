"""``RouterClient``: what every router-backed engine shares.

:class:`engine.runtime.local.LocalService` (shards in this process) and
:class:`engine.cluster.ClusterEngine` (shards in Ray actors) differ only in
how they build the router's transport and log, and how they snapshot; the
engine's operations go to :class:`engine.router.router.Router` through the one
forwarder (:func:`engine.router.api.forward`).
"""

from __future__ import annotations

import asyncio
import logging
import tempfile
import time
from typing import Sequence

from engine.runtime.leadership import Leadership
from engine.runtime.standby import Standby
from engine.core.errors import NotLeader, StorageUnavailable
from engine.core.columns import ScoreBatch
from engine.core.histogram import Histogram
from engine.router.api import forward
from engine.runtime.recovery import recover_router
from engine.core.model import ScoreEvent
from engine.router.router import Router
from engine.runtime.erasure import ErasureJob
from engine.runtime.outbox_feed import OutboxFeed, WebhookConfig, open_feed, webhook_stats

log = logging.getLogger("flowrank.service")


@forward(lambda self, name: getattr(self.router, name))
class RouterClient:
    router: Router
    snapshot_every_events: int = 1_000_000
    snapshot_every_seconds: float = 300.0
    webhooks: WebhookConfig | None = None  # --webhook-url and its settings (docs/api.md §16); None: no webhooks
    webhook_dir: str | None = None  # where the outbox and the secret live (the data directory)
    feed: OutboxFeed | None = None
    erasure_job: ErasureJob | None = None
    erasure_deadline_s: float = 3600.0  # --erasure-deadline-s (docs/api.md §17)
    erasure_delay_s: float | None = None  # the job waits this long after a request (None: min(1 s, deadline / 10))
    # how long the job waits for the next periodic snapshot before it takes one itself (None: the snapshot period
    # plus 5 s, at most half the deadline; 0: at once)
    erasure_snapshot_wait_s: float | None = None
    snapshot_offset: int = -1  # every record at or before it is in the newest snapshot
    # this node's role on its log (docs/api.md §19); the file log's node is always active
    leadership: Leadership = Leadership.single()
    standby: Standby | None = None  # following the log as a standby (engine.runtime.standby)
    _snapshot_task: asyncio.Task | None = None

    def _init_snapshots(self) -> None:
        self._events_since_snapshot = 0
        self._last_snapshot = time.monotonic()
        self._snapshot_lock = asyncio.Lock()
        self.snapshot_pauses: list[float] = []
        self.snapshot_pause_histogram = Histogram()
        self._snapshot_task = asyncio.ensure_future(self._snapshot_loop())

    # ---------------------------------------- the engine's API: forwarded to the router (engine.router.api.forward)

    async def submit(self, events: Sequence[ScoreEvent]):
        results = await self.router.submit(events)
        self._events_since_snapshot += len(events)
        return results

    async def submit_columns(self, batch: ScoreBatch):
        result = await self.router.submit_columns(batch)
        self._events_since_snapshot += len(batch)
        return result

    def export(self, board_id: str, page_rows: int = 10_000, ties: bool = False):
        return self.router.export(board_id, page_rows, ties)

    def subscribe(self, listener):
        return self.router.subscribe(listener)

    async def ready(self) -> bool:
        """Writes can be accepted: this node is the active one of its log (docs/api.md §19), not
        draining, and the log made the last batch durable (or its failure is older than a short
        cool-down)."""
        return self.leadership.active and self.router.accepting_writes()

    def cluster_info(self) -> dict:
        """``GET /v1/cluster`` (docs/api.md §19): role, node, epoch, leader, log end, applied, lag."""
        applied = self.router.log_offset + 1
        if self.standby is not None and self.leadership.role == "standby":
            behind, lag_s = self.standby.lag()
            return self.leadership.info(applied + behind, applied, lag_s)
        end = self.event_log.durable_offset() if getattr(self, "event_log", None) is not None else applied
        return self.leadership.info(max(end, applied), applied)

    def router_stats(self) -> dict:
        m = self.router.metrics
        return {
            "queue_depth": self.router.queue_depth(),
            "fsync_seconds": list(m["fsync_seconds"]),
            "ingest_to_rank_seconds": list(m["ingest_to_rank_seconds"]),
            "outcomes": dict(m["outcomes"]),
            "storage_errors": m["storage_errors"],
            "snapshot_pause_seconds": list(self.snapshot_pauses),
            # the exact-rank mirrors beside the router (engine.core.rank_mirror): boards, rows, bytes, reads, builds…
            **{f"rank_mirror_{k}": v for k, v in self.router.fanout.mirror_summary().items()},
            # counted since start, for Prometheus histograms (engine.core.histogram)
            "histograms": {**{k: h.snapshot() for k, h in self.router.histograms.items()},
                           "snapshot_pause_seconds": self.snapshot_pause_histogram.snapshot()},
        } | webhook_stats(self.feed, self.router.registry) | (
            {} if self.erasure_job is None else {"erasures": self.erasure_job.stats()})

    async def refresh_stats(self) -> None:
        """Bring :meth:`stats` up to date before a scrape. Here everything is read live; the Ray
        engine overrides it to ask its shard actors (``shard_rows``, ``dead_letters``)."""

    # ------------------------------------------------------------ lifecycle

    async def _start(self, event_log, store) -> None:
        """The one start sequence of every router-backed engine, once its shards
        have recovered: the router's snapshot and log tail folded in
        (:func:`engine.runtime.recovery.recover_router`), its versions read from the
        shards, then the active node's part (:meth:`_begin_active`)."""
        if self.webhooks is not None:  # before recovery: the log tail's state changes and awards feed the outbox
            await self._open_feed()
        await self._recover(event_log, store)
        await self._begin_active(event_log, store)

    async def _open_feed(self) -> None:
        if self.webhook_dir is None:
            self.webhook_dir = tempfile.mkdtemp(prefix="flowrank-outbox-")
        self.feed = await asyncio.to_thread(open_feed, self.router.registry, self.webhook_dir, self.webhooks,
                                            self.router.control.wall_clock)

    async def _recover(self, event_log, store) -> None:
        """The router's snapshot and the log tail folded in, its versions read from the shards: what a
        standby does at start too (engine.runtime.standby)."""
        await asyncio.to_thread(recover_router, self.router, event_log, store)
        await self.router.sync_versions()

    async def _begin_active(self, event_log, store) -> None:
        """What only the active node of a log runs (at start, or when a standby takes over): the webhook
        feed catching up, the router's tasks, the erasure job, archives a crash left unbuilt built, the
        scheduled moves that fell due while it was down made (before any write), then periodic snapshots."""
        router = self.router
        if self.webhooks is not None and self.feed is None:  # a standby that took over
            await self._open_feed()
        if self.feed is not None:
            registry = router.registry
            if registry.loaded_outbox_safe is not None:  # records the snapshot covered before their put
                await self.feed.catch_up(event_log, registry.loaded_outbox_safe, registry.log_offset)
            self.feed.start()
            await self.feed.delivery.start()
        router.start()
        router.sequencer.standby = None  # a standby that took over: writes are decided from now on
        delay = min(1.0, self.erasure_deadline_s / 10) if self.erasure_delay_s is None else self.erasure_delay_s
        self.erasure_job = ErasureJob(self, event_log, store, delay_s=delay, deadline_s=self.erasure_deadline_s)
        wait = self.erasure_snapshot_wait_s
        self.erasure_job.snapshot_wait_s = (min(self.snapshot_every_seconds + 5.0, self.erasure_deadline_s / 2)
                                            if wait is None else wait)
        self.erasure_job.start()
        await router.finish_awards()
        await router.finish_archiving()
        await router.close_due()
        self._init_snapshots()

    async def _stop(self) -> None:
        """The one stop sequence: no more periodic snapshots, every queued write
        answered, then a last snapshot (a failure only costs replay time)."""
        self._stop_snapshots()
        if self.standby is not None:
            await self.standby.stop()
        if self.erasure_job is not None:
            await self.erasure_job.stop()
        await self.router.stop()
        if self.feed is not None:
            await self.feed.stop()
        try:
            if self.leadership.active:  # a standby's (or a fenced node's) snapshots are not its log's to write
                await self.snapshot()
        except Exception:
            log.exception("final snapshot failed; recovery will replay the log instead")
        if self.feed is not None:
            await self.feed.delivery.stop()
            self.feed.outbox.close()

    # ------------------------------------------------------------ roles on a shared log (docs/api.md §19)

    def _open_log(self, epoch: int | None):
        """The engine's log again: the writer under ``epoch``, or a reader (None). Engines on ``--log``."""
        raise NotImplementedError

    @property
    def _snapshot_store(self):
        raise NotImplementedError

    async def _shard_offsets(self) -> list[int]:
        """The last log offset each shard actor has applied."""
        raise NotImplementedError

    async def _follow(self, reader) -> None:
        """Follow the log as a standby from the lowest offset any part of this node lacks
        (engine.runtime.standby). At a standby's start the shards recovered each to the log's end at
        its own moment while the active went on appending, and the router after them: each part
        skips what it has."""
        start = min([self.router.log_offset, *await self._shard_offsets()]) + 1
        self.standby = Standby(self, reader, self.leadership, self._take_over, start)
        self.standby.start()

    async def _take_over(self, epoch: int) -> None:
        """This standby holds the lease under ``epoch`` and has applied the whole log: the writer, then
        the active node's part, then the lease's renewals."""
        reader = self.event_log
        writer = await asyncio.to_thread(self._open_log, epoch)
        self.router.sequencer.log.event_log = self.event_log = writer
        await asyncio.to_thread(reader.close)
        await self._begin_active(writer, self._snapshot_store)
        self.leadership.start(writer, self.step_down)

    async def step_down(self) -> None:
        """This node lost its log's lease (a takeover while it was paused or cut off): its log is fenced
        already, so nothing more of it can commit. Writes are refused from now on, the active node's
        part stops (queued writes fail), and it follows the log as a standby from what it applied: its
        state is a prefix of the log (a fold only follows a commit)."""
        if self.standby is not None and self.standby.running:
            return
        self.router.sequencer.standby = NotLeader("This node lost its log's lease: writes go to the active node.",
                                                  leader=self.leadership.leader)
        self._stop_snapshots()
        if self.erasure_job is not None:
            await self.erasure_job.stop()
            self.erasure_job = None
        await self.router.stop()
        if self.feed is not None:
            await self.feed.stop()
            await self.feed.delivery.stop()
            self.feed.outbox.close()
            self.feed = None
        writer = self.event_log
        while True:  # the database may be unreachable (a partition): keep trying; reads go on meanwhile
            try:
                reader = await asyncio.to_thread(self._open_log, None)
                break
            except StorageUnavailable as exc:
                log.warning("stepping down: the log cannot be opened for reading yet (%s); trying again", exc)
                await asyncio.sleep(1.0)
        self.router.sequencer.log.event_log = self.event_log = reader
        closing = asyncio.ensure_future(asyncio.to_thread(writer.close))  # its threads may wait on a dead link
        closing.add_done_callback(lambda f: f.exception())
        log.warning("stepped down: following the log as a standby from offset %d", self.router.log_offset + 1)
        await self._follow(reader)

    # ------------------------------------------------------------ snapshots

    async def snapshot(self) -> float:
        """Snapshot router and shards; returns how long ingestion paused."""
        async with self._snapshot_lock:
            covered = self.router.log_offset
            pause = await self._take_snapshot()
            self.snapshot_offset = max(self.snapshot_offset, covered)
            self.snapshot_pauses.append(pause)
            self.snapshot_pause_histogram.observe(pause)
            del self.snapshot_pauses[:-256]
            self._events_since_snapshot = 0
            self._last_snapshot = time.monotonic()
            return pause

    async def snapshot_after(self, offset: int, wait_s: float) -> None:
        """Until a snapshot covers ``offset``: the next periodic one when writes are flowing (for up to
        ``wait_s``), else one taken now (an erasure's job adds no snapshot of its own to a busy service)."""
        deadline = time.monotonic() + wait_s
        while self.snapshot_offset < offset and self._events_since_snapshot and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        if self.snapshot_offset < offset:
            await self.snapshot()

    async def _take_snapshot(self) -> float:
        raise NotImplementedError

    async def _snapshot_loop(self) -> None:
        while True:
            await asyncio.sleep(0.5)
            due = self._events_since_snapshot >= self.snapshot_every_events or (
                self._events_since_snapshot and time.monotonic() - self._last_snapshot >= self.snapshot_every_seconds
            )
            if due:
                try:
                    await self.snapshot()
                except Exception:
                    log.exception("periodic snapshot failed; will retry")

    def _stop_snapshots(self) -> None:
        if self._snapshot_task is not None:
            self._snapshot_task.cancel()

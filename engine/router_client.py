"""``RouterClient``: the EngineClient methods every router-backed engine shares.

:class:`engine.service.LocalService` (shards in this process) and
:class:`engine.cluster.ClusterEngine` (shards in Ray actors) differ only in
how they build the router's transport and log, and how they snapshot; the
public methods forward to :class:`engine.router.Router` here, once.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Sequence

from engine.columns import ScoreBatch
from engine.histogram import Histogram
from engine.model import BoardSpec, BoardState, Invalidation, QuarantineDecision, ScoreEvent
from engine.router import Router

log = logging.getLogger("flowrank.service")


class RouterClient:
    router: Router
    snapshot_every_events: int = 1_000_000
    snapshot_every_seconds: float = 300.0

    def _init_snapshots(self) -> None:
        self._events_since_snapshot = 0
        self._last_snapshot = time.monotonic()
        self._snapshot_lock = asyncio.Lock()
        self.snapshot_pauses: list[float] = []
        self.snapshot_pause_histogram = Histogram()
        self._snapshot_task = asyncio.ensure_future(self._snapshot_loop())

    # --------------------------------------------------------------- writes

    async def create_board(self, spec: BoardSpec):
        return await self.router.create_board(spec)

    async def set_state(self, board_id: str, state: BoardState):
        return await self.router.set_state(board_id, state)

    async def next_season(self, board_id: str, season: str, closes_at: int | None,
                          finalize_after_s: int | None = None):
        return await self.router.next_season(board_id, season, closes_at, finalize_after_s)

    async def submit(self, events: Sequence[ScoreEvent]):
        results = await self.router.submit(events)
        self._events_since_snapshot += len(events)
        return results

    async def submit_columns(self, batch: ScoreBatch):
        result = await self.router.submit_columns(batch)
        self._events_since_snapshot += len(batch)
        return result

    async def decide(self, decision: QuarantineDecision):
        return await self.router.decide(decision)

    async def invalidate(self, invalidation: Invalidation):
        return await self.router.invalidate(invalidation)

    # ---------------------------------------------------------------- reads

    async def list_boards(self):
        return await self.router.list_boards()

    async def board(self, board_id: str):
        return await self.router.board(board_id)

    async def top(self, board_id: str, offset: int, limit: int, at_version: int | None = None, ties: bool = False):
        return await self.router.top(board_id, offset, limit, at_version, ties)

    async def player(self, board_id: str, player_id: str, ties: bool = False):
        return await self.router.player(board_id, player_id, ties)

    async def approximate_player(self, board_id: str, player_id: str):
        return await self.router.approximate_player(board_id, player_id)

    async def around(self, board_id: str, player_id: str, radius: int, ties: bool = False):
        return await self.router.around(board_id, player_id, radius, ties)

    async def ranked_subset(self, board_id: str, player_ids, ties: bool = False):
        return await self.router.ranked_subset(board_id, player_ids, ties)

    async def changes(self, board_id: str, since_version: int | None, limit: int | None = None,
                      cursor: tuple[int, int] | None = None, deltas_only: bool = False, ties: bool = False):
        return await self.router.changes(board_id, since_version, limit, cursor, deltas_only, ties)

    def export(self, board_id: str, page_rows: int = 10_000, ties: bool = False):
        return self.router.export(board_id, page_rows, ties)

    async def quarantine(self, board_id: str):
        return await self.router.quarantine(board_id)

    async def history(self, board_id: str, player_id: str):
        return await self.router.history(board_id, player_id)

    async def checksum(self, board_id: str):
        return await self.router.checksum(board_id)

    def subscribe(self, listener):
        return self.router.subscribe(listener)

    async def ready(self) -> bool:
        """Writes can be accepted: not draining, and the log made the last
        batch durable (or its failure is older than a short cool-down)."""
        return self.router.accepting_writes()

    def router_stats(self) -> dict:
        m = self.router.metrics
        return {
            "queue_depth": self.router.queue_depth(),
            "fsync_seconds": list(m["fsync_seconds"]),
            "ingest_to_rank_seconds": list(m["ingest_to_rank_seconds"]),
            "outcomes": dict(m["outcomes"]),
            "storage_errors": m["storage_errors"],
            "snapshot_pause_seconds": list(self.snapshot_pauses),
            # counted since start, for Prometheus histograms (engine.histogram)
            "histograms": {**{k: h.snapshot() for k, h in self.router.histograms.items()},
                           "snapshot_pause_seconds": self.snapshot_pause_histogram.snapshot()},
        }

    async def refresh_stats(self) -> None:
        """Bring :meth:`stats` up to date before a scrape. Here everything is read live; the Ray
        engine overrides it to ask its shard actors (``shard_rows``, ``dead_letters``)."""

    # ------------------------------------------------------------ snapshots

    async def snapshot(self) -> float:
        """Snapshot router and shards; returns how long ingestion paused."""
        async with self._snapshot_lock:
            pause = await self._take_snapshot()
            self.snapshot_pauses.append(pause)
            self.snapshot_pause_histogram.observe(pause)
            del self.snapshot_pauses[:-256]
            self._events_since_snapshot = 0
            self._last_snapshot = time.monotonic()
            return pause

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

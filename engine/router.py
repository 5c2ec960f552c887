"""The router: one object that fronts every shard actor, made of three parts.

* :mod:`engine.sequencer` (:class:`~engine.sequencer.Sequencer`): ingest
  sequencing. Board-wide admission in log order, the durable append (before
  any acknowledgement), one apply call per shard actor per cycle carrying the
  cycle's log offsets, outcomes and versions assembled in log order, dead
  letters.
* :mod:`engine.fanout` (:class:`~engine.fanout.ReadFanOut`): every board read.
  Requests fan out to the shard actors hosting the board's partitions, in
  consistent cuts, and merge with the comparator (:mod:`engine.ranking`);
  pinned views; archived boards from their archive.
* :mod:`engine.board_control` (:class:`~engine.board_control.BoardControl`):
  the board registry they share, board creation, seasons and state changes,
  the season timer, archiving, and the registry's recovery and snapshots.

They talk to the shard actors (in-process partitions or Ray actors, behind a
:class:`~engine.wire.ShardTransport`) in the named records of
:mod:`engine.records` and the wire types of :mod:`engine.wire`. The
:class:`Router` holds one of each and keeps the public API every caller uses
(service, cluster, engine host, gateway, tests); a read replica
(:mod:`engine.read_replica`) holds only a registry and a fan-out.

Naming: a board has ``spec.shards`` *partitions* (the public field keeps the
name; it counts partitions), each placed on a *shard actor* (an index into the
transport), a process that hosts partitions of many boards.
"""

from __future__ import annotations

import asyncio
import time
from typing import AsyncIterator, Callable, Sequence

from engine import records as R
from engine.board_control import BoardControl, BoardCtl, BoardRegistry, RouterConfig, epoch_ms
from engine.columns import BatchResult, ScoreBatch
from engine.export import Chunk
from engine.fanout import CutLock, ReadFanOut, TurnBatcher
from engine.log.archives import ArchiveStore
from engine.model import (
    BoardInfo,
    BoardSpec,
    BoardState,
    Changes,
    Checksum,
    DecisionResult,
    EventResult,
    HeldEvent,
    HistoryEntry,
    Invalidation,
    InvalidationResult,
    Page,
    PlayerView,
    QuarantineDecision,
    ScoreEvent,
)
from engine.sequencer import LogPort, Sequencer, results_of
from engine.wire import ShardTransport

__all__ = ["BoardCtl", "CutLock", "LogPort", "Router", "RouterConfig", "ShardTransport", "TurnBatcher", "epoch_ms",
           "results_of"]


class Router:
    """The sequencer, the read fan-out and board control over one board registry."""

    def __init__(self, transport: ShardTransport, log_port: LogPort | None, config: RouterConfig | None = None,
                 clock: Callable[[], float] = time.monotonic, archives: ArchiveStore | None = None,
                 wall_clock: Callable[[], int] | None = None):
        self.t = transport
        self.cfg = config or RouterConfig()
        self.registry = BoardRegistry(transport.n, self.cfg)
        self.fanout = ReadFanOut(transport, self.registry, self.cfg, clock)
        self.sequencer = Sequencer(transport, log_port, self.registry, self.fanout.cut, clock)
        self.control = BoardControl(self.registry, self.sequencer, self.fanout, archives, wall_clock)
        self.sequencer.resync = self.control.sync_versions
        self._tasks: list[asyncio.Task] = []

    # The state the parts share, as the router's attributes (callers and tests read them).

    @property
    def boards(self) -> dict[str, BoardCtl]:
        return self.registry.boards

    @property
    def log_offset(self) -> int:
        """The last log offset the router state reflects."""
        return self.registry.log_offset

    @property
    def reads(self) -> TurnBatcher:
        return self.fanout.reads

    @property
    def cut(self) -> CutLock:
        return self.fanout.cut

    @property
    def views(self):
        return self.fanout.views

    @property
    def archives(self) -> ArchiveStore:
        return self.control.archives

    @property
    def drop_barriers(self) -> list:
        return self.control.drop_barriers

    @property
    def listeners(self) -> list:
        return self.sequencer.listeners

    @property
    def hooks(self) -> dict:
        return self.sequencer.hooks

    @property
    def version_hooks(self) -> list:
        return self.sequencer.version_hooks

    @property
    def metrics(self) -> dict:
        return self.sequencer.metrics

    @property
    def histograms(self) -> dict:
        return self.sequencer.histograms

    # ---------------------------------------------------------------- lifecycle

    def start(self) -> None:
        self._tasks = self.sequencer.start() + self.control.start()

    async def drain(self) -> None:
        """Stop taking submissions and wait until every queued one is answered."""
        await self.sequencer.drain()

    async def stop(self) -> None:
        await self.drain()
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def sequencing(self) -> asyncio.Lock:
        """Hold to see router and shard actors between two cycles (snapshots)."""
        return self.sequencer.sequencing()

    def accepting_writes(self, cooldown_s: float = 2.0) -> bool:
        return self.sequencer.accepting_writes(cooldown_s)

    def queue_depth(self) -> int:
        return self.sequencer.queue_depth()

    # ------------------------------------------------------------- recovery

    def fold(self, offset: int, rec) -> None:
        """Replay one log record into router state (recovery; no I/O)."""
        rec = R.parse(rec)
        self.control.fold(offset, rec)
        self.sequencer.fold(rec)

    def to_state(self) -> dict:
        return self.control.to_state()

    def load_state(self, state: dict) -> None:
        self.control.load_state(state)

    async def sync_versions(self) -> None:
        await self.control.sync_versions()

    async def finish_archiving(self) -> None:
        await self.control.finish_archiving()

    # ------------------------------------------------------------------ writes

    async def submit(self, events: Sequence[ScoreEvent]) -> list[EventResult]:
        return await self.sequencer.submit(events)

    async def submit_columns(self, batch: ScoreBatch) -> BatchResult:
        return await self.sequencer.submit_columns(batch)

    async def decide(self, d: QuarantineDecision) -> DecisionResult:
        return await self.sequencer.decide(d)

    async def invalidate(self, inv: Invalidation) -> InvalidationResult:
        return await self.sequencer.invalidate(inv)

    def subscribe(self, listener) -> Callable[[], None]:
        """Call ``listener(board_id, deltas)`` after every cycle that changed a board; returns the unsubscribe."""
        listeners = self.sequencer.listeners
        listeners.append(listener)
        return lambda: listeners.remove(listener) if listener in listeners else None

    # ------------------------------------------------------------ board control

    async def create_board(self, spec: BoardSpec) -> BoardInfo:
        return await self.control.create_board(spec)

    async def next_season(self, board_id: str, season_name: str, closes_at: int | None,
                          finalize_after_s: int | None = None) -> BoardInfo:
        return await self.control.next_season(board_id, season_name, closes_at, finalize_after_s)

    async def set_state(self, board_id: str, state: BoardState) -> BoardInfo:
        return await self.control.set_state(board_id, state)

    async def close_due(self, board_ids: Sequence[str] | None = None) -> int | None:
        return await self.control.close_due(board_ids)

    def wake_season_timer(self) -> None:
        self.control.wake_season_timer()

    # ------------------------------------------------------------------- reads

    async def list_boards(self) -> list[BoardInfo]:
        return await self.fanout.list_boards()

    async def board(self, board_id: str) -> BoardInfo:
        return await self.fanout.board(board_id)

    async def top(self, board_id: str, offset: int, limit: int, at_version: int | None = None,
                  ties: bool = False) -> Page:
        return await self.fanout.top(board_id, offset, limit, at_version, ties)

    async def player(self, board_id: str, player_id: str, ties: bool = False) -> PlayerView:
        return await self.fanout.player(board_id, player_id, ties)

    async def approximate_player(self, board_id: str, player_id: str) -> PlayerView:
        return await self.fanout.approximate_player(board_id, player_id)

    async def around(self, board_id: str, player_id: str, radius: int, ties: bool = False) -> Page:
        return await self.fanout.around(board_id, player_id, radius, ties)

    async def ranked_subset(self, board_id: str, player_ids: Sequence[str], ties: bool = False) -> Page:
        return await self.fanout.ranked_subset(board_id, player_ids, ties)

    async def changes(self, board_id: str, since_version: int | None, limit: int | None = None,
                      cursor: tuple[int, int] | None = None, deltas_only: bool = False,
                      ties: bool = False) -> Changes:
        return await self.fanout.changes(board_id, since_version, limit, cursor, deltas_only, ties)

    def export(self, board_id: str, page_rows: int = 10_000, ties: bool = False) -> AsyncIterator[Chunk]:
        return self.fanout.export(board_id, page_rows, ties)

    async def quarantine(self, board_id: str) -> list[HeldEvent]:
        return await self.fanout.quarantine(board_id)

    async def history(self, board_id: str, player_id: str) -> list[HistoryEntry]:
        return await self.fanout.history(board_id, player_id)

    async def checksum(self, board_id: str) -> Checksum:
        return await self.fanout.checksum(board_id)

"""The router: one object that fronts every shard actor, made of three parts.

* :mod:`engine.router.ingest` (:class:`~engine.router.ingest.Sequencer`): ingest
  sequencing. Each submission decided in log order (:mod:`engine.router.decide`,
  pure), the durable append (before any acknowledgement), each record folded
  into the registry (:meth:`engine.router.registry.BoardRegistry.apply`, the same
  fold recovery runs), one apply call per shard actor per cycle carrying the
  cycle's log offsets, outcomes and versions assembled in log order, dead
  letters.
* :mod:`engine.router.reads` (:class:`~engine.router.reads.ReadFanOut`): every board read.
  Requests fan out to the shard actors hosting the board's partitions, in
  consistent cuts, and merge with the comparator (:mod:`engine.core.ranking`);
  pinned views; archived boards from their archive.
* :mod:`engine.router.control` (:class:`~engine.router.control.BoardControl`):
  board creation, seasons and state changes, the season timer, archiving, and
  the registry's snapshots.

All three share one :mod:`engine.router.registry` (boards, their admission state,
the cut lock), which none of them owns.

They talk to the shard actors (in-process partitions or Ray actors, behind a
:class:`~engine.core.wire.ShardTransport`) in the named records of
:mod:`engine.core.records` and the wire types of :mod:`engine.core.wire`. The
:class:`Router` holds one of each and keeps the public API every caller uses
(service, cluster, engine host, gateway, tests); a read replica
(:mod:`engine.runtime.replica`) holds only a registry and a fan-out.

Naming: a board has ``spec.shards`` *partitions* (the public field keeps the
name; it counts partitions), each placed on a *shard actor* (an index into the
transport), a process that hosts partitions of many boards.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from typing import Callable

from engine.core import records as R
from engine.core import wire as W
from engine.core.model import Delta
from engine.log.framing import unpack_payload
from engine.router.control import BoardControl, epoch_ms
from engine.router.erasures import Erasures
from engine.router.api import FORWARDED
from engine.router.reads import ReadFanOut, TurnBatcher
from engine.router.registry import BoardCtl, BoardRegistry, CutLock, RouterConfig
from engine.log.archives import ArchiveStore
from engine.router.ingest import LogPort, Sequencer, results_of
from engine.core.wire import ShardTransport

log = logging.getLogger("flowrank.router")

__all__ = ["BoardCtl", "CutLock", "LogPort", "Router", "RouterConfig", "ShardTransport", "TurnBatcher", "epoch_ms",
           "results_of"]


class Router:
    """The sequencer, the read fan-out and board control over one board registry.

    Every public method is one of the parts' own (bound here), and the state
    the parts share is reachable as the router's attributes."""

    def __init__(self, transport: ShardTransport, log_port: LogPort | None, config: RouterConfig | None = None,
                 clock: Callable[[], float] = time.monotonic, archives: ArchiveStore | None = None,
                 wall_clock: Callable[[], int] | None = None):
        self.t = transport
        self.cfg = config or RouterConfig()
        self.registry = BoardRegistry(transport.n, self.cfg)
        self.fanout = fan = ReadFanOut(transport, self.registry, self.cfg, clock)
        self.sequencer = seq = Sequencer(transport, log_port, self.registry, fan.cut, clock)
        self.control = ctl = BoardControl(self.registry, seq, fan, archives, wall_clock)
        seq.resync = ctl.sync_versions
        self.erasures = ers = Erasures(self.registry, seq, fan, lambda: ctl.archives, lambda: ctl.wall_clock(),
                                       ctl.ensure_helper)
        seq.erase_hooks.append(fan.forget_views)
        seq.version_hooks.append(fan.tend_mirrors)  # mirrors follow each cycle's changes before its acks
        # one wall clock: the season timer's, decide's and the reads' (series windows)
        seq.wall_clock = fan.wall_clock = lambda: ctl.wall_clock()
        self._tasks: list[asyncio.Task] = []

        # Shared state (the same objects the parts hold).
        self.boards: dict[str, BoardCtl] = self.registry.boards
        self.reads, self.cut, self.views = fan.reads, fan.cut, fan.views
        self.archives, self.drop_barriers = ctl.archives, ctl.drop_barriers
        self.listeners, self.hooks, self.version_hooks = seq.listeners, seq.hooks, seq.version_hooks
        self.metrics, self.histograms = seq.metrics, seq.histograms

        # The engine's API (engine.router.api.FORWARDED): each operation is the method of that name of the
        # part that owns it; the export stream too.
        for name in (*FORWARDED, "export"):
            setattr(self, name, next(getattr(p, name) for p in (seq, ctl, fan, ers) if hasattr(p, name)))
        # The sequencer's state; board control's schedule and recovery.
        self.sequencing, self.accepting_writes, self.queue_depth = seq.sequencing, seq.accepting_writes, seq.queue_depth
        self.close_due, self.wake_season_timer = ctl.close_due, ctl.wake_season_timer
        self.to_state, self.load_state, self.sync_versions = ctl.to_state, ctl.load_state, ctl.sync_versions
        self.finish_archiving, self.finish_awards = ctl.finish_archiving, ctl.finish_awards

    @property
    def log_offset(self) -> int:
        """The last log offset the router state reflects."""
        return self.registry.log_offset

    def start(self) -> None:
        self._tasks = self.sequencer.start() + self.control.start()

    async def drain(self) -> None:
        """Stop taking submissions and wait until every queued one is answered."""
        await self.sequencer.drain()

    async def stop(self) -> None:
        await self.drain()
        tasks = self._tasks + ([self.control.keeping] if self.control.keeping is not None else [])
        tasks += list(self.fanout._mirror_builds.values())
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self.control.close()

    async def follow(self, items: list[tuple[int, bytes]]) -> int:
        """A standby's apply of records the active node logged (docs/api.md §19; ``items``: ``(offset,
        payload)`` as the log holds them, in order, from the lowest offset any part still lacks): each
        folded into the registry (unless it has it already)
        as recovery folds it, sent to its shard actors as the sequencer sends a durable cycle, then the
        versions of the boards they touched read back from the shards. Reads see all of it or none (the
        cut's write side). Returns the last offset applied."""
        async with self.sequencing():
            per_actor: dict[int, list] = defaultdict(list)
            touched: set[str] = set()
            for offset, payload in items:
                rec = unpack_payload(payload)
                R.check_kind(offset, rec)  # an unknown kind stops the standby instead of being skipped
                parsed = R.parse(rec, offset)
                if offset > self.registry.log_offset:  # (a shard behind the router gets it too; each skips
                    self.registry.apply(offset, parsed)  # what it applied: ShardCore.apply)
                for a in self.sequencer._targets(parsed):
                    per_actor[a].append(W.ApplyItem(offset, payload, False))
                touched.update(b for b in R.boards_of(parsed) if b in self.boards)
            through = items[-1][0]
            await self.cut.acquire_write()
            try:
                futures = [self.t.apply(a, through, per_actor.get(a, [])) for a in range(self.t.n)]
            finally:
                await self.cut.release_write()
            for f in futures:
                await f
            await self.control.sync_versions(touched)
            for board_id in sorted(touched):  # live streams: the board moved on (its row changes are not known here)
                ctl = self.boards.get(board_id)
                if ctl is None:
                    continue
                for listener in list(self.listeners):
                    try:
                        listener(board_id, [Delta(ctl.version, ())])
                    except Exception:
                        log.exception("delta listener failed")
        return through

    def fold(self, offset: int, rec) -> None:
        """Replay one log record into router state (recovery; no I/O): the
        registry's one fold, the same the sequencer applies each durable record with."""
        self.registry.apply(offset, R.parse(rec, offset))

    def subscribe(self, listener) -> Callable[[], None]:
        """Call ``listener(board_id, deltas)`` after every cycle that changed a board; returns the unsubscribe."""
        listeners = self.sequencer.listeners
        listeners.append(listener)
        return lambda: listeners.remove(listener) if listener in listeners else None

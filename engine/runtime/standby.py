"""A hot standby (docs/api.md §19): a node that follows its log and takes over when the lease frees.

``flowrank serve --log postgresql://… --standby`` recovers as any node does (snapshot + log), then
follows: every record the active node commits is read from the log (a poll of the committed end
every ``POLL_S`` while idle) and applied through :meth:`engine.router.router.Router.follow`: the
registry's fold (the same as recovery) and the shards' apply (the same as a live cycle), so its
reads answer at the version it has applied. Writes are refused before anything is decided
(``503 NOT_LEADER`` naming the active node: the sequencer's ``standby``).

Every ``TRY_EVERY_S`` it asks for the lease (:meth:`engine.log.pg_lease.Lease.try_acquire`: only
once the active has not renewed it for ``--lease-s``). Once it holds it, with an epoch one higher
(the old active's appends are fenced from then on), it reads the log to its end (nothing more can
be appended under the old epoch), opens the log's writer under the new epoch, and begins as the
active node (:meth:`engine.runtime.base.RouterClient._begin_active`): from the same offsets, versions
and checksums.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from engine.core.errors import NotLeader

log = logging.getLogger("flowrank.cluster")

POLL_S = 0.02  # how often an idle standby asks the log for new records
CHUNK = 256  # records applied at once (the reads of this process wait at most one chunk's apply)
TRY_EVERY_S = 0.25  # how often it asks for the lease


class Standby:
    """The follow loop of one standby node. ``engine``: the RouterClient whose router and shards it
    feeds; ``reader``: the log read-only (``read_payloads``, ``durable_offset``); ``begin_active``:
    ``await begin_active(epoch)`` opens the writer and starts the active node's part."""

    def __init__(self, engine, reader, leadership, begin_active: Callable[[int], Awaitable[None]], start: int):
        self.engine = engine
        self.next = start  # the next offset to apply: the lowest any part (router, shard) lacks
        self.reader = reader
        self.leadership = leadership
        self.begin_active = begin_active
        self.applied_at = time.monotonic()  # when it last found itself caught up
        self.caught_up = False
        self.records = 0
        self.log_end = 0  # the log's committed end, as last read (by the follow loop's thread)
        self.failing = False  # the last read of the log failed: how far behind is not known
        self._task: asyncio.Task | None = None
        self._stopping = False

    def start(self) -> None:
        self.refuse_writes()
        self._task = asyncio.ensure_future(self._run())

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def refuse_writes(self) -> None:
        leader = self.leadership.leader
        self.engine.router.sequencer.standby = NotLeader(
            "This node is a standby of its log: writes go to the active node" + (f" ({leader})." if leader else "."),
            leader=leader)

    async def _run(self) -> None:
        tried = 0.0
        while not self._stopping:
            try:
                n = await self.step()
                if time.monotonic() - tried >= TRY_EVERY_S:
                    tried = time.monotonic()
                    epoch = await asyncio.to_thread(self.leadership.try_take_over)
                    if epoch is not None:
                        await self._take_over(epoch)
                        return
                    self.refuse_writes()  # the leader may have changed
                if not n:
                    await asyncio.sleep(POLL_S)
            except asyncio.CancelledError:
                raise
            except Exception:
                self.failing = True
                log.exception("standby: following the log failed; trying again")
                await asyncio.sleep(1.0)

    async def step(self) -> int:
        """Apply the next chunk of committed records; how many (0: caught up)."""
        start = self.next
        items = await asyncio.to_thread(self.reader.read_payloads, start, CHUNK)
        self.failing = False
        if not items:
            self.caught_up, self.applied_at, self.log_end = True, time.monotonic(), start
            return 0
        self.log_end = max(self.log_end, items[-1][0] + (2 if len(items) == CHUNK else 1))  # full: more behind it
        if items[0][0] != start:
            raise RuntimeError(f"standby: the log answered offset {items[0][0]} for {start}")
        self.next = await self.engine.router.follow(items) + 1
        self.records += len(items)
        return len(items)

    async def _take_over(self, epoch: int) -> None:
        while await self.step():  # every record of the old epoch: none can be appended any more
            pass
        log.warning("standby: took the log over at epoch %d, offset %d", epoch, self.engine.router.log_offset)
        await self.begin_active(epoch)  # writes are taken once the router runs (RouterClient._begin_active)

    def lag(self) -> tuple[int, float | None]:
        """``(records, seconds)`` behind the log's committed end as the follow loop last read it (no I/O:
        ``GET /v1/cluster`` and the metrics answer from it while the database is away)."""
        behind = max(0, self.log_end - self.next)
        if self.failing:  # the log is out of reach: behind by at least the time since it was last caught up
            return max(behind, 1), time.monotonic() - self.applied_at
        return behind, (0.0 if behind == 0 else time.monotonic() - self.applied_at)

    async def stop(self) -> None:
        self._stopping = True
        if self._task is not None and not self._task.done():
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass

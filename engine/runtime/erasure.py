"""The erasure job: forgetting on disk (docs/api.md §17, docs/storage.md "Erasure").

An erasure's ``X`` record made every process forget the player in memory, and the shard actors zeroed
the player's event ids and metadata in their journal files as they applied it (``Partition.erase``,
``Journal.scrub``). This job, running in the
engine's own process beside the router, does the rest for every pending erasure at once, step by step;
each step is idempotent, so a crash at any point is finished by the next start (the erasures are still
pending: their ``Z`` record is the last step):

1. ``journals``: every shard actor rewrites the journal run files that still hold the erased events'
   hashes (``SCRUB``: each run once for the whole burst).
2. ``archives``: every archive holding an erased player is rewritten without them.
3. ``outbox``: webhook messages naming an erased player are blanked (and never sent).
4. ``snapshot``: a snapshot of the router and every shard actor taken after the ``X`` records applied:
   the next periodic one while writes flow (the job adds no snapshot pause of its own to a busy service;
   it waits at most the snapshot period plus 5 s, and at most half the deadline), else one taken now.
5. ``snapshots``: every snapshot taken at or before the last ``X`` record is deleted.
6. ``log``: the log before each ``X`` record is rewritten with pseudonyms (:class:`engine.core.erasure.LogEraser`,
   ``rewrite`` of the log: same offsets, one atomic swap of the segments).
7. ``complete``: a ``Z`` record per erasure; the boards' ``ERASED`` deltas are no longer served.

The job starts once no request came for ``delay_s`` (so a burst of erasures shares one pass over the log),
at most ``gather_s`` (five minutes, or a quarter of the deadline) after the first of them, and always well
before ``deadline_s`` has passed since the oldest pending request.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import time
from typing import Callable

from engine.core import records as R
from engine.core import wire as W
from engine.core.erasure import ErasureEntry, LogEraser

log = logging.getLogger("flowrank.erasure")

STEPS = ("journals", "archives", "outbox", "snapshot", "snapshots", "log", "complete")


class ErasureJob:
    def __init__(self, client, event_log, store, delay_s: float = 1.0, deadline_s: float = 3600.0) -> None:
        self.client = client
        self.router = client.router
        self.event_log = event_log
        self.store = store
        self.delay_s = delay_s
        self.deadline_s = deadline_s
        self.gather_s = min(300.0, deadline_s / 4)  # the longest a burst is gathered before a run starts
        self.snapshot_wait_s = 0.0  # how long the snapshot step waits for a periodic snapshot (set by the client)
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None
        self.running = False
        self.runs = 0
        self.last_seconds = 0.0
        self.bytes_rewritten = 0
        # test seam: called with each step's name before it runs (raise to simulate a crash there)
        self.fault: Callable[[str], None] | None = None
        # the last run's steps: name -> [started (epoch s), seconds] (metrics: where a run's time goes)
        self.steps: dict[str, list[float]] = {}
        self._step_at: tuple[str, float, float] | None = None
        self.router.erasures.kick = self.kick

    def kick(self) -> None:
        self._wake.set()

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._loop())
        if self.router.registry.erasures.pending():
            self.kick()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def _loop(self) -> None:
        while True:
            await self._wake.wait()
            first = time.monotonic()
            while True:  # a burst of requests shares one run: wait until none came for delay_s (at most gather_s)
                self._wake.clear()
                await asyncio.sleep(self.delay_s)
                if not self._wake.is_set() or time.monotonic() - first >= self.gather_s:
                    break
            try:
                await self.run()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("erasure job failed; it runs again in a moment")
                await asyncio.sleep(min(5.0, self.delay_s * 5 + 0.5))
                self.kick()

    async def run(self) -> int:
        """Forget every pending erasure on disk; how many it completed."""
        pending = self.router.registry.erasures.pending()
        if not pending:
            return 0
        started = time.monotonic()
        self.running = True
        self.steps = {}
        try:
            await self._run(pending)
        finally:
            self._step(None)
            self.running = False
        self.runs += 1
        self.last_seconds = time.monotonic() - started
        return len(pending)

    def _step(self, name: str | None) -> None:
        """The step ``name`` begins (None: the run ends): the one before it is timed."""
        now, wall = time.monotonic(), time.time()
        if self._step_at is not None:
            prev, t0, w0 = self._step_at
            self.steps[prev] = [w0, now - t0]
        self._step_at = None if name is None else (name, now, wall)
        if name is not None and self.fault is not None:
            self.fault(name)

    async def _run(self, pending: list[ErasureEntry]) -> None:
        xrecs = await asyncio.to_thread(self._x_records, pending)
        players = [r.player_id for _, r in xrecs if r.player_id is not None]
        boards = sorted({b[0] for _, r in xrecs for b in r.boards})
        last = max(e.offset for e in pending)
        self._step("journals")
        for a in range(self.router.t.n):  # the journal runs still holding erased events' hashes
            await self.router.fanout.reads.ask(a, W.Drop(W.SCRUB, ""))
        self._step("archives")
        if players:
            await self.router.erasures.rewrite_archives(players)
        self._step("outbox")
        feed = getattr(self.client, "feed", None)
        if feed is not None and players:
            await asyncio.to_thread(feed.outbox.scrub, players)
        self._step("snapshot")
        await self.client.snapshot_after(last, self.snapshot_wait_s)
        self._step("snapshots")
        await asyncio.to_thread(self.store.delete_through, last)
        self._step("log")
        plain = [(o, r) for o, r in xrecs if r.player_id is not None]
        if plain:
            stats = await asyncio.to_thread(self._rewrite_log, plain)
            self.bytes_rewritten += stats.bytes_written
        self._step("complete")
        now = self.router.control.wall_clock()
        for e in pending:
            await self.router.sequencer.erased(R.ErasureDoneRecord(R.ERASED, e.erasure_id, now))
        for board_id in boards:  # the ERASED deltas named the players: no longer served
            ctl = self.router.boards.get(board_id)
            if ctl is not None:
                ctl.ring.reset(ctl.version)
                self.router.fanout.forget_views(board_id)

    def _x_records(self, pending: list[ErasureEntry]) -> list[tuple[int, R.ErasureRecord]]:
        out = []
        for e in pending:
            for offset, rec in self.event_log.read_from(e.offset, 1):
                if offset == e.offset:
                    p = R.parse(rec, offset)
                    if isinstance(p, R.ErasureRecord):
                        out.append((offset, p))
                break
        return out

    def _rewrite_log(self, plain: list[tuple[int, R.ErasureRecord]]):
        remote = getattr(self.event_log, "erase_log", None)  # the Ray log actor runs it next to the log
        return remote(plain) if remote is not None else erase_log(self.event_log, plain)

    def stats(self) -> dict:
        """What /metrics shows: pending erasures and the oldest one's age (seconds, by the wall clock)."""
        table = self.router.registry.erasures
        oldest = table.oldest_pending()
        now = self.router.control.wall_clock()
        return {"pending": len(table.pending()), "complete": len(table) - len(table.pending()),
                "oldest_pending_age_seconds": 0.0 if oldest is None else max(0.0, (now - oldest.requested_at) / 1000),
                "runs": self.runs, "last_run_seconds": self.last_seconds, "bytes_rewritten": self.bytes_rewritten,
                "steps": {k: list(v) for k, v in self.steps.items()}}


def erase_log(event_log, plain: list[tuple[int, R.ErasureRecord]]):
    """Rewrite the log before the ``X`` records ``plain`` (offset, record as logged, with its player id):
    one pass collecting the players' event ids, then the log's atomic ``rewrite``. Its RewriteStats. Runs at
    the lowest CPU priority (this thread only): appends, applies and reads of the same processes go first."""
    with background_priority():
        eraser = LogEraser(plain)
        pace = DutyCycle()
        for offset, rec in event_log.read_from(event_log.start_offset(), chunk_records=64):
            if offset > eraser.last:
                break
            eraser.collect(offset, rec)
            pace.tick()

        def rewrite(offset: int, rec):
            pace.tick()
            return eraser.rewrite(offset, rec)

        return event_log.rewrite(eraser.last + 1, rewrite)


class DutyCycle:
    """Keeps a loop to at most ``share`` of one core: after each ``slice_s`` of work it sleeps for as long as
    the rest of the cycle (a sleep gives up the GIL too, so the process's other threads, the log's appends,
    never wait behind a long stretch of this one)."""

    def __init__(self, share: float = 0.5, slice_s: float = 0.01) -> None:
        self.rest = slice_s * (1 - share) / share
        self.slice_s = slice_s
        self.since = time.monotonic()

    def tick(self) -> None:
        if time.monotonic() - self.since >= self.slice_s:
            time.sleep(self.rest)
            self.since = time.monotonic()


@contextlib.contextmanager
def background_priority(nice: int = 19):
    """This OS thread at ``nice`` for the block (Linux: a thread's own niceness), then back where it was
    (when the process may raise its priority again; else the thread stays nice, which only slows it)."""
    tid = threading.get_native_id()
    try:
        before = os.getpriority(os.PRIO_PROCESS, tid)
        os.setpriority(os.PRIO_PROCESS, tid, nice)
    except (AttributeError, OSError):  # not Linux, or not allowed: run as is
        yield
        return
    try:
        yield
    finally:
        try:
            os.setpriority(os.PRIO_PROCESS, tid, before)
        except OSError:
            log.warning("could not restore the priority of thread %d after an erasure's log rewrite", tid)

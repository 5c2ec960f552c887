"""The webhook feed: board state changes and awards from the log into the outbox (docs/api.md §16, "Webhooks").

The router's one fold (:meth:`engine.router.registry.BoardRegistry.apply`)
calls :meth:`OutboxFeed.note` for every ``T`` (state) and ``A`` (awards)
record it folds, live and in recovery alike. The feed turns each into its
messages (:mod:`engine.core.webhooks`) and puts them in the
:class:`engine.log.outbox.Outbox` (one durable put per record, off the event
loop, in log order), then wakes the :class:`engine.runtime.webhooks.WebhookDelivery`.
A put is idempotent per log offset, so a record folded again after a
restart is put once.

What survives a crash: the router snapshot keeps :meth:`OutboxFeed.safe_offset`
(every ``T`` / ``A`` record up to it is in the outbox); a start folds the log
tail after the snapshot through the same ``note``, and
:meth:`OutboxFeed.catch_up` reads the records between the two (usually none).

Awards logged while no ``--webhook-url`` was set (docs/api.md §18, last
bullet): :meth:`OutboxFeed.start` finds, in the boards' award tables, every
``A`` part after the outbox's covered offset that no put holds and queues it
(its messages built from the table, created then: the give-up counts from
when a URL was set), so they are delivered once one is set. State changes of
that time are not sent (they are long past). The queue is kept in log order,
so that each put's log offset is above the last one's.

A message's ``version``: for an award, the board version of the cut the
awards were computed from (the ``A`` record's); for a state change, the
board's version when the feed puts it (the cycle that logged it has been
applied by then: a state record changes no version itself).
"""

from __future__ import annotations

import asyncio
import json
import logging
import multiprocessing
import threading
from collections import deque
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Callable, NamedTuple

import numpy as np

from engine.core import records as R
from engine.core import webhooks as wh
from engine.core.league import cohort_id
from engine.log.outbox import Outbox, encode_award_put
from engine.router.registry import BoardRegistry
from engine.runtime.webhooks import WebhookDelivery, epoch_ms, load_or_create_secret

log = logging.getLogger("flowrank.webhooks")

FEED_KINDS = (R.STATE, R.AWARDS)


class WebhookConfig(NamedTuple):
    """``--webhook-url``, ``--webhook-secret-file`` (None: ``<data-dir>/webhook_secret``, or with a database
    ``log_url`` the log's shared secret: docs/api.md §19), ``--webhook-give-up-s``."""

    url: str
    secret_file: str | None = None
    give_up_s: float = float(wh.DEFAULT_GIVE_UP_S)
    log_url: str | None = None


class OutboxFeed:
    """Puts the messages of folded ``T`` / ``A`` records into the outbox, in log order (see the module doc)."""

    def __init__(self, registry: BoardRegistry, outbox: Outbox, wall_clock: Callable[[], int] = epoch_ms):
        self.registry = registry
        self.outbox = outbox
        self.delivery: DeliveryThread | None = None
        self.wall_clock = wall_clock
        self._queue: deque[tuple[int, object]] = deque()
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._task: asyncio.Task | None = None
        self._pool: ProcessPoolExecutor | None = None  # builds the messages of A records (one process, on demand)
        self._pool_lock = threading.Lock()
        self.errors = 0

    # --------------------------------------------------------------- the fold's side

    def note(self, offset: int, rec) -> None:
        """A ``T`` or ``A`` record was folded at ``offset``: queue its put (nothing waits for it here)."""
        if offset <= self.outbox.covered_offset:
            return
        if rec.kind == R.STATE and rec.state == "FROZEN" and self._task is not None:
            ctl = self.registry.boards.get(rec.board_id)
            if ctl is not None and ctl.awards is not None:
                self.prepare()
        self._queue.append((offset, rec))
        self._idle.clear()
        self._wake.set()

    def safe_offset(self) -> int:
        """Every ``T`` / ``A`` record at or below this log offset is in the outbox (what a snapshot keeps)."""
        if self._queue:
            return self._queue[0][0] - 1
        return self.registry.log_offset

    # --------------------------------------------------------------- the task

    def start(self) -> None:
        if self._task is None:
            self._backfill()
            self._task = asyncio.ensure_future(self._run())
            if any(ctl.awards is not None for ctl in self.registry.boards.values()):
                self.prepare()

    def prepare(self) -> None:
        """Start the helper process that builds award messages now, in the background (a board with
        prizes exists or froze: its awards may come), so that no put waits for it."""
        if self._pool is None:
            asyncio.ensure_future(asyncio.to_thread(self._helper))

    async def stop(self) -> None:
        await self.drain()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        if self._pool is not None:
            await asyncio.to_thread(self._pool.shutdown)
            self._pool = None

    async def drain(self) -> None:
        """Wait until every queued record is put (or failed)."""
        if self._task is not None:
            await self._idle.wait()

    async def _run(self) -> None:
        while True:
            if not self._queue:
                self._idle.set()
                self._wake.clear()
                await self._wake.wait()
                continue
            offset, rec = self._queue[0]
            try:  # the bodies are built off the event loop too (an A record's part makes 50,000 of them)
                await asyncio.to_thread(self._put, offset, rec)
            except Exception:
                self.errors += 1
                log.exception("putting the webhook messages of log offset %d in the outbox failed; retrying", offset)
                await asyncio.sleep(1.0)
                continue
            self._queue.popleft()
            if self.delivery is not None:
                self.delivery.wake()

    def _backfill(self) -> None:
        """Queue the award parts no put holds (see the module doc), then order the queue by log offset
        (catch_up's records come after the tail's). ``O(boards + award parts)``, no I/O."""
        covered = self.outbox.covered_offset
        queued = {o for o, _ in self._queue}
        for board_id, ctl in self.registry.boards.items():
            table = ctl.awards
            if table is None:
                continue
            for k, offset in enumerate(table.offsets):
                if offset > covered and offset not in queued:
                    self._queue.append((offset, _TablePart(board_id, k)))
        if self._queue:
            self._queue = deque(sorted(dict(self._queue).items(), key=lambda item: item[0]))
            self._idle.clear()
            self._wake.set()

    def _put(self, offset: int, rec) -> None:
        if isinstance(rec, _TablePart):
            self._put_table_part(offset, rec)
            return
        rec = R.parse(rec)
        if rec.kind != R.AWARDS or offset <= self.outbox.covered_offset:
            self.outbox.put(offset, self.messages(rec))
            return
        # An A part's 50,000 bodies and frames are built in a helper process: built here, they would hold
        # this interpreter's lock for ~0.3 s per part, and the event loop's writes and reads would wait for it.
        encoded = self._helper().submit(encode_award_put, offset, *self._award_columns(rec)).result()
        self.outbox.put_encoded(offset, encoded)

    def _helper(self) -> ProcessPoolExecutor:
        with self._pool_lock:
            if self._pool is None:
                pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
                pool.submit(abs, 0).result()  # started and answering
                self._pool = pool
            return self._pool

    def _put_table_part(self, offset: int, part: "_TablePart") -> None:
        """Put the messages of award part ``part.k`` of a board as its table holds it. An erased player's
        award (docs/api.md §17) keeps its place as a blank message, failed at once (never sent)."""
        if offset <= self.outbox.covered_offset:
            self.outbox.put(offset, [])
            return
        table = self.registry.boards[part.board_id].awards
        assert table is not None
        lo = table.firsts[part.k]
        hi = table.firsts[part.k + 1] if part.k + 1 < len(table.firsts) else len(table)
        rewards = [json.loads(p.reward) for p in table.prizes]
        now = self.wall_clock()
        messages, erased = [], []
        for i in range(lo, hi):
            prize = int(table.prize[i])
            if prize < 0:
                erased.append(i - lo)
                messages.append(wh.Message(f"award/{part.board_id}/x", b" ", now))
                continue
            tier = int(table.tiers[i])
            messages.append(wh.award_message(part.board_id, table.players.id_of(i), int(table.ranks[i]),
                                             cohort_id(tier, int(table.numbers[i])) if tier else None,
                                             rewards[prize], table.version, now))
        first = self.outbox.put(offset, messages)
        if erased:
            self.outbox.set_status(np.asarray(erased, np.int64) + first, wh.FAILED, 0)

    async def catch_up(self, event_log, after: int, until: int) -> None:
        """Put the ``T`` / ``A`` records in ``(after, until]`` (records a snapshot covered before their put)."""
        if until <= after:
            return

        def gap() -> list:
            found = []
            for o, r in event_log.read_from(after + 1):
                if o > until:  # the tail after it was folded (and noted) by recovery
                    break
                if r and r[0] in FEED_KINDS:
                    found.append((o, r))
            return found

        for offset, raw in await asyncio.to_thread(gap):
            self.note(offset, R.parse(raw, offset))

    # --------------------------------------------------------------- messages

    def messages(self, rec) -> list:
        """The messages of one record (pure of I/O; reads the registry for a state change's version)."""
        rec = R.parse(rec)
        if rec.kind == R.STATE:
            ctl = self.registry.boards.get(rec.board_id)
            return [wh.state_message(rec.board_id, rec.state, 0 if ctl is None else ctl.version, self.wall_clock())]
        return wh.award_messages(*self._award_columns(rec))

    def _award_columns(self, rec) -> tuple:
        """An ``A`` record as :func:`engine.core.webhooks.award_messages` takes it (created now)."""
        ctl = self.registry.boards.get(rec.board_id)
        prizes = () if ctl is None else ctl.spec.prizes
        tiers = np.frombuffer(rec.tiers, np.int8).tolist()
        numbers = np.frombuffer(rec.numbers, "<i4").tolist()
        return (rec.board_id, rec.version, [json.loads(p.reward) for p in prizes], list(rec.player_ids),
                np.frombuffer(rec.ranks, "<i8").tolist(), [cohort_id(t, n) if t else None for t, n in zip(tiers, numbers)],
                np.frombuffer(rec.prizes, "<i2").tolist(), self.wall_clock())

    def delivery_of(self, board_id: str, places: list) -> list:
        """Per award ``(log offset of its A record, index in it)``: ``(delivery, attempts)`` as the outbox holds them."""
        seqs = []
        for offset, k in places:
            first = self.outbox.first_seq(offset)
            seqs.append(-1 if first is None else first + k)
        got = np.asarray(seqs, np.int64)
        known = got >= 0
        out = [("pending", 0)] * len(seqs)
        if known.any():
            statuses, attempts = self.outbox.status(got[known])
            for i, s, a in zip(np.flatnonzero(known).tolist(), statuses.tolist(), attempts.tolist()):
                out[i] = (wh.STATUS_NAMES[s], int(a))
        return out


class _TablePart(NamedTuple):
    """An award part to put from the board's award table (:meth:`OutboxFeed._backfill`)."""

    board_id: str
    k: int


class DeliveryThread:
    """The delivery worker on an event loop of its own, in a thread: its
    sending (thousands of requests a second) never queues ahead of the
    router's writes and reads on theirs. ``start`` / ``stop`` from the
    router's loop; ``wake`` and ``stats`` from any thread."""

    def __init__(self, delivery: WebhookDelivery):
        self.delivery = delivery
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="flowrank-webhooks", daemon=True)

    async def start(self) -> None:
        self.thread.start()
        await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(self.delivery.start(), self.loop))

    async def stop(self) -> None:
        if not self.thread.is_alive():
            return
        try:
            await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(self.delivery.stop(), self.loop))
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            await asyncio.to_thread(self.thread.join, 10)
            if not self.thread.is_alive():
                self.loop.close()

    def wake(self) -> None:
        self.delivery.wake()

    def stats(self) -> dict:
        return self.delivery.stats()


def webhook_stats(feed: OutboxFeed | None, registry: BoardRegistry) -> dict:
    """What the engine's stats say of webhooks: ``{"webhooks": the worker's stats}`` with
    ``--webhook-url``; without one, ``{"webhooks": {"pending": n}}`` for the ``n`` awards logged that
    will be delivered once a URL is set (docs/api.md §18), and nothing when there are none. ``O(awards)``."""
    if feed is not None and feed.delivery is not None:
        return {"webhooks": feed.delivery.stats()}
    waiting = sum(int(np.count_nonzero(ctl.awards.prize[:len(ctl.awards)] >= 0))
                  for ctl in registry.boards.values() if ctl.awards is not None)
    return {"webhooks": {"pending": waiting}} if waiting else {}


def open_feed(registry: BoardRegistry, data_dir: str, config: WebhookConfig,
              wall_clock: Callable[[], int] = epoch_ms) -> OutboxFeed:
    """The outbox under ``<data_dir>/outbox``, its delivery worker (not started) and the feed, hooked to the registry."""
    outbox = Outbox.open(str(Path(data_dir) / "outbox"))
    feed = OutboxFeed(registry, outbox, wall_clock)
    secret = load_or_create_secret(data_dir, config.secret_file, config.log_url)
    feed.delivery = DeliveryThread(WebhookDelivery(outbox, config.url, secret, give_up_s=config.give_up_s,
                                                   wall_clock=wall_clock))
    registry.on_record = feed.note
    registry.delivery = feed.delivery_of
    registry.outbox_safe = feed.safe_offset
    return feed


"""Ingest sequencing: every write, in one log order, durable before it is applied.

Submissions (score batches, board creation, state changes and scheduled
season moves, quarantine decisions, invalidations, dead letters) queue in
arrival order, which is log order. A *cycle* takes up to
``max_cycle_events`` of them and decides each in that order against the
registry plus what the cycle decided before it (:mod:`engine.router.decide`, pure:
dedup, holds, season state), which turns them into log records
(:mod:`engine.core.records`; a score batch becomes one columnar record per board
partition). It appends them with one durable write, folds each record into the
registry (:meth:`engine.router.registry.BoardRegistry.apply`, the fold recovery runs
over the log too), then sends every shard actor one apply call carrying the
cycle's log offsets (each record goes to the
actors hosting the partitions it concerns). The completer assembles outcomes
and board versions in log order from the actors' apply results
(:mod:`engine.core.wire`), pushes deltas to listeners and answers the callers.

A record a shard actor could not apply comes back as a dead letter; the
sequencer logs one dead-letter record for it and answers the cycle once that
is durable (docs/recovery.md). A failed append answers StorageUnavailable:
nothing was applied, and nothing was changed before it, so nothing is undone.

Two appends in flight (``max_appends``): while cycle N's append is in flight,
cycle N+1 is decided against an overlay of the registry plus N's decisions
(noted again from N's :class:`engine.router.decide.Decision` list) and its
append is issued at the offset N's records end at (``at``, engine.log.port).
The committer takes the cycles in log order: it awaits each append, then
folds it into the registry and dispatches it, so folds, shard applies and
answers stay in log order. If N's append fails, every cycle issued after it
was decided on top of records the log does not have: the log refuses their
appends too (``at``), and the committer answers them StorageUnavailable
without applying anything. The next append after a failure (or the first one)
goes alone, unconditional: its answer tells the sequencer where the log ends.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter, defaultdict, deque
from dataclasses import dataclass
from typing import Awaitable, Callable, NamedTuple, Protocol, Sequence

import numpy as np

from engine.core import records as R
from engine.core import wire as W
from engine.router.decide import Overlay, Submission, decide
from engine.core.columns import BatchResult, ScoreBatch, ScoreColumns
from engine.core.errors import (
    AwardsPending,
    EventNotFound,
    FlowRankError,
    NotLeader,
    Overloaded,
    StorageUnavailable,
    TotalOutOfRange,
    ValidationFailed,
)
from engine.core.dedup import DedupTable, GrowPlan, build_grown
from engine.core.histogram import Histogram
from engine.core.model import (
    BoardState,
    BulkJoinResult,
    DecisionResult,
    Delta,
    ErasureAccepted,
    EventResult,
    Invalidation,
    InvalidationResult,
    INT64_MIN,
    JoinResult,
    Outcome,
    Policy,
    QuarantineDecision,
    RowChange,
    RowStatus,
    ScoreEvent,
)
from engine.core.placement import part_of
from engine.router.registry import BoardCtl, BoardRegistry, CutLock
from engine.log.framing import pack_payload as pack
from engine.core.subscores import check_batch as check_subscores
from engine.core.wire import ShardTransport

log = logging.getLogger("flowrank.router")
#: At most this many players in one bulk join (docs/api.md §18).
MAX_BULK_JOIN = 1_000
_STATUS = {s.value: s for s in RowStatus}


class LogPort(Protocol):
    async def append(self, payloads: list[bytes], at: int | None = None) -> int:
        """Durably append records packed once (:func:`engine.log.framing.pack_payload`)
        starting exactly at offset ``at`` (None: wherever the log ends; the contract of
        :meth:`engine.log.port.EventLog.append_payloads`); returns the offset of the first record."""


class _Queued(NamedTuple):
    """A submission waiting in the queue."""

    kind: Submission
    payload: object
    future: asyncio.Future
    per_board: Counter  # score events per board (empty for other kinds)
    size: int  # how many events it counts for in the queue and a cycle


class _Prepared(NamedTuple):
    """A submission decided in a cycle: its records are ``records[start:start + count]``."""

    kind: Submission
    payload: object
    future: asyncio.Future
    start: int
    count: int
    places: list | None  # for scores, per board: [ScorePlace] with record indexes into the cycle's records
    answer: object = None  # what the decision already knows to answer (a join's JoinResult), once durable
    routed: object = None  # for scores sent to a series: the batch as its events landed (decide.Decision.routed)


@dataclass
class _Appending:
    """A cycle decided and sent to the log, not yet folded into the registry."""

    submissions: list  # [_Prepared]
    records: list
    memos: list
    ids_new: list
    payloads: list  # each record packed once
    decisions: list  # [decide.Decision]: noted again into the overlay of the cycles decided after this one
    append: asyncio.Future | None  # the log append (None: nothing to log; answered in turn)
    at: int | None  # the offset the append must start at (None: wherever the log ends)
    started: float
    size: int  # the events it counts for in the queue until it is settled (queue_depth, max_queued_events)
    doomed: BaseException | None = None  # an append before it failed: answered this, never applied


@dataclass
class _Cycle:
    submissions: list  # [_Prepared]
    records: list
    first: int
    futures: dict
    targets: list  # per record: the shard actors it went to
    started: float
    durable_at: float


class Sequencer:
    """The ingest queue and its cycles: admission in log order, durable
    append, dispatch to the shard actors, completion, dead letters."""

    def __init__(self, transport: ShardTransport, log_port: "LogPort", registry: BoardRegistry, cut: CutLock,
                 clock: Callable[[], float] = time.monotonic):
        self.t = transport
        self.log = log_port
        self.registry = registry
        self.boards = registry.boards
        self.cfg = registry.cfg
        self.cut = cut  # taken alone, for an instant, to dispatch a cycle (engine.router.reads)
        self.clock = clock  # monotonic seconds: latencies, cool-downs
        # Epoch ms, read once per cycle and handed to decide (series windows); the router shares board
        # control's wall clock here, so a test's fake clock moves both.
        self.wall_clock: Callable[[], int] = lambda: time.time_ns() // 1_000_000
        self.listeners: list = []
        self._queue: deque[_Queued] = deque()
        self._queued_events = 0
        self._board_queued: Counter = Counter()
        self._wake: asyncio.Event | None = None
        self._inflight: asyncio.Queue | None = None
        self.closing = False
        # set on a standby (engine.runtime.standby): every write is refused with it before anything is decided
        self.standby: NotLeader | None = None
        # held by the committer to fold a durable cycle into the registry and dispatch it (snapshots take it to
        # see router and shard actors between two cycles)
        self._seq_lock = asyncio.Lock()
        # Appends in flight at most (docs/performance.md, issue 29 item 4); cycles decided, not yet folded, in log
        # order; the offset the next append starts at (None: unknown until the append in flight returns)
        self.max_appends = max(1, self.cfg.appends_in_flight)
        self._appending: deque[_Appending] = deque()
        self._log_next: int | None = None
        self._to_commit: asyncio.Queue | None = None
        self._settled: asyncio.Event | None = None
        self.storage_failed_at: float | None = None  # last failed append, cleared by a durable one
        # (offset, row) of the dead letters queued to be logged and not yet durable (the logged ones are
        # the registry's dead_logged): one record each
        self._dead_pending: set[tuple[int, int | None]] = set()
        self._dead_replies: set[asyncio.Task] = set()  # cycles answered once their dead letters are durable
        # Test seam (tests/service): hooks["after_append"](first_offset, records) runs once a
        # batch is durable and before any shard actor sees it. Empty in production.
        self.hooks: dict[str, Callable] = {}
        # Called with the ids of the boards a cycle changed, once their versions moved and
        # before any acknowledgement: an engine host publishes the versions (engine.runtime.version_table).
        self.version_hooks: list[Callable[[set], None]] = []
        # Called with each board an erasure touched (docs/api.md §17): the read side drops its cached views.
        self.erase_hooks: list[Callable[[str], None]] = []
        # After a shard actor failed to apply a durable cycle: re-read the boards' versions
        # (the router sets it to BoardControl.sync_versions).
        self.resync: Callable[[], Awaitable[None]] | None = None
        self.metrics = {
            "fsync_seconds": [], "ingest_to_rank_seconds": [], "outcomes": defaultdict(int),
            "batches": 0, "storage_errors": 0,
        }
        # The same two timings counted since start (engine.core.histogram): what /metrics exports as histograms
        self.histograms = {"fsync_seconds": Histogram(), "ingest_to_rank_seconds": Histogram()}
        # Dedup tables growing on a worker thread (DedupTable.grow_plan): table -> (plan, build future)
        self._growing: dict[DedupTable, tuple[GrowPlan, asyncio.Future]] = {}

    # ---------------------------------------------------------------- lifecycle

    def start(self) -> list[asyncio.Task]:
        """Start the sequencer, the committer and the completer; their tasks (again, when a node that
        stepped down takes its log over again: engine.runtime.base.RouterClient.step_down)."""
        self.closing = False
        self._log_next = None
        self._wake = asyncio.Event()
        self._settled = asyncio.Event()
        self._inflight = asyncio.Queue(maxsize=4)
        self._to_commit = asyncio.Queue()
        return [asyncio.ensure_future(self._sequencer()), asyncio.ensure_future(self._committer()),
                asyncio.ensure_future(self._completer())]

    async def drain(self) -> None:
        """Stop taking submissions and wait until every queued one is answered."""
        self.closing = True
        while True:
            while self._queue or self._appending or (self._inflight and not self._inflight.empty()):
                await asyncio.sleep(0.005)
            if self._inflight is not None:
                await self._inflight.join()
            if not self._queue and not self._appending and not self._dead_replies:  # a last cycle's dead
                return  # letters are logged too
            await asyncio.sleep(0.005)

    def sequencing(self) -> asyncio.Lock:
        """Hold to see router and shard actors between two cycles (snapshots)."""
        return self._seq_lock

    def accepting_writes(self, cooldown_s: float = 2.0) -> bool:
        """False while shutting down, and for ``cooldown_s`` after the log
        failed to make a batch durable (readiness; writes still get tried)."""
        if self.closing:
            return False
        failed = self.storage_failed_at
        return failed is None or self.clock() - failed >= cooldown_s

    def queue_depth(self) -> int:
        return self._queued_events

    # ------------------------------------------------------------------ writes

    async def submit(self, events: Sequence[ScoreEvent]) -> list[EventResult]:
        """:meth:`submit_columns` for a list of events, answered one EventResult per event."""
        if not events:
            return []
        res = await self.submit_columns(ScoreBatch.from_events(events))
        return results_of(events, res)

    async def submit_columns(self, batch: ScoreBatch) -> BatchResult:
        """Durably append then apply one score submission given as columns;
        per event (submission order) its outcome code and board version.
        Unknown boards answer REJECTED_UNKNOWN_SEASON (version 0), unlogged."""
        if not len(batch):
            return BatchResult(np.zeros(0, np.uint8), np.zeros(0, np.int64))
        boards = self.registry.boards  # a bad event refuses the batch whole, before the log:
        check_subscores(batch, lambda b: c.spec if (c := boards.get(b)) is not None else None)
        return await self.enqueue(Submission.SCORES, batch, len(batch))

    async def decide(self, d: QuarantineDecision) -> DecisionResult:
        if d.decision not in ("apply", "reject"):
            raise ValidationFailed("decision must be 'apply' or 'reject'.", "decision")
        self.registry.ctl(d.board_id)
        return await self._after_awards(Submission.DECISION, d)

    async def invalidate(self, inv: Invalidation) -> InvalidationResult:
        ctl = self.registry.ctl(inv.board_id)
        ctl.admission.check_corrections_allowed()
        return await self._after_awards(Submission.INVALIDATION, inv)

    async def _after_awards(self, kind: Submission, payload, patience_s: float = 30.0):
        """Enqueue a correction; while its board's awards are being logged
        (AwardsPending, docs/api.md §16), wait and try again for up to ``patience_s``."""
        waited = 0.0
        while True:
            try:
                return await self.enqueue(kind, payload, 1)
            except AwardsPending:
                if waited >= patience_s:
                    raise
                await asyncio.sleep(0.05)
                waited += 0.05

    async def erase(self, rec: R.ErasureRecord) -> ErasureAccepted:
        """Log an erasure (docs/api.md §17) once it is durable and every shard actor applied it."""
        return await self._after_awards(Submission.ERASE, rec)

    async def erased(self, rec: R.ErasureDoneRecord) -> None:
        """Log an erasure's completion on disk."""
        await self.enqueue(Submission.ERASED, rec, 1)

    async def submit_board(self, spec) -> None:
        """Log a new board (BoardExists if the id is taken when its turn comes)."""
        await self.enqueue(Submission.BOARD, spec, 1)

    async def join(self, board_id: str, player_id: str) -> JoinResult:
        """Join a competition (docs/api.md §16): the player's position, durable
        before the answer. Raises BoardNotFound, BoardNotOpen, BoardFull."""
        self.registry.ctl(board_id)
        return await self.enqueue(Submission.JOIN, (board_id, player_id), 1)

    async def joins(self, board_id: str, player_ids: Sequence[str]) -> BulkJoinResult:
        """Join many players at once (docs/api.md §18): per player, in order, what :meth:`join` would
        answer, the new joins durable together (one record, one append). Raises BoardNotFound, and
        ValidationFailed for no ids, more than MAX_BULK_JOIN or a repeated id (nothing logged)."""
        ids = list(player_ids)
        if not 1 <= len(ids) <= MAX_BULK_JOIN:
            raise ValidationFailed(f"player_ids must hold 1 to {MAX_BULK_JOIN:,} player ids; it has {len(ids):,}.",
                                   "player_ids")
        if len(set(ids)) != len(ids):
            seen: set[str] = set()
            at = next(i for i, p in enumerate(ids) if p in seen or seen.add(p))  # type: ignore[func-returns-value]
            raise ValidationFailed(f"player_ids must be distinct: {ids[at]!r} is there twice.", f"player_ids[{at}]")
        self.registry.ctl(board_id)
        return await self.enqueue(Submission.JOINS, (board_id, ids), len(ids))

    async def submit_state(self, board_id: str, state: BoardState) -> None:
        """Log an admin's state change (the move must be allowed when its turn comes)."""
        await self._after_awards(Submission.STATE, (board_id, state))

    def submit_schedule(self, board_id: str, now_ms: int) -> asyncio.Future:
        """Queue (now, never refused for a full queue) the scheduled moves due
        at ``now_ms`` that are still owed when its turn comes; done once durable."""
        return self.put(Submission.SCHEDULE, (board_id, now_ms), 1)

    def submit_instance(self, series_id: str) -> asyncio.Future:
        """Queue (now, never refused for a full queue) the creation of the
        series' current window's instance, if it is still missing when its turn
        comes (the season timer); done once durable."""
        return self.put(Submission.INSTANCE, series_id, 1)

    async def enqueue(self, kind: Submission, payload, n: int):
        """Queue a submission of ``n`` events and wait for its answer."""
        return await self.put(kind, payload, n)

    def put(self, kind: Submission, payload, n: int) -> asyncio.Future:
        """Queue a submission now (queue order is log order); its future answers it.
        A scheduled season move is never refused for a full queue: it is one
        small record, and being late would let more events in before the close."""
        if self.standby is not None:  # a standby of its log (docs/api.md §19): the active node logs every write
            raise self.standby
        if self.closing and kind != Submission.DEAD_LETTERS:  # dead letters found while draining are still logged
            raise Overloaded("The service is shutting down; retry against the new instance.", retry_after=1)
        if self._queued_events + n > self.cfg.max_queued_events and kind not in (
                Submission.SCHEDULE, Submission.INSTANCE, Submission.DEAD_LETTERS):
            raise Overloaded("The ingest queue is full; retry shortly.", retry_after=1)
        per_board = Counter(payload.per_board()) if kind == Submission.SCORES else Counter()
        for board_id, count in per_board.items():
            if self._board_queued[board_id] + count > self.cfg.max_board_queued_events:
                raise Overloaded(f"Board {board_id!r} has too much work queued; retry shortly.", retry_after=1)
        fut = asyncio.get_running_loop().create_future()
        self._queue.append(_Queued(kind, payload, fut, per_board, n))
        self._queued_events += n
        self._board_queued.update(per_board)
        self._wake.set()
        return fut

    async def _sequencer(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._queue:
                await self._room()
                taken: list[_Queued] = []
                size = 0
                while self._queue and (not taken or size + self._queue[0].size <= self.cfg.max_cycle_events):
                    item = self._queue.popleft()
                    taken.append(item)
                    size += item.size
                    self._board_queued.subtract(item.per_board)
                handed = False
                try:
                    handed = self._issue(taken, size)
                except Exception as exc:  # never let the sequencer die
                    log.exception("sequencer cycle failed")
                    for fut in (q.future for q in taken):
                        if not fut.done():
                            fut.set_exception(exc if isinstance(exc, FlowRankError) else Overloaded(
                                f"Internal error while sequencing ({type(exc).__name__}); retry.", retry_after=1))
                finally:
                    if not handed:  # else counted until the committer settles it
                        self._queued_events -= size

    async def _room(self) -> None:
        """Wait until another append may be issued: fewer than ``max_appends``
        in flight, and none at all while the log's end is unknown."""
        while len(self._appending) >= self.max_appends or (self._appending and self._log_next is None):
            self._settled.clear()
            await self._settled.wait()

    def _issue(self, taken: list[_Queued], size: int) -> bool:
        """Decide each submission in queue order against the registry plus
        the decisions of the cycles still in flight and of this cycle's
        earlier submissions (:mod:`engine.router.decide`: pure), pack each
        record once and send them to the log with one append; the committer
        takes it from there, in log order (True: handed to it)."""
        overlay = Overlay(self.registry)
        for earlier in self._appending:  # decided, not yet folded: as if applied
            for got in earlier.decisions:
                overlay.note(got)
        records: list = []
        memos: list = []
        ids_new: list = []
        decisions: list = []
        subs: list[_Prepared] = []
        now_ms = self.wall_clock()
        for q in taken:
            try:
                got = decide(overlay, q.kind, q.payload, now_ms)
            except FlowRankError as exc:
                q.future.set_exception(exc)
                continue
            overlay.note(got)
            if got.records:
                decisions.append(got)
            start = len(records)
            places = None if got.places is None else [
                None if mine is None else [p if p.record < 0 else p._replace(record=start + p.record) for p in mine]
                for mine in got.places]
            records.extend(got.records)
            memos.extend(got.memos)
            ids_new.extend(got.ids_new)
            subs.append(_Prepared(q.kind, q.payload, q.future, start, len(got.records), places, got.answer,
                                  got.routed))
        del overlay
        if not records and not self._appending:  # only events for unknown boards, or nothing scheduled left:
            self._answer_unlogged(subs)  # nothing to log, nothing in flight to wait for
            return False
        started = self.clock()
        payloads = [pack(rec) for rec in records]  # each record packed once: the log frames these bytes, the
        # shard actors receive them
        at = self._log_next
        append = None
        if records:
            append = asyncio.ensure_future(self.log.append(payloads, at))
            if at is not None:
                self._log_next = at + len(records)
        cyc = _Appending(subs, records, memos, ids_new, payloads, decisions, append, at if records else None,
                         started, size)
        self._appending.append(cyc)
        self._to_commit.put_nowait(cyc)
        return True

    def _answer_unlogged(self, subs: list[_Prepared]) -> None:
        for sub in subs:
            if not sub.future.done():
                sub.future.set_result(self._finish_scores(sub.payload, sub.places, [], [], {}, sub.routed)
                                      if sub.kind == Submission.SCORES else sub.answer)

    async def _committer(self) -> None:
        while True:
            cyc: _Appending = await self._to_commit.get()
            try:
                await self._commit(cyc)
            except Exception as exc:  # never let the committer die
                log.exception("committing a cycle failed")
                self._break_chain(cyc)
                err = exc if isinstance(exc, FlowRankError) else Overloaded(
                    f"Internal error while sequencing ({type(exc).__name__}); retry.", retry_after=1)
                for sub in cyc.submissions:
                    if not sub.future.done():
                        sub.future.set_exception(err)
            finally:
                if self._appending and self._appending[0] is cyc:
                    self._appending.popleft()
                self._queued_events -= cyc.size
                self._settled.set()

    def _break_chain(self, cyc: _Appending, err: BaseException | None = None) -> None:
        """Cycle ``cyc`` will not be applied: every cycle issued after it was decided on top of it,
        so none of them is applied either (their appends fail in the log: ``at``); the next append
        goes alone and finds the log's end."""
        self._log_next = None
        doom = err or StorageUnavailable(
            "The event log could not make an earlier batch durable; nothing of this one was applied.",
            retry_after=1)
        for later in self._appending:
            if later is not cyc and later.doomed is None:
                later.doomed = doom

    def _fail_cycle(self, cyc: _Appending, err: BaseException) -> None:
        for sub in cyc.submissions:
            if sub.kind == Submission.DEAD_LETTERS:  # reported again with the next answers, then retried
                self._dead_pending.difference_update(R.dead_letter_of(r).key for r in sub.payload)
        for sub in cyc.submissions:
            if not sub.future.done():
                sub.future.set_exception(err)

    async def _commit(self, cyc: _Appending) -> None:
        """One cycle, in log order: wait for its append; fold each record into the
        registry (:meth:`engine.router.registry.BoardRegistry.apply`, the fold
        recovery runs too), then send each shard actor its share."""
        first = None
        failure = None
        if cyc.append is not None:
            try:
                first = await cyc.append
            except Exception as exc:
                failure = exc
        if cyc.doomed is not None:  # an earlier append failed: this one was decided on top of it
            if first is not None:  # the log kept it anyway: it broke the contract of ``at`` (engine.log.port)
                log.critical("the event log kept a batch at offset %d after the batch before it failed; "
                             "restart the engine to recover from the log", first)
            self._break_chain(cyc, cyc.doomed)
            self._fail_cycle(cyc, cyc.doomed)
            return
        if failure is not None:
            self.metrics["storage_errors"] += 1
            self.storage_failed_at = self.clock()
            err = failure if isinstance(failure, FlowRankError) else StorageUnavailable(
                f"The event log could not make the batch durable ({failure}); nothing was applied.", retry_after=1)
            self._break_chain(cyc)
            self._fail_cycle(cyc, err)
            return
        if first is None:  # nothing to log: answered in turn, after the cycles before it
            self._answer_unlogged(cyc.submissions)
            return
        if cyc.at is not None and first != cyc.at:  # never: the log appends at ``at`` or fails
            raise RuntimeError(f"the event log appended at offset {first}, not at {cyc.at}")
        records, payloads, ids_new = cyc.records, cyc.payloads, cyc.ids_new
        if cyc.at is None and len(self._appending) == 1:  # the log's end is known again
            self._log_next = first + len(records)
        durable_at = self.clock()
        self.storage_failed_at = None
        async with self._seq_lock:
            if "after_append" in self.hooks:
                self.hooks["after_append"](first, records)
            self.metrics["fsync_seconds"].append(durable_at - cyc.started)
            self.histograms["fsync_seconds"].observe(durable_at - cyc.started)
            apply = self.registry.apply
            for i, (rec, memo) in enumerate(zip(records, cyc.memos)):
                apply(first + i, rec, memo)
            self._tend_dedup_growth(records)
            self._appending.popleft()  # folded: the cycles decided from now on see it in the registry
            self._settled.set()
            for sub in cyc.submissions:
                if sub.kind == Submission.DEAD_LETTERS:
                    self._dead_pending.difference_update(R.dead_letter_of(r).key for r in sub.payload)
            per_actor: dict[int, list] = defaultdict(list)
            targets = [self._targets(rec) for rec in records]
            for i, where in enumerate(targets):
                item = W.ApplyItem(first + i, payloads[i], ids_new[i])
                for a in where:
                    per_actor[a].append(item)
            through = first + len(records) - 1
            await self.cut.acquire_write()
            try:
                futures = {a: self.t.apply(a, through, per_actor.get(a, [])) for a in range(self.t.n)}
            finally:
                await self.cut.release_write()
            await self._inflight.put(_Cycle(cyc.submissions, records, first, futures, targets, cyc.started,
                                            durable_at))

    def _tend_dedup_growth(self, records: list) -> None:
        """Swap in the dedup tables built ahead that are done, then start a build for each
        board of ``records`` whose table is due to grow (:meth:`DedupTable.grow_plan`): the
        O(ids) growth (~0.4 s at 1M ids) runs on a worker thread, not in the fold every read
        and write of this process waits on (issue 29 item 2). A table that fills before its
        build is done grows inline as before, and the build is dropped as stale."""
        for table, (plan, fut) in list(self._growing.items()):
            if fut.done():
                del self._growing[table]
                if not fut.cancelled() and fut.exception() is None:
                    table.finish_grow(plan, fut.result())
        for rec in records:
            if rec.kind not in R.SCORE_BATCHES and rec.kind != R.GROUP:
                continue
            for board_id in (rec.board_id,) if rec.kind != R.GROUP else R.boards_of(rec):
                ctl = self.boards.get(board_id)
                if ctl is not None and ctl.admission.dedup not in self._growing:
                    self._grow_ahead(ctl.admission.dedup)

    def _grow_ahead(self, table: DedupTable) -> None:
        plan = table.grow_plan()
        if plan is not None:
            self._growing[table] = (plan, asyncio.get_running_loop().run_in_executor(None, build_grown, plan))

    def _targets(self, rec: R.Record) -> list[int]:
        """The shard actors a record goes to: those hosting the partitions it concerns."""
        kind = rec.kind
        if kind in R.SCORE_BATCHES:
            ctl = self.boards.get(rec.board_id)
            return [] if ctl is None else [ctl.part_actor[rec.partition]]
        if kind == R.GROUP:  # every shard actor hosting one of its parts
            return sorted({self.boards[part[1]].part_actor[part[2]] for part in rec.parts})
        if kind in R.BOARD_KINDS:
            return list(range(self.t.n))
        if kind in R.DECISIONS:
            ctl = self.boards[rec.board_id]
            return [ctl.part_actor[part_of(rec.player_id, ctl.spec.shards)]]
        if kind == R.INVALIDATE:
            return self.boards[rec.board_id].actors
        if kind == R.STATE and rec.state == BoardState.ARCHIVED.value:  # its partitions stop changing
            return self.boards[rec.board_id].actors
        if kind == R.DEAD_LETTER:  # every shard actor: the one that made it stops reporting it
            return list(range(self.t.n))
        if kind == R.ERASE:  # every shard actor: each forgets the player in the partitions it hosts
            return list(range(self.t.n))
        return []

    async def _completer(self) -> None:
        while True:
            cyc: _Cycle = await self._inflight.get()
            try:
                await self._complete(cyc)
            except Exception as exc:
                log.exception("completing a batch failed")
                err = exc if isinstance(exc, FlowRankError) else Overloaded(
                    f"A shard failed while applying a durable batch ({type(exc).__name__}); the events are "
                    "in the log and will be applied on recovery; retry with the same event ids.", retry_after=1)
                for sub in cyc.submissions:
                    if not sub.future.done():
                        sub.future.set_exception(err)
                await self._resync_after_failure()
            finally:
                self._inflight.task_done()

    async def _complete(self, cyc: _Cycle) -> None:
        answers = {}
        unlogged = []
        for a, f in cyc.futures.items():
            got = W.ApplyAnswer._make(await f)
            answers[a] = got.results
            unlogged.extend(got.unlogged)
        logging_dead = self._log_dead_letters(unlogged) if unlogged else None
        cursor = {a: 0 for a in answers}
        records, targets = cyc.records, cyc.targets
        per_record: list = []  # per record: [(actor, result)] from each shard actor it went to
        for where in targets:
            got = []
            for a in where:
                got.append((a, answers[a][cursor[a]]))
                cursor[a] += 1
            per_record.append(got)
        now = self.clock()
        new_deltas: dict[str, list[Delta]] = defaultdict(list)
        replies = []
        for kind, payload, fut, start, count, places, known, routed in cyc.submissions:
            if kind == Submission.SCORES:
                answer = self._finish_scores(payload, places, records, per_record, new_deltas, routed)
            elif known is not None:  # decided before the append (a join)
                answer = known
            elif count == 0:  # a schedule that found its transitions already made
                answer = None
            else:
                answer = self._finish_record(records[start], per_record[start], new_deltas)
            replies.append((fut, answer))
        if self.version_hooks:
            touched = {b for rec in records for b in R.boards_of(rec) if b in self.boards}
            for hook in self.version_hooks:
                hook(touched)
        if logging_dead is None:
            _reply(replies)
        else:  # answered once the dead letters are durable (never blocking this completer on the sequencer)
            task = asyncio.ensure_future(self._reply_when_logged(logging_dead, replies))
            self._dead_replies.add(task)
            task.add_done_callback(self._dead_replies.discard)
        self.metrics["ingest_to_rank_seconds"].append(now - cyc.durable_at)
        self.histograms["ingest_to_rank_seconds"].observe(now - cyc.durable_at)
        self.metrics["batches"] += 1
        _trim(self.metrics["fsync_seconds"])
        _trim(self.metrics["ingest_to_rank_seconds"])
        for board_id, deltas in new_deltas.items():
            for listener in list(self.listeners):
                try:
                    listener(board_id, deltas)
                except Exception:
                    log.exception("delta listener failed")

    def _log_dead_letters(self, unlogged: list) -> asyncio.Future | None:
        """Queue a dead-letter record for each dead letter the shard actors report
        that is not logged (or being logged) yet; a future done once they
        are durable (None: nothing new). A shard actor reports a dead letter with
        every answer until the record comes back to it, so one whose append
        failed is tried again with the next cycle."""
        new: dict[tuple, R.DeadLetter] = {}
        for item in unlogged:
            got = W.ShardDeadLetter(*item)
            d = R.DeadLetter(got.board_id if isinstance(got.board_id, str) else None, got.offset, got.row,
                             got.event_id if isinstance(got.event_id, str) else None, got.error)
            if d.key not in self.registry.dead_logged and d.key not in self._dead_pending:
                new.setdefault(d.key, d)
        if not new:
            return None
        self._dead_pending.update(new)
        try:
            return self.put(Submission.DEAD_LETTERS, [R.dead_letter_record(d) for d in new.values()], len(new))
        except Exception:
            self._dead_pending.difference_update(new)
            raise

    async def _reply_when_logged(self, logging_dead: asyncio.Future, replies: list) -> None:
        """Answer a cycle whose events include dead letters once their
        records are durable: a client told DEAD_LETTERED can rely on every
        later replay skipping the event. If they could not be made durable,
        the submissions with a dead-lettered event get the error (their
        events are in the log; a retry is DUPLICATE_IGNORED)."""
        try:
            await logging_dead
        except Exception as exc:
            err = exc if isinstance(exc, FlowRankError) else StorageUnavailable(
                f"A dead letter could not be logged ({type(exc).__name__}); retry.", retry_after=1)
            replies = [(fut, err if _has_dead_letter(answer) else answer) for fut, answer in replies]
        _reply(replies)

    def _finish_scores(self, batch: ScoreBatch, places: list, records: list, per_record: list,
                       new_deltas, routed: ScoreBatch | None = None) -> BatchResult:
        """One submission's answer as columns, in its event order: each
        board's version steps once per ranking change in that order (so k
        partitions number versions exactly as one does). Numpy over the
        shard actors' answer columns; Python work only per changed row (its
        delta). ``routed``: the batch as its events landed when some were sent
        to a series (the answer then names every position's board)."""
        board_ids = None
        if routed is not None:
            batch = routed
            board_ids = routed.board_ids()
        n = len(batch)
        codes = np.full(n, R.CODE[Outcome.REJECTED_UNKNOWN_SEASON], np.uint8)
        versions = np.zeros(n, np.int64)
        changes = []  # per board with changes: (first changed position, ctl, cols, positions, board rows, values,
        #               achieved, actors)
        for cols, positions, mine in zip(batch.boards, batch.positions, places):
            if mine is None:
                continue
            ctl = self.boards[cols.board_id]
            m = len(cols)
            bcodes = np.empty(m, np.uint8)
            changed = np.zeros(m, np.bool_)
            ch_rows, ch_values, ch_achieved, ch_actor = [], [], [], []
            for at, rows, part, quiet in mine:
                if at < 0:  # answered without a record (an erased player's event sent again)
                    bcodes[rows] = quiet
                    continue
                if part < 0:
                    actor, result = per_record[at][0]
                else:  # a part of a G record: the answer of the one shard actor hosting it
                    actor, result = next((a, got[part]) for a, got in per_record[at] if got[part] is not None)
                applied = W.ScoresApplied._make(result)
                bcodes[rows] = np.frombuffer(applied.codes, np.uint8)
                rec_rows = np.frombuffer(applied.rows, "<i4")
                if len(rec_rows):
                    brows = rows[rec_rows]
                    changed[brows] = True
                    ch_rows.append(brows)
                    ch_values.append(np.frombuffer(applied.values, "<i8"))
                    ch_achieved.append(np.frombuffer(applied.achieved, "<i8"))
                    ch_actor.append(np.full(len(brows), actor, np.int64))
            codes[positions] = bcodes
            steps = np.cumsum(changed)
            versions[positions] = ctl.version + steps
            if ch_rows:
                brows = np.concatenate(ch_rows)
                by_board_row = np.argsort(brows)  # board rows are in submission order
                changes.append((int(positions[brows[by_board_row[0]]]), ctl, cols, brows[by_board_row],
                                np.concatenate(ch_values)[by_board_row], np.concatenate(ch_achieved)[by_board_row],
                                np.concatenate(ch_actor)[by_board_row]))
            ctl.version += int(steps[-1]) if m else 0
        counts = self.metrics["outcomes"]
        names = R.OUTCOME_NAMES
        for code, k in enumerate(np.bincount(codes, minlength=len(names)).tolist()):
            if k:
                counts[names[code]] += k
        changes.sort(key=lambda c: c[0])  # boards in the order of their first change, as listeners saw them
        for _first, ctl, cols, brows, values, achieved, actors in changes:
            pid_col = self._note_score_changes(ctl, cols, brows, values, achieved, actors, new_deltas,
                                               bool(self.listeners))
            self._guess_rank_keys(ctl, cols, brows, pid_col, values, achieved)
        return BatchResult(codes, versions, board_ids)

    @staticmethod
    def _note_score_changes(ctl: BoardCtl, cols: ScoreColumns, brows: np.ndarray, values: np.ndarray,
                            achieved: np.ndarray, actors: np.ndarray, new_deltas, listening: bool) -> list[str]:
        """The deltas of one board's changed rows (in submission order), whose
        versions the caller has already stepped ``ctl.version`` past: a row's
        metadata is now its event's (the new best, or the latest applied delta).
        Returns the changed rows' player ids, in that order."""
        k = len(brows)
        first = ctl.version - k + 1
        for a, c in zip(*np.unique(actors, return_counts=True)):
            ctl.actor_changes[int(a)] += int(c)
        pids, rows = cols.player_ids, brows.tolist()
        metas = None
        if cols.moffs is not None and cols.meta is not None:
            raw, offs = cols.meta.tobytes(), cols.moffs.tolist()
            metas = [raw[offs[r]:offs[r + 1]] or None for r in rows]
        values, achieved = np.ascontiguousarray(values), np.ascontiguousarray(achieved)
        pid_col = [pids[r] for r in rows]
        subs = None if cols.subs is None else cols.subs[brows]  # a changed row's subscores are its event's
        ctl.ring.push_columns(pid_col, values, achieved, RowStatus.ACTIVE, metas, subs)
        if listening:  # Delta records only for live subscribers
            active = RowStatus.ACTIVE
            ss = [None] * k if subs is None else [tuple(x) for x in subs.tolist()]
            new_deltas[ctl.spec.board_id].extend(
                Delta(v, (RowChange(p, value, at, active, meta, s),)) for v, p, value, at, meta, s in zip(
                    range(first, first + k), pid_col, values.tolist(), achieved.tolist(), metas or [None] * k, ss))
        return pid_col

    def _guess_rank_keys(self, ctl: BoardCtl, cols: ScoreColumns, brows: np.ndarray, pid_col: list[str],
                         values: np.ndarray, achieved: np.ndarray) -> None:
        """Every changed row's new rank key becomes its player's guess
        (:mod:`engine.core.rank_keys`), so the first exact-rank or around read
        after a write needs one round, not two. Columnar: one numpy pass and
        one hashing pass per board of the batch. A key that does not fit two
        int64 (a descending board's INT64_MIN) is left out: a missing or
        stale guess costs a second round, never a wrong answer. A board with
        subscores keeps no guesses (its keys have more parts than the table holds)."""
        if ctl.spec.subscores:
            return
        if ctl.spec.policy is Policy.FASTEST_TIME:  # (time, submitted_at): the event's, now the row's
            primary, secondary, ok = values, cols.submitted[brows], None
        else:  # (-value, achieved_at of the row)
            ok = values != INT64_MIN
            primary, secondary = -values, achieved
        if ok is not None and not ok.all():  # rare: only then a second list of ids
            pid_col = [p for p, keep in zip(pid_col, ok.tolist()) if keep]
            primary, secondary = primary[ok], secondary[ok]
        self.registry.rank_keys.put_many(ctl.spec.board_id, pid_col, primary, secondary)

    def _finish_record(self, rec: R.Record, got: list, new_deltas) -> object:
        kind = rec.kind
        if kind == R.ERASE:
            return self._finish_erase(rec, got, new_deltas)
        if kind == R.ERASED:
            return None
        ctl = self.boards.get(rec.board_id)
        if kind in R.DECISIONS:
            a, result = got[0]
            applied = W.EventApplied._make(result)
            self._note_change(ctl, a, applied.change, new_deltas)
            outcome = None if applied.code == 0 else R.outcome_of(applied.code)
            return DecisionResult(rec.event_id, rec.decision, outcome, ctl.version)
        if kind == R.INVALIDATE:
            for a, result in got:
                if result is not None:  # from the shard actor whose partition owns the event
                    inv = W.Invalidated._make(result)
                    if inv.refused:
                        return TotalOutOfRange.invalidating(rec.event_id, inv.player_id)
                    self._note_change(ctl, a, inv.change, new_deltas)
                    status = RowStatus.ACTIVE if inv.ranked else RowStatus.INVALIDATED
                    return InvalidationResult(rec.correction_id, inv.player_id, status,
                                              inv.value if inv.ranked else None, ctl.version)
            return EventNotFound(f"No applied event {rec.event_id!r} on board {rec.board_id!r}.", "event_id")
        return None

    def _finish_erase(self, rec: R.ErasureRecord, got: list, new_deltas) -> ErasureAccepted:
        """Each board where the player had a ranked row steps its version once (an ERASED delta); every
        listed board serves no delta from before the erasure (an older ``since_version`` answers a snapshot)
        and drops its cached views (a cursor pinned before it answers 410)."""
        stepped: dict[str, list[Delta]] = defaultdict(list)
        for a, result in got:
            for board_id, change in result or ():
                ctl = self.boards.get(board_id)
                if ctl is not None:
                    self._note_change(ctl, a, change, stepped)
        boards = tuple(b[0] for b in rec.boards)
        for board_id in dict.fromkeys(boards + tuple(stepped)):
            ctl = self.boards.get(board_id)
            if ctl is None:
                continue
            mine = stepped.get(board_id, [])
            ctl.ring.reset(ctl.version - len(mine))
            ctl.ring.push_many(mine)
            new_deltas[board_id].extend(mine)
            for hook in self.erase_hooks:
                hook(board_id)
        return ErasureAccepted(rec.erasure_id, rec.player_id or "", boards)

    def _note_change(self, ctl: BoardCtl, actor: int, change, new_deltas) -> None:
        """A change (a :class:`engine.core.wire.ChangeWire` as sent) from shard actor ``actor``: one version, one delta."""
        if change is None:
            return
        c = W.ChangeWire(*change)
        ctl.version += 1
        ctl.actor_changes[actor] += 1
        delta = Delta(ctl.version, (RowChange(c.player_id, c.value, c.achieved_at, _STATUS[c.status], c.metadata or None,
                                              None if c.subscores is None else tuple(c.subscores)),))
        ctl.ring.push(delta)
        new_deltas[ctl.spec.board_id].append(delta)

    async def _resync_after_failure(self) -> None:
        if self.resync is None:
            return
        try:
            await self.resync()
        except Exception:
            log.exception("version resync failed; will retry on the next failure")

def _reply(replies: list) -> None:
    """Resolve each ``(future, answer)``: an error answer is raised to its caller."""
    for fut, answer in replies:
        if fut.done():
            continue
        if isinstance(answer, FlowRankError):
            fut.set_exception(answer)
        else:
            fut.set_result(answer)


def _has_dead_letter(answer) -> bool:
    return isinstance(answer, BatchResult) and bool((answer.codes == R.CODE[Outcome.DEAD_LETTERED]).any())


def results_of(events: Sequence[ScoreEvent], res: BatchResult) -> list[EventResult]:
    """A :class:`BatchResult` as one EventResult per event (tests, cold callers)."""
    outcome = R.outcome_of
    return [EventResult(ev.event_id, outcome(c), v) for ev, c, v in zip(events, res.codes.tolist(),
                                                                          res.versions.tolist())]


def _trim(samples: list, keep: int = 4096) -> None:
    if len(samples) > keep:
        del samples[: len(samples) - keep]


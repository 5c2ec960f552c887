"""The router: sequencing, durable append, dispatch, and every board read.

One router fronts all shards (in-process partitions or Ray shard actors,
behind a :class:`ShardTransport`). It is the imperative shell around the
pure core: it runs board-wide admission in log order, appends each batch to
the event log (durable before any acknowledgement), sends every shard one
call per batch carrying the batch's log offsets, and assembles outcomes and
versions in log order. Reads fan out to the shards that hold a board and
merge with the comparator (:mod:`engine.ranking`).

Consistency (docs/consistency.md): a shard transport submits calls in
order and every shard runs one caller's calls in submission order (sync Ray
actors do), and every batch goes to every shard. So a read whose calls are
all submitted in one step sees the same prefix of batches on every shard: a
consistent cut, whose version is the sum of the shards' local versions.
Reads that need two steps (rank: find the key, then count above it) hold
the :class:`CutLock` so no batch is dispatched between the steps. Every
answer carries the shard's applied log offset; answers with different
offsets (a shard that replayed ahead after a restart) are retried.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import time
import uuid
from collections import Counter, OrderedDict, defaultdict, deque
from dataclasses import dataclass, field, replace
from typing import AsyncIterator, Awaitable, Callable, Protocol, Sequence

import numpy as np

from engine import checksum as checksum_mod
from engine import records as R
from engine.admission import Admission
from engine.archive import ArchiveHistory, ArchiveView, encode, rows_from_wire
from engine.changes import ChangeRing
from engine.journal import JournalColumns
from engine.columns import BatchResult, ScoreBatch, ScoreColumns
from engine.rank_keys import RankKeyCache
from engine.export import Block, Chunk, Merge, TiedRanks
from engine.errors import (
    BoardArchived,
    BoardExists,
    BoardNotFound,
    EventNotFound,
    FlowRankError,
    Overloaded,
    PlayerNotFound,
    PlayerNotRanked,
    StorageUnavailable,
    TotalOutOfRange,
    ValidationFailed,
    ViewExpired,
)
from engine.formats import ROUTER_STATE_FORMAT, state_format
from engine.gc_tuning import release_memory
from engine.histogram import Histogram
from engine.model import (
    DEFAULT_DEDUP_RETENTION,
    DEFAULT_DELTA_RETENTION,
    BoardInfo,
    BoardSpec,
    BoardState,
    Changes,
    Checksum,
    DecisionResult,
    Delta,
    EventResult,
    HeldEvent,
    HistoryEntry,
    Invalidation,
    InvalidationResult,
    Outcome,
    Page,
    PlayerView,
    Policy,
    QuarantineDecision,
    RowChange,
    RowStatus,
    ScoreEvent,
)
from engine.placement import actor_of, part_of, parts_of
from engine.ranking import (
    better_primary_probe,
    first_tied_in_prefix,
    merge_top,
    merge_window,
    rank_locally,
    with_tied_ranks,
)
from engine.log.archives import ArchiveStore, MemoryArchiveStore
from engine.log.spill import SpillReader
from engine import season
from engine.season import next_state

log = logging.getLogger("flowrank.router")
_STATUS = {s.value: s for s in RowStatus}


class ShardTransport(Protocol):
    """Submits calls to shard ``i`` in order; returns an awaitable answer."""

    n: int

    def apply(self, shard: int, through: int, items: list) -> Awaitable[list]:
        """``[results, unlogged]`` of :meth:`engine.shard.ShardCore.apply`."""
        ...

    def read(self, shard: int, requests: list) -> Awaitable[list]: ...


class LogPort(Protocol):
    async def append(self, records: list) -> int:
        """Durably append; returns the offset of the first record."""


@dataclass
class RouterConfig:
    dedup_retention: int = DEFAULT_DEDUP_RETENTION
    delta_retention: int = DEFAULT_DELTA_RETENTION
    max_queued_events: int = 200_000  # back-pressure: beyond this, OVERLOADED
    max_board_queued_events: int = 100_000  # per board, so one hot board cannot take the whole queue
    max_cycle_events: int = 20_000  # events appended with one fsync
    pinned_pages: int = 5  # page 1 materialises this many pages for its cursor
    max_view_entries: int = 2_000
    view_ttl_s: float = 120.0
    max_views: int = 256
    rank_key_cache: int = 1 << 18  # slots of the rank-key guesses (engine.rank_keys): 6 MiB
    read_retries: int = 5
    approx_sample_points: int = 256
    max_snapshot_page: int = 10_000  # /changes snapshot: largest (and default) page (docs/api.md §9)
    max_snapshot_rows: int = 4_000_000  # rows all cached snapshot views may hold together
    export_block_rows: int = 16_384  # rows per spill block: an export holds one per partition
    export_read_files: bool = True  # open spill files here when possible (False: always ask the shards; tests)
    schedule_poll_s: float = 0.5  # the season timer re-reads the wall clock at least this often (clock steps)
    history_chunk_rows: int = 1 << 20  # an archive reads a partition's journal this many rows per call


@dataclass
class BoardCtl:
    """What the router keeps per board: admission, versions, deltas."""

    spec: BoardSpec
    admission: Admission
    ring: ChangeRing
    actors: list[int]
    version: int = 0
    corrections: int = 0
    actor_changes: dict[int, int] = field(default_factory=lambda: defaultdict(int))
    samples: dict[int, tuple[int, int, list]] = field(default_factory=dict)  # actor -> (changes at sample, step, keys)
    parts_on: dict[int, int] = field(default_factory=dict)  # actor -> how many of the board's partitions it hosts
    part_actor: list[int] = field(default_factory=list)  # partition -> actor hosting it
    archive: ArchiveView | None = None  # ARCHIVED and written: every read answers from it
    shard_reads: int = 0  # reads asking the shards now (an archive waits for them before the drop)


class CutLock:
    """A fair readers-writer lock: multi-step reads share it; a batch
    dispatch takes it alone (for an instant), and new readers queue behind a
    waiting dispatch so neither side starves."""

    def __init__(self):
        self._readers = 0
        self._writer_waiting = 0
        self._cond = asyncio.Condition()

    async def acquire_read(self):
        async with self._cond:
            await self._cond.wait_for(lambda: not self._writer_waiting)
            self._readers += 1

    async def release_read(self):
        async with self._cond:
            self._readers -= 1
            self._cond.notify_all()

    async def acquire_write(self):
        async with self._cond:
            self._writer_waiting += 1
            await self._cond.wait_for(lambda: self._readers == 0)

    async def release_write(self):
        async with self._cond:
            self._writer_waiting -= 1
            self._cond.notify_all()


class _Reads:
    """Batches read requests into one call per shard per *round*.

    Requests submitted while fewer than ``max_rounds`` rounds are in flight
    go out at the end of the current event-loop turn; otherwise they wait for
    a round to finish and then all go together (adaptive batching: no added
    latency when idle, bigger batches under load). A round submits its calls
    to every shard in one synchronous step, so the requests of one fan-out
    always see the same cut (no batch dispatch can fall between them).
    """

    def __init__(self, transport: ShardTransport, max_rounds: int = 2):
        self.t = transport
        self.pending: dict[int, list] = {}
        self.scheduled = False
        self.rounds = 0
        self.max_rounds = max_rounds

    def ask(self, shard: int, req: list) -> asyncio.Future:
        fut = asyncio.get_running_loop().create_future()
        self.pending.setdefault(shard, []).append((req, fut))
        self._schedule()
        return fut

    def _schedule(self) -> None:
        if not self.scheduled and self.pending and self.rounds < self.max_rounds:
            self.scheduled = True
            asyncio.get_running_loop().call_soon(self.flush)

    def flush(self):
        self.scheduled = False
        if not self.pending:
            return
        pending, self.pending = self.pending, {}
        self.rounds += 1
        waits = [self._deliver(self.t.read(shard, [r for r, _ in items]), items)  # one cut
                 for shard, items in pending.items()]
        asyncio.ensure_future(self._round(waits))

    async def _round(self, waits) -> None:
        try:
            await asyncio.gather(*waits)
        finally:
            self.rounds -= 1
            self._schedule()

    @staticmethod
    async def _deliver(aw, items):
        try:
            offset, answers = await aw
        except BaseException as exc:  # the shard failed: every waiter learns it
            err = exc if isinstance(exc, FlowRankError) else Overloaded(
                f"A shard is unavailable ({type(exc).__name__}); retry shortly.", retry_after=1)
            for _, fut in items:
                if not fut.done():
                    fut.set_exception(err)
            return
        for (_, fut), ans in zip(items, answers):
            if not fut.done():
                fut.set_result((offset, ans))


@dataclass
class _Cycle:
    submissions: list  # [(kind, payload, future, extra)]
    records: list
    first: int
    futures: dict
    targets: list  # per record: the shards it went to
    started: float
    durable_at: float


class Router:
    def __init__(self, transport: ShardTransport, log_port: LogPort, config: RouterConfig | None = None,
                 clock: Callable[[], float] = time.monotonic, archives: ArchiveStore | None = None,
                 wall_clock: Callable[[], int] | None = None):
        self.t = transport
        self.log = log_port
        self.archives: ArchiveStore = MemoryArchiveStore() if archives is None else archives
        self.cfg = config or RouterConfig()
        self.clock = clock  # monotonic seconds: latencies, view ages, cool-downs
        # Epoch ms: the only clock scheduled season transitions read (tests pass a fake one).
        self.wall_clock: Callable[[], int] = wall_clock or epoch_ms
        self._sched_wake: asyncio.Event | None = None
        self.boards: dict[str, BoardCtl] = {}
        self.reads = _Reads(transport)
        self.cut = CutLock()
        self.listeners: list = []
        self.views: OrderedDict[tuple[str, int], tuple[float, list]] = OrderedDict()
        self._view_builds: dict[str, asyncio.Future] = {}  # board -> done when its page-1 fan-out ends
        # (board, player) -> the wire key their row had when last read: a guess
        # that lets an exact rank count on every shard in the same round as the
        # owner's read of the row; used only when the row read confirms it.
        self.rank_keys = RankKeyCache(self.cfg.rank_key_cache)
        self.log_offset = -1  # last offset the router has folded in
        self._queue: deque = deque()  # (kind, payload, future, events per board)
        self._queued_events = 0
        self._board_queued: Counter = Counter()
        self._wake: asyncio.Event | None = None
        self._inflight: asyncio.Queue | None = None
        self._tasks: list[asyncio.Task] = []
        self._closing = False
        self._seq_lock = asyncio.Lock()  # held from admission to dispatch of a cycle
        self.storage_failed_at: float | None = None  # last failed append, cleared by a durable one
        # (offset, row) of every dead letter logged or being logged (engine.records.DeadLetter): one record each
        self._dead_logged: set[tuple[int, int | None]] = set()
        self._dead_replies: set[asyncio.Task] = set()  # cycles answered once their dead letters are durable
        # Test seam (tests/service): hooks["after_append"](first_offset, records) runs once a
        # batch is durable and before any shard sees it. Empty in production.
        self.hooks: dict[str, Callable] = {}
        # Awaited before the shards drop an archived board's rows: an engine host
        # (engine.engine_host) waits there until no gateway's read replica still reads them.
        self.drop_barriers: list[Callable[[str], Awaitable]] = []
        # Called with the ids of the boards a cycle changed, once their versions moved and
        # before any acknowledgement: an engine host publishes the versions (engine.version_table).
        self.version_hooks: list[Callable[[set], None]] = []
        self.metrics = {
            "fsync_seconds": [], "ingest_to_rank_seconds": [], "outcomes": defaultdict(int),
            "batches": 0, "storage_errors": 0,
        }
        # The same two timings counted since start (engine.histogram): what /metrics exports as histograms
        self.histograms = {"fsync_seconds": Histogram(), "ingest_to_rank_seconds": Histogram()}

    # ---------------------------------------------------------------- lifecycle

    def start(self) -> None:
        self._wake = asyncio.Event()
        self._inflight = asyncio.Queue(maxsize=4)
        self._sched_wake = asyncio.Event()
        self._tasks = [asyncio.ensure_future(self._sequencer()), asyncio.ensure_future(self._completer()),
                       asyncio.ensure_future(self._season_timer())]

    async def drain(self) -> None:
        """Stop taking submissions and wait until every queued one is answered."""
        self._closing = True
        while True:
            while self._queue or (self._inflight and not self._inflight.empty()):
                await asyncio.sleep(0.005)
            if self._inflight is not None:
                await self._inflight.join()
            if not self._queue and not self._dead_replies:  # a last cycle's dead letters are logged too
                return
            await asyncio.sleep(0.005)

    async def stop(self) -> None:
        await self.drain()
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def sequencing(self) -> asyncio.Lock:
        """Hold to see router and shards between two cycles (snapshots)."""
        return self._seq_lock

    def accepting_writes(self, cooldown_s: float = 2.0) -> bool:
        """False while shutting down, and for ``cooldown_s`` after the log
        failed to make a batch durable (readiness; writes still get tried)."""
        if self._closing:
            return False
        failed = self.storage_failed_at
        return failed is None or self.clock() - failed >= cooldown_s

    def queue_depth(self) -> int:
        return self._queued_events

    # ------------------------------------------------------------- recovery

    def fold(self, offset: int, rec) -> None:
        """Replay one log record into router state (recovery; no I/O)."""
        rec = R.parse(rec)
        kind = rec.kind
        if kind in R.BOARD_KINDS:
            spec = R.spec_of(rec)
            self.boards.setdefault(spec.board_id, self._new_ctl(spec))
        elif kind == R.STATE:
            ctl = self.boards.get(rec.board_id)
            if ctl is not None:
                ctl.admission.state = BoardState(rec.state)
                if ctl.admission.state is BoardState.FROZEN:
                    ctl.admission.freeze_position = offset
        elif kind in R.SCORE_BATCHES or kind == R.SCORE:
            ctl = self.boards.get(rec.board_id)
            if ctl is not None:
                if kind in R.SCORE_BATCHES:
                    ctl.admission.replay_columns(*R.columns_of(rec))
                else:
                    ctl.admission.replay(R.event_of(rec), R.verdict_of(rec))
                ctl.admission.dedup.trim()
        elif kind == R.INVALIDATE:
            ctl = self.boards.get(rec.board_id)
            if ctl is not None:
                ctl.corrections += 1
        elif kind in R.DECISIONS:
            ctl = self.boards.get(rec.board_id)
            if ctl is not None and rec.event_id in ctl.admission.held:
                held = ctl.admission.held.pop(rec.event_id)
                ctl.admission.decided[rec.event_id] = (rec.decision, held)
        elif kind == R.DEAD_LETTER:
            self._dead_logged.add(R.dead_letter_of(rec).key)
        self.log_offset = offset

    def to_state(self) -> dict:
        return {
            "format": ROUTER_STATE_FORMAT,
            "log_offset": self.log_offset,
            "boards": [
                [R.board_record(c.spec), c.admission.to_state(), c.corrections] for c in self.boards.values()
            ],
        }

    def load_state(self, state: dict) -> None:
        state_format(state, ROUTER_STATE_FORMAT, "router snapshot")
        self.log_offset = state["log_offset"]
        for rec, adm, corrections in state["boards"]:
            spec = R.spec_of(rec)
            ctl = self._new_ctl(spec)
            ctl.admission = Admission.from_state(spec, self.cfg.dedup_retention, adm)
            ctl.corrections = corrections
            self.boards[spec.board_id] = ctl

    async def sync_versions(self) -> None:
        """Read every board's version from the shards (after recovery) and
        restart each delta ring there: older versions answer with a snapshot."""
        for ctl in self.boards.values():
            board_id = ctl.spec.board_id
            if ctl.admission.state is BoardState.ARCHIVED and ctl.archive is None:
                ctl.archive = await asyncio.to_thread(self.archives.open, board_id)
            if ctl.archive is not None:  # its rows live in the archive: the shards drop theirs (again)
                ctl.version = ctl.archive.info.version
                await self._fan(ctl, lambda a: ["drop", board_id])
            else:
                answers = await self._fan(ctl, lambda a: ["size", board_id])
                ctl.version = sum(ans[0] for _, ans in answers.values())
            ctl.ring.reset(ctl.version)
            ctl.actor_changes.clear()
            ctl.samples.clear()

    def _new_ctl(self, spec: BoardSpec) -> BoardCtl:
        part_actor = [actor_of(spec.board_id, p, self.t.n) for p in range(spec.shards)]
        return BoardCtl(spec, Admission(spec, self.cfg.dedup_retention), ChangeRing(self.cfg.delta_retention),
                        sorted(set(part_actor)), parts_on=dict(Counter(part_actor)), part_actor=part_actor)

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
        return await self._enqueue("score", batch, len(batch))

    async def create_board(self, spec: BoardSpec) -> BoardInfo:
        """Log the board; a ``closes_at`` already past freezes it (and
        finalizes it, if that is due too) right after, before this returns."""
        if spec.shards < 1:
            raise ValidationFailed("shards must be at least 1.", "shards")
        season.check_schedule(spec.closes_at, spec.finalize_after_s)
        await self._enqueue("board", spec, 1)
        if spec.closes_at is not None:
            await self.close_due([spec.board_id])
            self.wake_season_timer()  # its next wake-up may now be sooner
        return await self.board(spec.board_id)

    async def next_season(self, board_id: str, season_name: str, closes_at: int | None,
                          finalize_after_s: int | None = None) -> BoardInfo:
        """Create ``game:mode:<season_name>:scope`` with ``board_id``'s settings
        (:func:`engine.season.next_season`). Raises BoardNotFound, BoardExists,
        ValidationFailed."""
        spec = season.next_season(self._ctl(board_id).spec, season_name, closes_at, finalize_after_s)
        return await self.create_board(spec)

    async def set_state(self, board_id: str, state: BoardState) -> BoardInfo:
        ctl = self._ctl(board_id)
        await self._enqueue("state", (board_id, state), 1)
        if state is BoardState.ARCHIVED:
            try:
                await self._archive(ctl)
            except Exception:  # the state is durable; the next start builds the archive
                log.exception("archiving board %r failed; its rows stay on the shards until a restart "
                              "builds the archive", board_id)
        return await self.board(board_id)

    # ---------------------------------------------------------------- archive

    async def finish_archiving(self) -> None:
        """Build the archive of every ARCHIVED board that has none (a crash
        came between the ARCHIVED record and the archive's rename): the shards
        replayed its rows from the log. Run once the router has started."""
        for ctl in list(self.boards.values()):
            if ctl.admission.state is BoardState.ARCHIVED and ctl.archive is None:
                await self._archive(ctl)

    async def _archive(self, ctl: BoardCtl) -> None:
        """Write the board's rows to its archive, then have the shards drop them.

        Runs after the ARCHIVED record applied, so no later record changes the
        rows and the archive is the same whenever it is built. Order (docs/
        recovery.md): read every row in one cut; encode; save (temp file, fsync,
        rename); read it back; switch the board's reads to it; wait for reads
        already asking the shards; drop. A crash before the rename leaves no
        archive (the next start builds it); after it, a finished one."""
        board_id = ctl.spec.board_id
        if ctl.archive is not None:
            return

        async def attempt():
            answers = await self._fan(ctl, lambda a: ["rows", board_id])
            return {o for o, _ in answers.values()}, answers

        answers = await self._consistent(attempt, ctl)
        got = [ans for _, ans in answers.values()]
        version = sum(ans[0] for ans in got)
        parts = [cols for ans in got for cols in ans[1]]
        if len(parts) != ctl.spec.shards:
            raise StorageUnavailable(f"Board {board_id!r} is ARCHIVED but its archive is missing and the shards no "
                                     "longer hold its rows: restore the archive file from a backup.")
        found = await asyncio.to_thread(self.archives.open, board_id)  # finished before a crash: keep it
        if found is None:
            rows = rows_from_wire(parts)
            del got, parts, answers
            history = await self._history_of(ctl)
            chunks = await asyncio.to_thread(encode, board_id, ctl.spec.policy, version, rows, history)
            del rows, history
            await asyncio.to_thread(self.archives.save, board_id, chunks)
            del chunks
            found = await asyncio.to_thread(self.archives.open, board_id)
        if found is None or found.info.version != version or found.info.board_id != board_id:
            raise StorageUnavailable(f"The archive of board {board_id!r} does not hold its rows at version "
                                     f"{version}; its rows stay on the shards.", retry_after=1)
        ctl.archive = found
        ctl.version = version
        for barrier in self.drop_barriers:  # reads in other processes (engine.read_replica)
            await barrier(board_id)
        while ctl.shard_reads:  # reads that chose the shards before the switch
            await asyncio.sleep(0.002)
        await self._fan(ctl, lambda a: ["drop", board_id])
        await asyncio.to_thread(release_memory)  # the build's buffers (and in-process shards' rows) go back
        log.info("board %r archived at version %d: %d rows", board_id, version, len(found))

    async def _history_of(self, ctl: BoardCtl) -> ArchiveHistory:
        """Every journal row of an ARCHIVED board, read from each partition in
        chunks of ``cfg.history_chunk_rows`` (one read per chunk, its rows as
        numpy columns). The shards no longer change an ARCHIVED board's
        partitions, so the chunks need no common cut."""
        board_id, step = ctl.spec.board_id, self.cfg.history_chunk_rows
        parts = []
        for part, actor in enumerate(ctl.part_actor):
            chunks, ids, start, total = [], None, 0, 1
            while start < total:
                _, (_, ans) = await self.reads.ask(actor, ["hcols", board_id, part, start, step])
                if ans is None:
                    raise StorageUnavailable(f"Board {board_id!r} is ARCHIVED but partition {part} is no longer on "
                                             "its shard: restore the archive file from a backup.")
                total, wire, got_ids = ans
                ids = got_ids if got_ids is not None else ids
                cols = JournalColumns.from_wire(wire)
                chunks.append(cols)
                start += max(cols.n, 1)
            assert ids is not None
            parts.append((np.frombuffer(ids[0], np.uint8), np.frombuffer(ids[1], "<i8"), chunks))
        return ArchiveHistory.of_parts(parts)

    # --------------------------------------------------------- season schedule

    async def close_due(self, board_ids: Sequence[str] | None = None) -> int | None:
        """Make every scheduled transition due at the wall clock's now (of
        ``board_ids``, default every board), each as a STATE record through
        the sequencer like an admin's request, so it lands at one log
        position; waits until they are durable. Returns the epoch ms at which
        the next scheduled transition falls due (None: none). Idempotent: a
        transition already made (by the schedule or an admin) is not made
        again. O(boards)."""
        now = self.wall_clock()
        waits, wake_at = [], None
        try:
            for board_id in list(self.boards if board_ids is None else board_ids):
                ctl = self.boards.get(board_id)
                if ctl is None or ctl.spec.closes_at is None:
                    continue
                d = season.due(ctl.admission.state, ctl.spec.closes_at, ctl.spec.finalize_after_s, now)
                if d.transitions:
                    waits.append(self._put("schedule", (board_id, now), 1))  # queued in this turn, in board order
                if d.wake_at is not None and (wake_at is None or d.wake_at < wake_at):
                    wake_at = d.wake_at
        finally:
            done = await asyncio.gather(*waits, return_exceptions=True)  # what was queued is answered
        for outcome in done:
            if isinstance(outcome, BaseException):
                raise outcome
        return wake_at

    def wake_season_timer(self) -> None:
        """Have the season timer look at the schedule now (a board was created,
        or a test moved its fake clock)."""
        if self._sched_wake is not None:
            self._sched_wake.set()

    async def _season_timer(self) -> None:
        """Sleep until the next scheduled transition is due (re-reading the
        wall clock at least every ``schedule_poll_s``, so a stepped clock is
        noticed), then make it through :meth:`close_due`."""
        while not self._closing:
            self._sched_wake.clear()
            try:
                wake_at = await self.close_due()
            except Exception:
                if self._closing:
                    return
                log.exception("scheduled season transitions failed; retrying")
                wake_at = None
            poll = self.cfg.schedule_poll_s
            delay = poll if wake_at is None else min(poll, max(0.001, (wake_at - self.wall_clock()) / 1000))
            try:
                await asyncio.wait_for(self._sched_wake.wait(), delay)
            except asyncio.TimeoutError:
                pass

    async def decide(self, d: QuarantineDecision) -> DecisionResult:
        if d.decision not in ("apply", "reject"):
            raise ValidationFailed("decision must be 'apply' or 'reject'.", "decision")
        self._ctl(d.board_id)
        return await self._enqueue("decide", d, 1)

    async def invalidate(self, inv: Invalidation) -> InvalidationResult:
        ctl = self._ctl(inv.board_id)
        ctl.admission.check_corrections_allowed()
        return await self._enqueue("invalidate", inv, 1)

    async def _enqueue(self, kind: str, payload, n: int):
        return await self._put(kind, payload, n)

    def _put(self, kind: str, payload, n: int) -> asyncio.Future:
        """Queue a submission now (queue order is log order); its future answers it.
        A scheduled season move is never refused for a full queue: it is one
        small record, and being late would let more events in before the close."""
        if self._closing and kind != "dead":  # dead letters found while draining are still logged
            raise Overloaded("The service is shutting down; retry against the new instance.", retry_after=1)
        if self._queued_events + n > self.cfg.max_queued_events and kind not in ("schedule", "dead"):
            raise Overloaded("The ingest queue is full; retry shortly.", retry_after=1)
        per_board = Counter(payload.per_board()) if kind == "score" else Counter()
        for board_id, count in per_board.items():
            if self._board_queued[board_id] + count > self.cfg.max_board_queued_events:
                raise Overloaded(f"Board {board_id!r} has too much work queued; retry shortly.", retry_after=1)
        fut = asyncio.get_running_loop().create_future()
        self._queue.append((kind, payload, fut, per_board))
        self._queued_events += n
        self._board_queued.update(per_board)
        self._wake.set()
        return fut

    async def _sequencer(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._queue:
                taken, size = [], 0
                while self._queue and (not taken or size + _size(self._queue[0]) <= self.cfg.max_cycle_events):
                    item = self._queue.popleft()
                    taken.append(item[:3])
                    size += _size(item)
                    self._board_queued.subtract(item[3])
                try:
                    async with self._seq_lock:
                        await self._cycle(taken)
                except Exception as exc:  # never let the sequencer die
                    log.exception("sequencer cycle failed")
                    for _, _, fut in taken:
                        if not fut.done():
                            fut.set_exception(exc if isinstance(exc, FlowRankError) else Overloaded(
                                f"Internal error while sequencing ({type(exc).__name__}); retry.", retry_after=1))
                finally:
                    self._queued_events -= size

    async def _cycle(self, taken: list) -> None:
        records: list = []
        subs: list = []  # (kind, payload, fut, start index, count, undo)
        touched: set[str] = set()
        for kind, payload, fut in taken:
            start = len(records)
            try:
                undo = self._prepare(kind, payload, records, touched)
            except FlowRankError as exc:
                fut.set_exception(exc)
                continue
            subs.append((kind, payload, fut, start, len(records) - start, undo))  # score: undo = places
        if not records:  # only events for unknown boards, or nothing scheduled left: nothing to log
            for kind, payload, fut, _start, _count, places in subs:
                if not fut.done():
                    fut.set_result(self._finish_scores(payload, places, [], [], {}) if kind == "score" else None)
            return
        started = self.clock()
        try:
            first = await self.log.append(records)
        except Exception as exc:
            self.metrics["storage_errors"] += 1
            self.storage_failed_at = self.clock()
            for board_id in touched:
                self.boards[board_id].admission.rollback() if board_id in self.boards else None
            for sub in reversed(subs):
                if sub[0] != "score" and sub[5] is not None:
                    sub[5]()
            err = exc if isinstance(exc, FlowRankError) else StorageUnavailable(
                f"The event log could not make the batch durable ({exc}); nothing was applied.", retry_after=1)
            for sub in subs:
                if not sub[2].done():
                    sub[2].set_exception(err)
            return
        durable_at = self.clock()
        self.storage_failed_at = None
        if "after_append" in self.hooks:
            self.hooks["after_append"](first, records)
        self.metrics["fsync_seconds"].append(durable_at - started)
        self.histograms["fsync_seconds"].observe(durable_at - started)
        for board_id in touched:
            if board_id in self.boards:
                self.boards[board_id].admission.commit()
        self.log_offset = first + len(records) - 1
        for kind, _payload, _fut, start, count, _undo in subs:
            if kind in ("state", "schedule"):  # the freeze position is the record's offset, as replay sets it
                for i in range(start, start + count):
                    if records[i].state == BoardState.FROZEN.value:
                        self.boards[records[i].board_id].admission.freeze_position = first + i
        per_actor: dict[int, list] = defaultdict(list)
        targets = [self._targets(rec) for rec in records]
        for i, (rec, where) in enumerate(zip(records, targets), first):
            for a in where:
                per_actor[a].append([i, rec])
        through = first + len(records) - 1
        await self.cut.acquire_write()
        try:
            futures = {a: self.t.apply(a, through, per_actor.get(a, [])) for a in range(self.t.n)}
        finally:
            await self.cut.release_write()
        await self._inflight.put(_Cycle(subs, records, first, futures, targets, started, durable_at))

    def _prepare(self, kind: str, payload, records: list, touched: set):
        """Admission for one submission: appends its records, returns an undo."""
        if kind == "score":
            return self._prepare_scores(payload, records, touched)
        if kind == "board":
            spec = payload
            if spec.board_id in self.boards:
                raise BoardExists(f"Board {spec.board_id!r} already exists.", "board_id")
            self.boards[spec.board_id] = self._new_ctl(spec)
            records.append(R.board_record(spec))
            return lambda: self.boards.pop(spec.board_id, None)
        if kind == "state":
            board_id, state = payload
            ctl = self._ctl(board_id)
            before = (ctl.admission.state, ctl.admission.freeze_position)
            ctl.admission.state = next_state(ctl.admission.state, state)
            records.append(R.StateRecord(R.STATE, board_id, state.value))

            def undo():
                ctl.admission.state, ctl.admission.freeze_position = before
            return undo
        if kind == "schedule":  # what the schedule owes at the instant close_due read the clock
            board_id, now = payload
            ctl = self._ctl(board_id)
            before = (ctl.admission.state, ctl.admission.freeze_position)
            spec = ctl.spec
            for target in season.due(ctl.admission.state, spec.closes_at, spec.finalize_after_s, now).transitions:
                ctl.admission.state = next_state(ctl.admission.state, target)
                records.append(R.StateRecord(R.STATE, board_id, target.value))
                log.info("board %s: scheduled move to %s (closes_at %s)", board_id, target.value, spec.closes_at)

            def undo():
                ctl.admission.state, ctl.admission.freeze_position = before
            return undo
        if kind == "decide":
            d = payload
            ctl = self._ctl(d.board_id)
            pos = list(ctl.admission.held).index(d.event_id) if d.event_id in ctl.admission.held else None
            held = ctl.admission.take_decision(d.event_id, d.decision)
            records.append(R.decide_record(d.board_id, d.event_id, d.decision, d.reason, d.moderator, held))

            def undo():  # back in its log-order place, as a replay would list it
                ctl.admission.decided.pop(d.event_id, None)
                items = list(ctl.admission.held.items())
                items.insert(pos, (d.event_id, held))
                ctl.admission.held = dict(items)
            return undo
        if kind == "dead":  # dead-letter records (see _log_dead_letters)
            records.extend(payload)
            return lambda: self._dead_logged.difference_update(R.dead_letter_of(r).key for r in payload)
        if kind == "invalidate":
            inv = payload
            ctl = self._ctl(inv.board_id)
            ctl.admission.check_corrections_allowed()
            ctl.corrections += 1
            cid = f"correction:{inv.event_id}:{ctl.corrections}"
            records.append(R.InvalidationRecord(R.INVALIDATE, inv.board_id, inv.event_id, cid, inv.reason, inv.moderator))

            def undo():
                ctl.corrections -= 1
            return undo
        raise ValueError(kind)

    def _prepare_scores(self, batch: ScoreBatch, records: list, touched: set) -> list:
        """Admission for a score submission: each board's events are decided
        in order, then each partition's share becomes one columnar record.
        Returns per board of the batch its records: ``[(record index, rows)]``
        (``rows``: the board's row numbers in that record, in record order),
        or None for an unknown board (answered REJECTED_UNKNOWN_SEASON,
        nothing logged)."""
        places: list = []
        for cols in batch.boards:
            ctl = self.boards.get(cols.board_id)
            if ctl is None:
                places.append(None)
                continue
            touched.add(cols.board_id)
            verdicts = ctl.admission.decide_columns(cols)
            shards = ctl.spec.shards
            mine = []
            if shards == 1:
                records.append(R.scores_record(cols, 0, verdicts))
                mine.append((len(records) - 1, np.arange(len(cols))))
            else:
                parts = parts_of(cols.player_ids, shards)
                order = np.argsort(parts, kind="stable")
                bounds = np.searchsorted(parts[order], np.arange(shards + 1))
                for part in range(shards):
                    rows = order[bounds[part]:bounds[part + 1]]
                    if not len(rows):
                        continue
                    records.append(R.scores_record(cols.take(rows), part, verdicts[rows]))
                    mine.append((len(records) - 1, rows))
                self._held_in_log_order(ctl, cols, verdicts, order)
            places.append(mine)
        return places

    @staticmethod
    def _held_in_log_order(ctl: BoardCtl, cols: ScoreColumns, verdicts: np.ndarray, logged_order: np.ndarray) -> None:
        """The quarantine lists held events in log order, as a replay of the
        log rebuilds it: re-order this batch's holds (the newest entries)
        from arrival order to their order in the partitions' records."""
        held_codes = (R.CODE[Outcome.HELD_FOR_CORRECTION], R.CODE[Outcome.HELD_FOR_REVIEW])
        held_rows = logged_order[np.isin(verdicts[logged_order], held_codes)].tolist()
        if len(held_rows) < 2:
            return
        held = ctl.admission.held
        moved = {cols.event_ids[k]: held.pop(cols.event_ids[k]) for k in sorted(held_rows)}
        for k in held_rows:
            held[cols.event_ids[k]] = moved[cols.event_ids[k]]

    def _targets(self, rec: R.Record) -> list[int]:
        """The shard actors a record goes to."""
        kind = rec.kind
        if kind in R.SCORE_BATCHES:
            ctl = self.boards.get(rec.board_id)
            return [] if ctl is None else [ctl.part_actor[rec.partition]]
        if kind in R.BOARD_KINDS:
            return list(range(self.t.n))
        if kind in R.DECISIONS:
            ctl = self.boards[rec.board_id]
            return [ctl.part_actor[part_of(rec.player_id, ctl.spec.shards)]]
        if kind == R.INVALIDATE:
            return self.boards[rec.board_id].actors
        if kind == R.STATE and rec.state == BoardState.ARCHIVED.value:  # its partitions stop changing
            return self.boards[rec.board_id].actors
        if kind == R.DEAD_LETTER:  # every shard: the one that made it stops reporting it
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
                    if not sub[2].done():
                        sub[2].set_exception(err)
                await self._resync_after_failure()
            finally:
                self._inflight.task_done()

    async def _complete(self, cyc: _Cycle) -> None:
        answers = {}
        unlogged = []
        for a, f in cyc.futures.items():
            answers[a], dead = await f
            unlogged.extend(dead)
        logging_dead = self._log_dead_letters(unlogged) if unlogged else None
        cursor = {a: 0 for a in answers}
        records, targets = cyc.records, cyc.targets
        per_record: list = []  # per record: [(actor, answer)] from each shard it went to
        for where in targets:
            got = []
            for a in where:
                got.append((a, answers[a][cursor[a]]))
                cursor[a] += 1
            per_record.append(got)
        now = self.clock()
        new_deltas: dict[str, list[Delta]] = defaultdict(list)
        replies = []
        for kind, payload, fut, start, count, places in cyc.submissions:
            if kind == "score":
                answer = self._finish_scores(payload, places, records, per_record, new_deltas)
            elif count == 0:  # a schedule that found its transitions already made
                answer = None
            else:
                answer = self._finish_record(records[start], per_record[start], new_deltas)
            replies.append((fut, answer))
        if self.version_hooks:
            touched = {rec.board_id for rec in records if isinstance(rec.board_id, str) and rec.board_id in self.boards}
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
        """Queue a dead-letter record for each dead letter the shards report
        that is not logged (or being logged) yet; a future done once they
        are durable (None: nothing new). A shard reports a dead letter with
        every answer until the record comes back to it, so one whose append
        failed is tried again with the next cycle."""
        new: dict[tuple, R.DeadLetter] = {}
        for offset, board_id, event_id, error, *row in unlogged:
            d = R.DeadLetter(board_id if isinstance(board_id, str) else None, offset, row[0] if row else None,
                             event_id if isinstance(event_id, str) else None, error)
            if d.key not in self._dead_logged:
                new.setdefault(d.key, d)
        if not new:
            return None
        self._dead_logged.update(new)
        try:
            return self._put("dead", [R.dead_letter_record(d) for d in new.values()], len(new))
        except Exception:
            self._dead_logged.difference_update(new)
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
                       new_deltas) -> BatchResult:
        """One submission's answer as columns, in its event order: each
        board's version steps once per ranking change in that order (so k
        partitions number versions exactly as one does). Numpy over the
        shards' answer columns; Python work only per changed row (its delta)."""
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
            for at, rows in mine:
                actor, ans = per_record[at][0]
                codes_raw, rows_raw, values_raw, achieved_raw = ans
                bcodes[rows] = np.frombuffer(codes_raw, np.uint8)
                rec_rows = np.frombuffer(rows_raw, "<i4")
                if len(rec_rows):
                    brows = rows[rec_rows]
                    changed[brows] = True
                    ch_rows.append(brows)
                    ch_values.append(np.frombuffer(values_raw, "<i8"))
                    ch_achieved.append(np.frombuffer(achieved_raw, "<i8"))
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
            self._note_score_changes(ctl, cols, brows, values, achieved, actors, new_deltas, bool(self.listeners))
        return BatchResult(codes, versions)

    @staticmethod
    def _note_score_changes(ctl: BoardCtl, cols: ScoreColumns, brows: np.ndarray, values: np.ndarray,
                            achieved: np.ndarray, actors: np.ndarray, new_deltas, listening: bool) -> None:
        """The deltas of one board's changed rows (in submission order), whose
        versions the caller has already stepped ``ctl.version`` past: a row's
        metadata is now its event's (the new best, or the latest applied delta)."""
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
        ctl.ring.push_columns(pid_col, values, achieved, RowStatus.ACTIVE, metas)
        if listening:  # Delta records only for live subscribers
            active = RowStatus.ACTIVE
            new_deltas[ctl.spec.board_id].extend(
                Delta(v, (RowChange(p, value, at, active, meta),)) for v, p, value, at, meta in zip(
                    range(first, first + k), pid_col, values.tolist(), achieved.tolist(), metas or [None] * k))

    def _finish_record(self, rec: R.Record, got: list, new_deltas) -> object:
        kind = rec.kind
        ctl = self.boards.get(rec.board_id)
        if kind in R.DECISIONS:
            a, (code, change) = got[0]
            self._note_change(ctl, a, change, new_deltas)
            outcome = None if code == 0 else R.outcome_of(code)
            return DecisionResult(rec.event_id, rec.decision, outcome, ctl.version)
        if kind == R.INVALIDATE:
            for a, ans in got:
                if ans is not None:
                    pid, active, value, change, refused = ans
                    if refused:
                        return TotalOutOfRange.invalidating(rec.event_id, pid)
                    self._note_change(ctl, a, change, new_deltas)
                    status = RowStatus.ACTIVE if active else RowStatus.INVALIDATED
                    return InvalidationResult(rec.correction_id, pid, status, value if active else None, ctl.version)
            return EventNotFound(f"No applied event {rec.event_id!r} on board {rec.board_id!r}.", "event_id")
        return None

    def _note_change(self, ctl: BoardCtl, actor: int, change, new_deltas) -> None:
        if change is None:
            return
        ctl.version += 1
        ctl.actor_changes[actor] += 1
        meta = change[4] if len(change) > 4 and change[4] else None
        delta = Delta(ctl.version, (RowChange(change[0], change[1], change[2], _STATUS[change[3]], meta),))
        ctl.ring.push(delta)
        new_deltas[ctl.spec.board_id].append(delta)

    async def _resync_after_failure(self) -> None:
        try:
            await self.sync_versions()
        except Exception:
            log.exception("version resync failed; will retry on the next failure")

    # ------------------------------------------------------------------- reads

    def _ctl(self, board_id: str) -> BoardCtl:
        ctl = self.boards.get(board_id)
        if ctl is None:
            raise BoardNotFound(f"No board {board_id!r}.", "board_id")
        return ctl

    async def _fan(self, ctl: BoardCtl, make: Callable[[int], list], actors: Sequence[int] | None = None) -> dict:
        """One request per actor, all submitted in the same turn: a cut."""
        actors = ctl.actors if actors is None else actors
        futs = {a: self.reads.ask(a, make(a)) for a in actors}
        return {a: await f for a, f in futs.items()}

    async def _consistent(self, attempt: Callable[[], Awaitable[tuple[set, object]]], ctl: BoardCtl | None = None):
        """Run a read until every shard answered from the same log offset.
        ``ctl``: the board read (counted in ``shard_reads`` meanwhile, so an
        archive drops the shards' rows only once no read still needs them)."""
        if ctl is not None:
            ctl.shard_reads += 1
        try:
            for i in range(self.cfg.read_retries):
                offsets, result = await attempt()
                if len(offsets) <= 1:
                    return result
                await asyncio.sleep(0.002 * (i + 1))  # a shard replayed ahead: let dispatch catch up
            raise Overloaded("Shards are recovering; retry shortly.", retry_after=1)
        finally:
            if ctl is not None:
                ctl.shard_reads -= 1

    async def list_boards(self) -> list[BoardInfo]:
        return [await self.board(b) for b in sorted(self.boards)]

    async def board(self, board_id: str) -> BoardInfo:
        ctl = self._ctl(board_id)
        s = ctl.spec
        if ctl.archive is not None:
            info = ctl.archive.info
            return BoardInfo(s.board_id, s.policy, ctl.admission.state, info.version, info.ranked, s.shards,
                             s.max_plausible_time_ms, s.review_above, s.closes_at, s.finalize_after_s)

        async def attempt():
            answers = await self._fan(ctl, lambda a: ["size", board_id])
            version = sum(ans[0] for _, ans in answers.values())
            size = sum(ans[1] for _, ans in answers.values())
            return {o for o, _ in answers.values()}, (version, size)

        version, size = await self._consistent(attempt, ctl)
        s = ctl.spec
        return BoardInfo(s.board_id, s.policy, ctl.admission.state, version, size, s.shards,
                         s.max_plausible_time_ms, s.review_above, s.closes_at, s.finalize_after_s)

    async def top(self, board_id: str, offset: int, limit: int, at_version: int | None = None,
                  ties: bool = False) -> Page:
        """Ranks offset+1 .. offset+limit. Every page is cut from a prefix of
        the ranking that starts at rank 1, so tied ranks (``ties``) come from
        that prefix too, with no further shard call."""
        ctl = self._ctl(board_id)
        if ctl.archive is not None:
            return Page(self._archive_version(ctl, at_version, "page"), _archive_page(ctl.archive, offset, limit, ties))
        # A view materialised at the board's current version answers without
        # touching a shard: it is the state at a version every acknowledged
        # write has reached (ctl.version moves before acknowledgements go out).
        wanted = ctl.version if at_version is None else at_version
        view = self._view(board_id, wanted)
        if view is not None and (offset + limit <= len(view) or view.complete):
            return Page(wanted, _page_of(view, offset, limit, ties))
        pin = offset == 0 and at_version is None
        building = self._view_builds.get(board_id) if pin else None
        if building is not None:
            # One fan-out builds a board's view; the reads that arrive meanwhile
            # wait for it and use it if it is at the version current *now*
            # (which every acknowledged write has reached), else fetch their own.
            await asyncio.wait([building])
            wanted = ctl.version
            view = self._view(board_id, wanted)
            if view is not None and (limit <= len(view) or view.complete):
                return Page(wanted, _page_of(view, 0, limit, ties))
        n = offset + limit
        fetch = min(max(n, limit * self.cfg.pinned_pages), self.cfg.max_view_entries) if pin else n
        if pin and board_id not in self._view_builds:
            done = self._view_builds[board_id] = asyncio.get_running_loop().create_future()
            try:
                return await self._top_fetched(ctl, board_id, offset, limit, at_version, ties, pin, fetch)
            finally:
                del self._view_builds[board_id]
                done.set_result(None)
        return await self._top_fetched(ctl, board_id, offset, limit, at_version, ties, pin, fetch)

    async def _top_fetched(self, ctl: BoardCtl, board_id: str, offset: int, limit: int, at_version: int | None,
                           ties: bool, pin: bool, fetch: int) -> Page:
        """A top page from one fan-out of ``fetch`` entries per shard actor (and,
        for page 1, the view it leaves for the pages and reads after it)."""

        async def attempt():
            answers = await self._fan(ctl, lambda a: ["top", board_id, fetch])
            version = sum(ans[0] for _, ans in answers.values())
            lists = [_wire_entries(ans[1]) for _, ans in answers.values()]
            return {o for o, _ in answers.values()}, (version, lists)

        version, lists = await self._consistent(attempt, ctl)
        if at_version is not None and version != at_version:
            raise ViewExpired("That page's version is no longer retained: fetch page 1 again.", "cursor")
        merged = merge_top(lists, 0, fetch) if lists else []
        if pin and len(merged) > limit:
            complete = len(merged) < fetch
            self._remember_view(board_id, version, merged, complete)
        return Page(version, _page_of(merged, offset, limit, ties))

    def _view(self, board_id: str, version: int):
        key = (board_id, version)
        hit = self.views.get(key)
        if hit is None:
            return None
        born, entries = hit
        if self.clock() - born > self.cfg.view_ttl_s:
            del self.views[key]
            return None
        return entries

    def _remember_view(self, board_id: str, version: int, entries: list, complete: bool) -> None:
        self.views[(board_id, version)] = (self.clock(), _View(entries, complete))
        self.views.move_to_end((board_id, version))
        while len(self.views) > self.cfg.max_views:
            self.views.popitem(last=False)

    async def _locate(self, ctl: BoardCtl, player_id: str):
        owner = ctl.part_actor[part_of(player_id, ctl.spec.shards)]
        offset, (version_part, row, local) = await self.reads.ask(owner, ["get", ctl.spec.board_id, player_id])
        if row is None:
            raise PlayerNotFound(f"Player {player_id!r} has no row on board {ctl.spec.board_id!r}.", "player_id")
        return owner, offset, version_part, row, local

    async def player(self, board_id: str, player_id: str, ties: bool = False) -> PlayerView:
        """Exact rank in one parallel round when the player's rank key is known:
        the owner's row and local count, and on every other shard actor the
        count of keys before the key the row had when last read, all in one
        cut. The row read confirms the guess; if the key moved since (or was
        never seen) a second round counts with the row's key (with ``ties``,
        the same round also counts strictly better primary values everywhere)."""
        ctl = self._ctl(board_id)
        if ctl.archive is not None:
            arch, i = self._archived_row(ctl, player_id)
            view = arch.player(arch.info.version, i)
            return replace(view, tied_rank=arch.tied_rank(i)) if ties and view.rank is not None else view
        owner = ctl.part_actor[part_of(player_id, ctl.spec.shards)]
        others = [a for a in ctl.actors if a != owner]

        def counts(key: list | None) -> tuple[dict, dict]:
            """Submit (not await) the other actors' counts for ``key`` (their
            sizes for an unranked row) and, with ``ties``, the better-primary counts."""
            futs = {a: self.reads.ask(a, ["count", board_id, key] if key else ["size", board_id]) for a in others}
            probe = list(better_primary_probe(key[0])) if ties and key else None
            tfuts = {a: self.reads.ask(a, ["count", board_id, probe]) for a in ctl.actors} if probe else {}
            return futs, tfuts

        async def attempt():
            await self.cut.acquire_read()
            try:
                guess = self.rank_keys.get(board_id, player_id)
                got = self.reads.ask(owner, ["get", board_id, player_id])
                futs, tfuts = counts(guess) if guess is not None else ({}, {})  # same turn as the row read
                off, (vpart, row, local) = await got
                key = [row[6], row[7], row[0]] if row is not None and row[4] else None
                if row is None or guess is None or key != guess:
                    await asyncio.gather(*futs.values(), *tfuts.values(), return_exceptions=True)
                    if row is None:
                        self.rank_keys.forget(board_id, player_id)
                        raise PlayerNotFound(f"Player {player_id!r} has no row on board {board_id!r}.", "player_id")
                    self.rank_keys.put(board_id, player_id, key)
                    futs, tfuts = counts(key)  # the guess missed: a second round with the row's key
                answers = {a: await f for a, f in futs.items()}
                tanswers = {a: await f for a, f in tfuts.items()}
            finally:
                await self.cut.release_read()
            version = vpart + sum(ans[0] for _, ans in answers.values())
            rank = 1 + local + sum(ans[1] for _, ans in answers.values()) if row[4] else None
            offsets = {off} | {o for o, _ in answers.values()} | {o for o, _ in tanswers.values()}
            view = _player_view(version, row, rank)
            if tanswers:
                view = replace(view, tied_rank=1 + sum(ans[1] for _, ans in tanswers.values()))
            return offsets, view

        return await self._consistent(attempt, ctl)

    async def approximate_player(self, board_id: str, player_id: str) -> PlayerView:
        """Exact count on the player's own shard plus, for every other shard,
        an estimate from a sorted sample of its keys (every ``step``-th key).
        The estimate on a shard is off by less than ``step`` when the sample
        is fresh, plus one per change on that shard since: the stated bound
        is the sum, so the exact rank always lies within it."""
        ctl = self._ctl(board_id)
        if ctl.archive is not None:  # exact, and no slower
            arch, i = self._archived_row(ctl, player_id)
            return replace(arch.player(arch.info.version, i), approximate=True, rank_error_bound=0)
        owner, _, vpart, row, local = await self._locate(ctl, player_id)
        if not row[4]:
            return _player_view(ctl.version, row, None, approximate=True, bound=0)
        key = [row[6], row[7], row[0]]
        est, bound = 1 + local, 0
        for a in ctl.actors:
            if a == owner:
                continue
            sample = ctl.samples.get(a)
            drift = ctl.actor_changes[a] - sample[0] if sample else None
            if sample is None or drift > max(sample[1], 64):
                size_off, (_, size) = await self.reads.ask(a, ["size", board_id])
                step = max(1, -(-size // self.cfg.approx_sample_points))
                changes_now = ctl.actor_changes[a]
                _, (_, _, keys) = await self.reads.ask(a, ["sample", board_id, step])
                ctl.samples[a] = sample = (changes_now, step, keys)
                drift = ctl.actor_changes[a] - sample[0]
            _, step, keys = sample
            below = bisect.bisect_left(keys, key)
            # The true count on this shard lies in [below*step, below*step + parts*(step-1)]
            # at sampling time, and each later change moves it by at most one.
            spread = ctl.parts_on[a] * (step - 1)
            est += below * step + spread // 2
            bound += spread - spread // 2 + drift
        return _player_view(ctl.version, row, est, approximate=True, bound=bound)

    async def around(self, board_id: str, player_id: str, radius: int, ties: bool = False) -> Page:
        """The window around a player. With ``ties``, a second round in the
        same read cut counts the values strictly better than the window's first."""
        ctl = self._ctl(board_id)
        if ctl.archive is not None:
            arch, i = self._archived_row(ctl, player_id)
            if i >= arch.ranked:
                raise PlayerNotRanked(f"Player {player_id!r} is not ranked on board {board_id!r}.", "player_id")
            entries = arch.entries(i - radius, i + radius + 1)
            if ties:
                entries = with_tied_ranks(entries, arch.tied_rank(entries[0].rank - 1))
            return Page(arch.info.version, tuple(entries))

        owner = ctl.part_actor[part_of(player_id, ctl.spec.shards)]

        def window(key: list) -> dict:
            return {a: self.reads.ask(a, ["nbrs", board_id, key, radius, radius]) for a in ctl.actors}

        async def attempt():
            await self.cut.acquire_read()
            try:
                # As player(): with the last seen key, the row read and the
                # windows go out in one round; a moved key costs a second.
                guess = self.rank_keys.get(board_id, player_id)
                got = self.reads.ask(owner, ["get", board_id, player_id])
                futs = window(guess) if guess is not None else {}
                off, (_, row, _) = await got
                key = [row[6], row[7], row[0]] if row is not None and row[4] else None
                if key is None or key != guess:
                    await asyncio.gather(*futs.values(), return_exceptions=True)
                    self.rank_keys.put(board_id, player_id, key)
                    if row is None:
                        raise PlayerNotFound(f"Player {player_id!r} has no row on board {board_id!r}.", "player_id")
                    if key is None:
                        raise PlayerNotRanked(f"Player {player_id!r} is not ranked on board {board_id!r}.",
                                              "player_id")
                    futs = window(key)
                answers = {a: await f for a, f in futs.items()}
                rank = 1 + sum(ans[3] for _, ans in answers.values())
                conv = _wire_entries
                me = ((row[6], row[7], row[0]), row[1], row[2], row[8] if len(row) > 8 else None)
                entries = merge_window(rank, me, [conv(a[1]) for _, a in answers.values()],
                                       [conv(a[2]) for _, a in answers.values()], radius)
                offsets = {off} | {o for o, _ in answers.values()}
                if ties:
                    probe = list(better_primary_probe(self._wire_primary(ctl, entries[0].value)))
                    better = await self._fan(ctl, lambda a: ["count", board_id, probe])
                    offsets |= {o for o, _ in better.values()}
                    entries = with_tied_ranks(entries, 1 + sum(ans[1] for _, ans in better.values()))
            finally:
                await self.cut.release_read()
            version = sum(ans[0] for _, ans in answers.values())
            return offsets, Page(version, tuple(entries))

        return await self._consistent(attempt, ctl)

    @staticmethod
    def _archived_row(ctl: BoardCtl, player_id: str) -> tuple[ArchiveView, int]:
        arch = ctl.archive
        assert arch is not None
        i = arch.find(player_id)
        if i < 0:
            raise PlayerNotFound(f"Player {player_id!r} has no row on board {ctl.spec.board_id!r}.", "player_id")
        return arch, i

    @staticmethod
    def _archive_version(ctl: BoardCtl, at_version: int | None, what: str) -> int:
        """An archived board's version; a cursor pinned to another one is expired."""
        assert ctl.archive is not None
        version = ctl.archive.info.version
        if at_version is not None and at_version != version:
            raise ViewExpired(f"That {what}'s version is no longer retained: fetch page 1 again.", "cursor")
        return version

    @staticmethod
    def _wire_primary(ctl: BoardCtl, value: int) -> int:
        """The first item of a wire key with this value (negated on descending boards)."""
        return value if ctl.spec.policy is Policy.FASTEST_TIME else -value

    async def ranked_subset(self, board_id: str, player_ids: Sequence[str], ties: bool = False) -> Page:
        ctl = self._ctl(board_id)
        if ctl.archive is not None:
            local = ctl.archive.subset(player_ids)
            return Page(ctl.archive.info.version, tuple(with_tied_ranks(local, 1) if ties else local))
        by_actor: dict[int, list[str]] = defaultdict(list)
        for pid in dict.fromkeys(player_ids):
            by_actor[ctl.part_actor[part_of(pid, ctl.spec.shards)]].append(pid)

        async def attempt():
            answers = await self._fan(ctl, lambda a: ["mget", board_id, by_actor.get(a, [])])
            version = sum(ans[0] for _, ans in answers.values())
            entries = [e for _, ans in answers.values() for e in _wire_entries(ans[1])]
            local = rank_locally(entries)
            return {o for o, _ in answers.values()}, Page(version, tuple(with_tied_ranks(local, 1) if ties else local))

        return await self._consistent(attempt, ctl)

    async def changes(self, board_id: str, since_version: int | None, limit: int | None = None,
                      cursor: tuple[int, int] | None = None, deltas_only: bool = False,
                      ties: bool = False) -> Changes:
        """Contiguous deltas after ``since_version``, or one page of a snapshot
        (with ``ties``, its entries carry competition ranks, from the view).

        A snapshot is the whole ranked board at one version, served ``limit``
        rows (1..``max_snapshot_page``) at a time. Page 1 materialises the
        board once per (board, version) into the shared view cache; when rows
        remain it carries ``next_cursor = (version, offset)``, and a call with
        ``cursor`` serves the next page from that same version (``since_version``
        is then ignored) or raises ViewExpired once the view is gone and the
        board has moved on. Following the cursors yields every ranked row of
        the snapshot's version exactly once, in rank order, whatever writes
        arrive in between. ``deltas_only``: when the deltas are gone, answer an
        empty snapshot at the current version without reading any shard (the
        live hub, which keeps its own window). Page 1 costs O(n log k) for n
        ranked rows on k shards; later pages O(limit).
        """
        ctl = self._ctl(board_id)
        cap = self.cfg.max_snapshot_page
        limit = cap if limit is None else limit
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= cap:
            raise ValidationFailed(f"limit must be an integer in 1..{cap}.", "limit")
        if cursor is None:
            if since_version is None or since_version < 0:
                raise ValidationFailed("since_version must be >= 0.", "since_version")
            deltas = ctl.ring.since(since_version)
            if deltas is not None:
                return Changes("deltas", ctl.ring.version, from_version=since_version, deltas=tuple(deltas))
            if deltas_only:
                return Changes("snapshot", ctl.version)
            at_version, offset = None, 0
        else:
            at_version, offset = cursor
        if ctl.archive is not None:  # a board that no longer changes: pages straight from its archive
            version = self._archive_version(ctl, at_version, "snapshot")
            entries = _archive_page(ctl.archive, offset, limit, ties)
            more = offset + limit < ctl.archive.ranked
            return Changes("snapshot", version, entries=entries, next_cursor=(version, offset + limit) if more else None)
        version, view = await self._snapshot_view(ctl, at_version, keep=offset + limit)
        entries = _page_of(view, offset, limit, ties)
        more = offset + limit < len(view)
        return Changes("snapshot", version, entries=entries, next_cursor=(version, offset + limit) if more else None)

    async def _snapshot_view(self, ctl: BoardCtl, at_version: int | None, keep: int) -> tuple[int, list]:
        """The whole ranked board at ``at_version`` (None: now), from the view
        cache or materialised in one consistent cut. One view per (board,
        version) serves every client paging that version; it is cached when
        rows remain beyond ``keep`` and lives by the cache's rules (``view_ttl_s``,
        ``max_views``, ``max_snapshot_rows``), least recently read evicted first.
        Raises ViewExpired when ``at_version`` is neither cached nor current."""
        board_id = ctl.spec.board_id
        wanted = ctl.version if at_version is None else at_version
        view = self._view(board_id, wanted)
        if view is not None and view.complete:
            self.views.move_to_end((board_id, wanted))  # being paged: evict it last
            return wanted, view
        if at_version is not None:
            # Cheap check first: only a board still at that version can be re-read.
            if (await self.board(board_id)).version != at_version:
                raise ViewExpired("That snapshot's version is no longer retained: ask /changes again.", "cursor")

        async def attempt():
            answers = await self._fan(ctl, lambda a: ["top", board_id, _ALL])
            version = sum(ans[0] for _, ans in answers.values())
            lists = [_wire_entries(ans[1]) for _, ans in answers.values()]
            return {o for o, _ in answers.values()}, (version, lists)

        version, lists = await self._consistent(attempt, ctl)
        if at_version is not None and version != at_version:
            raise ViewExpired("That snapshot's version is no longer retained: ask /changes again.", "cursor")
        view = _View(merge_top(lists, 0, sum(map(len, lists))) if lists else [], True)
        if len(view) > keep:
            self._remember_view(board_id, version, view, True)
            self._trim_views(self.cfg.max_snapshot_rows)
        return version, view

    async def export(self, board_id: str, page_rows: int = 10_000, ties: bool = False) -> AsyncIterator[Chunk]:
        """Every ranked row of the board at one version, best first, as column
        chunks of at most ``page_rows`` rows (docs/api.md §13, export).

        The version is pinned without a copy of the board here: in one
        consistent cut every shard writes its partitions' ranked rows, in rank
        order, to spill files (:meth:`_spill`); this iterator then merges them
        a block at a time (:class:`engine.export.Merge`) and removes them when
        it ends, however it ends. Writes made meanwhile never show. An
        ARCHIVED board's chunks are slices of its archive. The first chunk
        comes even when the board is empty, so a caller learns the version
        before any row. ``ties``: chunks carry ``tied_rank`` (§13). Raises
        BoardNotFound on the first step. Memory: a block per partition and
        the chunk in hand, whatever the board's size; time O(n log k) for n
        rows over k partitions (the shards' writing included).
        """
        if isinstance(page_rows, bool) or not isinstance(page_rows, int) or page_rows < 1:
            raise ValidationFailed("page_rows must be a positive integer.", "page_rows")
        ctl = self._ctl(board_id)
        tied = TiedRanks() if ties else None
        if ctl.archive is not None:  # slices of the archive: nothing spilled
            arch = ctl.archive
            for start in range(0, max(arch.ranked, 1), page_rows):
                rows = _archive_block(arch, start, min(start + page_rows, arch.ranked))
                yield Chunk(arch.info.version, start + 1, rows, tied.of(start + 1, rows.value) if tied else None)
            return
        version, files = await self._spill(ctl, min(page_rows, self.cfg.export_block_rows))
        sources = await self._spill_sources(ctl, files)
        try:
            merge = Merge([f[4] for f in files])
            rank = 1
            while True:
                for s in merge.wants():
                    merge.feed(s, await sources[s].next())
                got = merge.take()
                if got is None:
                    break
                for a in range(0, got.rows, page_rows):
                    part = got.slice(a, min(a + page_rows, got.rows))
                    yield Chunk(version, rank, part, tied.of(rank, part.value) if tied else None)
                    rank += part.rows
            if rank == 1:
                yield Chunk(version, 1, Block.empty(), tied.of(1, Block.empty().value) if tied else None)
        finally:
            await self._close_sources(ctl, sources, files[0][1] if files else None)

    async def _spill(self, ctl: BoardCtl, block_rows: int) -> tuple[int, list]:
        """One consistent cut in which every shard writes the board's
        partitions to spill files: ``(version, [(actor, token, part, path,
        rows)])``. A cut whose shards answered from different log offsets is
        removed and taken again (:meth:`_consistent`)."""
        board_id = ctl.spec.board_id

        async def attempt():
            token = uuid.uuid4().hex
            try:
                answers = await self._fan(ctl, lambda a: ["spill", board_id, token, block_rows])
            except BaseException:
                await self._drop_spills(ctl, token)
                raise
            offsets = {o for o, _ in answers.values()}
            if len(offsets) > 1:
                await self._drop_spills(ctl, token)
            version = sum(ans[0] for _, ans in answers.values())
            files = [(a, token, part, path, rows) for a, (_, ans) in answers.items() for part, path, rows in ans[1]]
            return offsets, (version, files)

        return await self._consistent(attempt, ctl)

    async def _spill_sources(self, ctl: BoardCtl, files: list) -> list:
        """A block source per spill file: the file itself when this process
        can open it (its name removed at once, so the data goes with the last
        close whatever happens), else frames asked of its shard."""
        sources: list = []
        try:
            for actor, token, part, path, _ in files:
                reader = SpillReader.open(path, token) if self.cfg.export_read_files else None
                sources.append(_FileSource(reader) if reader is not None else
                               _ShardSource(self.reads, actor, ctl.spec.board_id, token, part))
        except BaseException:
            await self._close_sources(ctl, sources, None)
            await self._drop_spills(ctl, files[0][1])
            raise
        return sources

    async def _close_sources(self, ctl: BoardCtl, sources: list, token: str | None) -> None:
        """Close the open files; shards still holding files of ``token`` remove them."""
        for src in sources:
            if isinstance(src, _FileSource):
                src.close()
        remote = {src.actor for src in sources if isinstance(src, _ShardSource)}
        if token is not None and remote:
            await self._drop_spills(ctl, token, remote)

    async def _drop_spills(self, ctl: BoardCtl, token: str, actors: set | None = None) -> None:
        """Ask shards to remove the spill files of ``token`` (best effort: a
        shard that is down empties its spill directory when it starts)."""
        for a in ctl.actors if actors is None else sorted(actors):
            try:
                await self.reads.ask(a, ["spill_drop", ctl.spec.board_id, token])
            except Exception:
                log.warning("could not remove export spill files %s on shard %d", token, a)

    def _trim_views(self, max_rows: int) -> None:
        """Evict least recently used views until they hold at most ``max_rows``
        rows together (the newest view always stays)."""
        total = sum(len(v) for _, v in self.views.values())
        while total > max_rows and len(self.views) > 1:
            _, (_, old) = self.views.popitem(last=False)
            total -= len(old)

    async def quarantine(self, board_id: str) -> list[HeldEvent]:
        return list(self._ctl(board_id).admission.held.values())

    async def history(self, board_id: str, player_id: str) -> list[HistoryEntry]:
        ctl = self._ctl(board_id)
        if ctl.archive is not None:
            got = ctl.archive.history(player_id)
            if got is None:  # written by a FlowRank before archives kept the history (format 1)
                raise BoardArchived(f"Board {board_id!r} was archived without its event history (archive format 1); "
                                    "the event log still holds every event.", "board_id")
            return got
        owner = ctl.part_actor[part_of(player_id, ctl.spec.shards)]
        _, (_, items) = await self.reads.ask(owner, ["hist", board_id, player_id])
        return [HistoryEntry(h[0], h[1], h[2], h[3], h[5], h[6], h[7]) for h in items]

    async def checksum(self, board_id: str) -> Checksum:
        ctl = self._ctl(board_id)
        if ctl.archive is not None:
            return Checksum(ctl.archive.info.version, ctl.archive.info.checksum)

        async def attempt():
            answers = await self._fan(ctl, lambda a: ["sum", board_id])
            version = sum(ans[0] for _, ans in answers.values())
            total = checksum_mod.combine(int(ans[1], 16) for _, ans in answers.values())
            return {o for o, _ in answers.values()}, Checksum(version, checksum_mod.render(total))

        return await self._consistent(attempt, ctl)

    def subscribe(self, listener) -> Callable[[], None]:
        self.listeners.append(listener)
        return lambda: self.listeners.remove(listener) if listener in self.listeners else None


_ALL = 1 << 62  # a "top" read of every row


def epoch_ms() -> int:
    """The wall clock in epoch milliseconds (the default ``Router.wall_clock``)."""
    return time.time_ns() // 1_000_000


class _View(list):
    def __init__(self, entries, complete: bool):
        super().__init__(entries)
        self.complete = complete


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


def _size(item) -> int:
    kind, payload = item[0], item[1]
    return len(payload) if kind == "score" else 1


def _trim(samples: list, keep: int = 4096) -> None:
    if len(samples) > keep:
        del samples[: len(samples) - keep]


def _page_of(prefix, offset: int, limit: int, ties: bool) -> tuple:
    """``prefix[offset:offset + limit]`` of a ranking prefix that starts at rank 1."""
    page = prefix[offset:offset + limit]
    if ties and page:
        page = with_tied_ranks(page, first_tied_in_prefix(prefix, offset))
    return tuple(page)


class _FileSource:
    """Blocks of a spill file this process opened."""

    def __init__(self, reader: SpillReader) -> None:
        self.reader = reader

    async def next(self) -> Block:
        block = self.reader.next()
        if block is None:
            raise StorageUnavailable("An export's spill file ended early; retry the export.")
        return block

    def close(self) -> None:
        self.reader.close()


class _ShardSource:
    """Blocks of a spill file on a shard this process cannot open (another
    node): one shard read per block, the file's frames as the shard reads them."""

    def __init__(self, reads: _Reads, actor: int, board_id: str, token: str, part: int) -> None:
        self.reads, self.actor, self.board_id, self.token, self.part = reads, actor, board_id, token, part
        self.at: int | None = None

    async def next(self) -> Block:
        _, (_, (raw, at)) = await self.reads.ask(self.actor, ["spill_read", self.board_id, self.token, self.part,
                                                              self.at])
        if not raw:
            raise StorageUnavailable("An export's spill file ended early; retry the export.")
        self.at = at
        return Block.decode(raw)


def _archive_block(arch: ArchiveView, start: int, stop: int) -> Block:
    """Ranked rows ``start .. stop - 1`` of an archive as an export block (views of its columns)."""
    value, achieved = arch.value[start:stop], arch.achieved[start:stop]
    descending = arch.info.policy is not Policy.FASTEST_TIME
    io, mo = arch.id_offsets[start:stop + 1], arch.meta_offsets[start:stop + 1]
    if stop <= start:
        io = mo = np.zeros(1, np.int64)
    return Block(np.invert(value) if descending else value, achieved if descending else arch.submitted[start:stop],
                 value, achieved, arch.id_bytes[io[0]:io[-1]], io - io[0], arch.meta_bytes[mo[0]:mo[-1]], mo - mo[0])


def _archive_page(arch: ArchiveView, offset: int, limit: int, ties: bool) -> tuple:
    """Ranks offset+1 .. offset+limit of an archive (with ``ties``, competition ranks)."""
    page = arch.top(offset, limit)
    if ties and page:
        page = with_tied_ranks(page, arch.tied_rank(offset))
    return tuple(page)


def _wire_entries(es: list) -> list:
    """Shard wire entries (engine.shard.entry) as ranking entries
    ``(key, value, achieved_at, metadata)`` (metadata None when the row has none)."""
    return [((e[0], e[1], e[2]), e[3], e[4], e[5] if len(e) > 5 else None) for e in es]


def _player_view(version: int, row: list, rank: int | None, approximate: bool = False, bound: int | None = None) -> PlayerView:
    status = RowStatus.ACTIVE if row[4] else RowStatus.INVALIDATED
    return PlayerView(version, row[0], rank if row[4] else None, row[1], row[2], status, row[5], approximate,
                      bound if approximate else None, metadata=row[8] if len(row) > 8 else None)

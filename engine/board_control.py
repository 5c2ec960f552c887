"""Board control: the router's board registry and every change to a board's life.

:class:`BoardRegistry` is what the router keeps per board (:class:`BoardCtl`:
spec, admission, version, delta ring, placement of its partitions on shard
actors) and the log offset that state reflects; the sequencer and the read
fan-out share it. :class:`BoardControl` creates boards, starts the next
season, changes a board's state (each through the sequencer, so it lands at
one log position), runs the season timer that makes scheduled transitions,
archives an ARCHIVED board (its rows to an archive file, then the shard
actors drop theirs), and rebuilds the registry on recovery (``fold`` of the
log tail, ``to_state`` / ``load_state`` of a snapshot, ``sync_versions``
from the shard actors).

Naming: a board has ``spec.shards`` *partitions* (the public field keeps the
name ``shards``; it counts partitions); partition ``p`` lives on *shard actor*
``part_actor[p]`` (:mod:`engine.placement`), a process that hosts partitions
of many boards.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Awaitable, Callable, NamedTuple, Sequence

import numpy as np

from engine import records as R
from engine import season
from engine import wire as W
from engine.admission import Admission
from engine.archive import ArchiveHistory, ArchiveView, encode, rows_from_wire
from engine.changes import ChangeRing
from engine.errors import BoardNotFound, StorageUnavailable, ValidationFailed
from engine.formats import ROUTER_STATE_FORMAT, state_format
from engine.gc_tuning import release_memory
from engine.journal import JournalColumns
from engine.log.archives import ArchiveStore, MemoryArchiveStore
from engine.model import (
    DEFAULT_DEDUP_RETENTION,
    DEFAULT_DELTA_RETENTION,
    BoardInfo,
    BoardSpec,
    BoardState,
)
from engine.placement import actor_of
from engine.subscores import check_directions

if TYPE_CHECKING:
    from engine.fanout import ReadFanOut
    from engine.sequencer import Sequencer

log = logging.getLogger("flowrank.router")


@dataclass
class RouterConfig:
    """The router's settings (every part of it reads them)."""

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
    export_read_files: bool = True  # open spill files here when possible (False: always ask the shard actors; tests)
    schedule_poll_s: float = 0.5  # the season timer re-reads the wall clock at least this often (clock steps)
    history_chunk_rows: int = 1 << 20  # an archive reads a partition's journal this many rows per call


class KeySample(NamedTuple):
    """Every ``step``-th ranked key of a board's partitions on one shard actor,
    taken when the board had ``changes`` ranking changes there."""

    changes: int
    step: int
    keys: list


@dataclass
class BoardCtl:
    """What the router keeps per board: admission, versions, deltas, and where
    its partitions live (``part_actor``: partition -> shard actor; ``actors``:
    the shard actors hosting any of them)."""

    spec: BoardSpec
    admission: Admission
    ring: ChangeRing
    actors: list[int]
    version: int = 0
    corrections: int = 0
    actor_changes: dict[int, int] = field(default_factory=lambda: defaultdict(int))
    samples: dict[int, KeySample] = field(default_factory=dict)  # actor -> its last key sample (approximate ranks)
    parts_on: dict[int, int] = field(default_factory=dict)  # actor -> how many of the board's partitions it hosts
    part_actor: list[int] = field(default_factory=list)  # partition -> actor hosting it
    archive: ArchiveView | None = None  # ARCHIVED and written: every read answers from it
    shard_reads: int = 0  # reads asking the shard actors now (an archive waits for them before the drop)


class BoardRegistry:
    """The boards the router knows (``boards``: id -> :class:`BoardCtl`) and
    the log offset their state reflects (``log_offset``: the last record
    sequenced or folded in). Shared by the sequencer, the read fan-out and
    board control."""

    def __init__(self, n_actors: int, config: RouterConfig | None = None):
        self.n_actors = n_actors  # shard actors behind the transport
        self.cfg = config or RouterConfig()
        self.boards: dict[str, BoardCtl] = {}
        self.log_offset = -1

    def ctl(self, board_id: str) -> BoardCtl:
        """The board's control state; BoardNotFound when there is none."""
        ctl = self.boards.get(board_id)
        if ctl is None:
            raise BoardNotFound(f"No board {board_id!r}.", "board_id")
        return ctl

    def new_ctl(self, spec: BoardSpec) -> BoardCtl:
        """Control state for a new board: each partition placed on its shard actor."""
        part_actor = [actor_of(spec.board_id, p, self.n_actors) for p in range(spec.shards)]
        return BoardCtl(spec, Admission(spec, self.cfg.dedup_retention), ChangeRing(self.cfg.delta_retention),
                        sorted(set(part_actor)), parts_on=dict(Counter(part_actor)), part_actor=part_actor)


class BoardControl:
    """Board lifecycle: create, next season, state changes (through the
    sequencer), the season timer, archiving, and the registry's recovery."""

    def __init__(self, registry: BoardRegistry, sequencer: "Sequencer", fanout: "ReadFanOut",
                 archives: ArchiveStore | None = None, wall_clock: Callable[[], int] | None = None):
        self.registry = registry
        self.boards = registry.boards
        self.cfg = registry.cfg
        self.sequencer = sequencer
        self.fanout = fanout
        self.archives: ArchiveStore = MemoryArchiveStore() if archives is None else archives
        # Epoch ms: the only clock scheduled season transitions read (tests pass a fake one).
        self.wall_clock: Callable[[], int] = wall_clock or epoch_ms
        self._sched_wake: asyncio.Event | None = None
        # Awaited before the shard actors drop an archived board's rows: an engine host
        # (engine.engine_host) waits there until no gateway's read replica still reads them.
        self.drop_barriers: list[Callable[[str], Awaitable]] = []

    def start(self) -> list[asyncio.Task]:
        """Start the season timer; its task."""
        self._sched_wake = asyncio.Event()
        return [asyncio.ensure_future(self._season_timer())]

    # ------------------------------------------------------------- recovery

    def fold(self, offset: int, rec) -> None:
        """Replay one log record into the registry (recovery; no I/O). The
        sequencer folds what it keeps itself (:meth:`engine.sequencer.Sequencer.fold`)."""
        rec = R.parse(rec)
        kind = rec.kind
        if kind in R.BOARD_KINDS:
            spec = R.spec_of(rec)
            self.boards.setdefault(spec.board_id, self.registry.new_ctl(spec))
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
        self.registry.log_offset = offset

    def to_state(self) -> dict:
        return {
            "format": ROUTER_STATE_FORMAT,
            "log_offset": self.registry.log_offset,
            "boards": [
                [R.board_record(c.spec), c.admission.to_state(), c.corrections] for c in self.boards.values()
            ],
        }

    def load_state(self, state: dict) -> None:
        state_format(state, ROUTER_STATE_FORMAT, "router snapshot")
        self.registry.log_offset = state["log_offset"]
        for rec, adm, corrections in state["boards"]:
            spec = R.spec_of(rec)
            ctl = self.registry.new_ctl(spec)
            ctl.admission = Admission.from_state(spec, self.cfg.dedup_retention, adm)
            ctl.corrections = corrections
            self.boards[spec.board_id] = ctl

    async def sync_versions(self) -> None:
        """Read every board's version from the shard actors (after recovery)
        and restart each delta ring there: older versions answer with a snapshot."""
        for ctl in self.boards.values():
            board_id = ctl.spec.board_id
            if ctl.admission.state is BoardState.ARCHIVED and ctl.archive is None:
                ctl.archive = await asyncio.to_thread(self.archives.open, board_id)
            if ctl.archive is not None:  # its rows live in the archive: the shard actors drop theirs (again)
                ctl.version = ctl.archive.info.version
                await self.fanout.fan(ctl, lambda a: W.Drop(W.DROP, board_id))
            else:
                answers = await self.fanout.fan(ctl, lambda a: W.Size(W.SIZE, board_id))
                ctl.version = sum(ans.version for _, ans in answers.values())
            ctl.ring.reset(ctl.version)
            ctl.actor_changes.clear()
            ctl.samples.clear()

    # ------------------------------------------------------------- lifecycle

    async def create_board(self, spec: BoardSpec) -> BoardInfo:
        """Log the board; a ``closes_at`` already past freezes it (and
        finalizes it, if that is due too) right after, before this returns."""
        if spec.shards < 1:
            raise ValidationFailed("shards must be at least 1.", "shards")
        check_directions(spec.policy, list(spec.subscores))
        season.check_schedule(spec.closes_at, spec.finalize_after_s)
        await self.sequencer.submit_board(spec)
        if spec.closes_at is not None:
            await self.close_due([spec.board_id])
            self.wake_season_timer()  # its next wake-up may now be sooner
        return await self.fanout.board(spec.board_id)

    async def next_season(self, board_id: str, season_name: str, closes_at: int | None,
                          finalize_after_s: int | None = None) -> BoardInfo:
        """Create ``game:mode:<season_name>:scope`` with ``board_id``'s settings
        (:func:`engine.season.next_season`). Raises BoardNotFound, BoardExists,
        ValidationFailed."""
        spec = season.next_season(self.registry.ctl(board_id).spec, season_name, closes_at, finalize_after_s)
        return await self.create_board(spec)

    async def set_state(self, board_id: str, state: BoardState) -> BoardInfo:
        ctl = self.registry.ctl(board_id)
        await self.sequencer.submit_state(board_id, state)
        if state is BoardState.ARCHIVED:
            try:
                await self._archive(ctl)
            except Exception:  # the state is durable; the next start builds the archive
                log.exception("archiving board %r failed; its rows stay on the shard actors until a restart "
                              "builds the archive", board_id)
        return await self.fanout.board(board_id)

    # ---------------------------------------------------------------- archive

    async def finish_archiving(self) -> None:
        """Build the archive of every ARCHIVED board that has none (a crash
        came between the ARCHIVED record and the archive's rename): the shard
        actors replayed its rows from the log. Run once the router has started."""
        for ctl in list(self.boards.values()):
            if ctl.admission.state is BoardState.ARCHIVED and ctl.archive is None:
                await self._archive(ctl)

    async def _archive(self, ctl: BoardCtl) -> None:
        """Write the board's rows to its archive, then have the shard actors drop them.

        Runs after the ARCHIVED record applied, so no later record changes the
        rows and the archive is the same whenever it is built. Order (docs/
        recovery.md): read every row in one cut; encode; save (temp file, fsync,
        rename); read it back; switch the board's reads to it; wait for reads
        already asking the shard actors; drop. A crash before the rename leaves no
        archive (the next start builds it); after it, a finished one."""
        board_id = ctl.spec.board_id
        if ctl.archive is not None:
            return

        async def attempt():
            answers = await self.fanout.fan(ctl, lambda a: W.Rows(W.ROWS, board_id))
            return {o for o, _ in answers.values()}, answers

        answers = await self.fanout.consistent(attempt, ctl)
        got = [ans for _, ans in answers.values()]
        version = sum(ans.version for ans in got)
        parts = [cols for ans in got for cols in ans.value]
        if len(parts) != ctl.spec.shards:
            raise StorageUnavailable(f"Board {board_id!r} is ARCHIVED but its archive is missing and the shard actors no "
                                     "longer hold its rows: restore the archive file from a backup.")
        found = await asyncio.to_thread(self.archives.open, board_id)  # finished before a crash: keep it
        if found is None:
            rows = rows_from_wire(parts)
            del got, parts, answers
            history = await self._history_of(ctl)
            subs = {"subscores": ctl.spec.subscores} if ctl.spec.subscores else {}  # (docs/api.md §14)
            chunks = await asyncio.to_thread(encode, board_id, ctl.spec.policy, version, rows, history, **subs)
            del rows, history
            await asyncio.to_thread(self.archives.save, board_id, chunks)
            del chunks
            found = await asyncio.to_thread(self.archives.open, board_id)
        if found is None or found.info.version != version or found.info.board_id != board_id:
            raise StorageUnavailable(f"The archive of board {board_id!r} does not hold its rows at version "
                                     f"{version}; its rows stay on the shard actors.", retry_after=1)
        ctl.archive = found
        ctl.version = version
        for barrier in self.drop_barriers:  # reads in other processes (engine.read_replica)
            await barrier(board_id)
        while ctl.shard_reads:  # reads that chose the shard actors before the switch
            await asyncio.sleep(0.002)
        await self.fanout.fan(ctl, lambda a: W.Drop(W.DROP, board_id))
        await asyncio.to_thread(release_memory)  # the build's buffers (and in-process shard actors' rows) go back
        log.info("board %r archived at version %d: %d rows", board_id, version, len(found))

    async def _history_of(self, ctl: BoardCtl) -> ArchiveHistory:
        """Every journal row of an ARCHIVED board, read from each partition in
        chunks of ``cfg.history_chunk_rows`` (one read per chunk, its rows as
        numpy columns). The shard actors no longer change an ARCHIVED board's
        partitions, so the chunks need no common cut."""
        board_id, step = ctl.spec.board_id, self.cfg.history_chunk_rows
        parts = []
        for part, actor in enumerate(ctl.part_actor):
            chunks, ids, start, total = [], None, 0, 1
            while start < total:
                _, got = await self.fanout.reads.ask(actor, W.HCols(W.HCOLS, board_id, part, start, step))
                if got.value is None:
                    raise StorageUnavailable(f"Board {board_id!r} is ARCHIVED but partition {part} is no longer on "
                                             "its shard actor: restore the archive file from a backup.")
                chunk = W.HistoryChunk._make(got.value)
                total = chunk.total
                ids = chunk.ids if chunk.ids is not None else ids
                cols = JournalColumns.from_wire(chunk.columns)
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
                    waits.append(self.sequencer.submit_schedule(board_id, now))  # queued in this turn, in board order
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
        while not self.sequencer.closing:
            self._sched_wake.clear()
            try:
                wake_at = await self.close_due()
            except Exception:
                if self.sequencer.closing:
                    return
                log.exception("scheduled season transitions failed; retrying")
                wake_at = None
            poll = self.cfg.schedule_poll_s
            delay = poll if wake_at is None else min(poll, max(0.001, (wake_at - self.wall_clock()) / 1000))
            try:
                await asyncio.wait_for(self._sched_wake.wait(), delay)
            except asyncio.TimeoutError:
                pass


def epoch_ms() -> int:
    """The wall clock in epoch milliseconds (the default ``wall_clock``)."""
    return time.time_ns() // 1_000_000

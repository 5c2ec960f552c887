"""Board control: every change to a board's life.

:class:`BoardControl` creates boards, starts the next season, changes a
board's state (each through the sequencer, so it lands at one log position),
runs the season timer that makes scheduled transitions, archives an ARCHIVED
board (its rows to an archive file, then the shard actors drop theirs), and
keeps the registry's snapshot (``to_state`` / ``load_state``) and versions
(``sync_versions`` from the shard actors). The registry itself and its one
fold live in :mod:`engine.router.registry`.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from typing import Awaitable, Callable, Iterable, Protocol, Sequence

import numpy as np

from engine.core import records as R
from engine.core import season
from engine.core import wire as W
from engine.core.admission import Admission
from engine.core.archive import ArchiveHistory, encode, rank_order, rows_from_wire
from engine.core.league import TierMoves, check_league, next_tiers
from engine.core.erasure import ErasureTable
from engine.core.prizes import AwardTable, award_parts, award_record, board_awards, check_prizes
from engine.core.errors import FlowRankError, StorageUnavailable, ValidationFailed
from engine.core.formats import ROUTER_STATE_FORMAT, state_format
from engine.core.gc_tuning import release_memory
from engine.core.journal import JournalColumns
from engine.log.archives import ArchiveStore, MemoryArchiveStore
from engine.core.model import (
    BoardInfo,
    BoardSpec,
    BoardState,
)
from engine.router.decide import Submission
from engine.router.registry import BoardCtl, BoardRegistry
from engine.core.subscores import check_directions
from engine.core.windows import instance_id, window_of


log = logging.getLogger("flowrank.router")


class Writes(Protocol):
    """What board control needs of the sequencer (:class:`engine.router.ingest.Sequencer`)."""

    closing: bool

    async def submit_board(self, spec: BoardSpec) -> None: ...

    async def enqueue(self, kind, payload, n: int): ...

    async def submit_state(self, board_id: str, state: BoardState) -> None: ...

    def submit_schedule(self, board_id: str, now_ms: int) -> asyncio.Future: ...

    def submit_instance(self, series_id: str) -> asyncio.Future: ...


class Reads(Protocol):
    """What board control needs of the read fan-out (:class:`engine.router.reads.ReadFanOut`)."""

    reads: object

    async def fan(self, ctl: BoardCtl, make: Callable[[int], tuple], actors: Sequence[int] | None = None) -> dict: ...

    async def consistent(self, attempt: Callable[[], Awaitable[tuple[set, object]]], ctl: BoardCtl | None = None): ...

    async def board(self, board_id: str) -> BoardInfo: ...


class BoardControl:
    """Board lifecycle: create, next season, state changes (through the
    sequencer), the season timer, archiving, and the registry's recovery."""

    def __init__(self, registry: BoardRegistry, sequencer: Writes, fanout: Reads,
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
        self._keeping = asyncio.Lock()  # enforce_keep, one at a time
        self._awarding: dict[str, asyncio.Lock] = {}  # settle_awards, one run per board at a time
        self._helper: ProcessPoolExecutor | None = None  # ranks big boards' awards (spawned on demand)
        self._helper_lock = threading.Lock()
        self._settling: dict[str, asyncio.Task] = {}  # board -> the task logging the awards the schedule owes
        self.keeping: asyncio.Task | None = None  # the season timer's enforce_keep, running behind it
        # Awaited before the shard actors drop an archived board's rows: an engine host
        # (engine.runtime.host) waits there until no gateway's read replica still reads them.
        self.drop_barriers: list[Callable[[str], Awaitable]] = []

    def start(self) -> list[asyncio.Task]:
        """Start the season timer; its task."""
        self._sched_wake = asyncio.Event()
        return [asyncio.ensure_future(self._season_timer())]

    # ------------------------------------------------------------- recovery

    def to_state(self) -> dict:
        safe = self.registry.outbox_safe
        return ({} if safe is None else {"outbox_safe": safe()}) | {
            "format": ROUTER_STATE_FORMAT,
            "log_offset": self.registry.log_offset,
            "boards": [
                [R.board_record(c.spec), c.admission.to_state(), c.corrections]
                + ([c.awards.to_state()] if c.awards is not None else []) for c in self.boards.values()
            ],
        } | ({"erasures": self.registry.erasures.to_state()} if len(self.registry.erasures) else {}) | (
            # additive (docs/api.md §18): the instances of league series whose carried tiers are logged
            {"carried": carried} if (carried := sorted(b for b, c in self.boards.items() if c.carried)) else {})

    def load_state(self, state: dict) -> None:
        state_format(state, ROUTER_STATE_FORMAT, "router snapshot")
        self.registry.log_offset = state["log_offset"]
        self.registry.loaded_outbox_safe = state.get("outbox_safe")  # additive (webhooks on when it was taken)
        self.registry.erasures = ErasureTable.from_state(state.get("erasures", []))  # additive (docs/api.md §17)
        for rec, adm, corrections, *awards in state["boards"]:
            spec = R.spec_of(rec)
            ctl = self.registry.new_ctl(spec)
            ctl.admission = Admission.from_state(spec, self.cfg.dedup_retention, adm)
            ctl.admission.erasure_secret = self.cfg.erasure_secret
            ctl.corrections = corrections
            if awards and spec.prizes:
                ctl.awards = AwardTable.from_state(spec.board_id, spec.prizes, awards[0])
            self.registry.add(ctl)
        for board_id in state.get("carried", []):
            self.boards[board_id].carried = True

    async def sync_versions(self, board_ids: Iterable[str] | None = None) -> None:
        """Read every board's version (or those of ``board_ids``: a standby's followed records) from the
        shard actors (after recovery) and restart each delta ring there: older versions answer with a
        snapshot."""
        ctls = (self.boards.values() if board_ids is None else
                [self.boards[b] for b in sorted(board_ids) if b in self.boards])
        for ctl in ctls:
            board_id = ctl.spec.board_id
            if board_ids is not None and ctl.admission.state is BoardState.ARCHIVED and ctl.archive is None:
                continue  # its archive is the active node's file (docs/operations.md: standbys and archives)
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

    async def create_board(self, spec: BoardSpec, carried: TierMoves | None = None) -> BoardInfo:
        """Log the board; a ``closes_at`` already past freezes it (and
        finalizes it, if that is due too) right after, before this returns.
        ``carried``: the tiers a league's next season carries (logged with it)."""
        if spec.shards < 1:
            raise ValidationFailed("shards must be at least 1.", "shards")
        check_directions(spec.policy, list(spec.subscores))
        season.check_schedule(spec.closes_at, spec.finalize_after_s)
        check_competition(spec)
        if carried is None:
            await self.sequencer.submit_board(spec)
        else:
            await self.sequencer.enqueue(Submission.LEAGUE_BOARD, (spec, carried), 1)
        if spec.recurrence is not None:
            self.wake_season_timer()  # its next wake-up may now be this series' next window
        if spec.closes_at is not None:
            await self.close_due([spec.board_id])
            self.wake_season_timer()  # its next wake-up may now be sooner
        return await self.fanout.board(spec.board_id)

    async def next_season(self, board_id: str, season_name: str, closes_at: int | None,
                          finalize_after_s: int | None = None) -> BoardInfo:
        """Create ``game:mode:<season_name>:scope`` with ``board_id``'s settings
        (:func:`engine.core.season.next_season`). Raises BoardNotFound, BoardExists,
        ValidationFailed."""
        ctl = self.registry.ctl(board_id)
        spec = season.next_season(ctl.spec, season_name, closes_at, finalize_after_s)
        league = ctl.admission.league
        if league is None:
            return await self.create_board(spec)
        check_competition(spec)  # before reading the rows: a refused spec reads nothing
        # a league's next season carries its players' tiers (docs/api.md §16), by the ranking now
        if ctl.archive is not None:  # an ARCHIVED league: its archive holds the ranked rows, best first
            arch = ctl.archive
            moves = await asyncio.to_thread(next_tiers, league, arch.id_bytes, arch.id_offsets,
                                            np.arange(arch.ranked, dtype=np.int64))
        else:
            rows, _ = await self._rows(ctl)
            order = rank_order(ctl.spec.policy, rows, ctl.spec.subscores)[:int(np.count_nonzero(rows.active))]
            moves = await asyncio.to_thread(next_tiers, league, rows.id_bytes, rows.id_offsets, order)
        return await self.create_board(spec, moves)

    async def set_state(self, board_id: str, state: BoardState) -> BoardInfo:
        ctl = self.registry.ctl(board_id)
        await self.sequencer.submit_state(board_id, state)
        if ctl.carry_due:  # an instance of a league series froze: the tiers it carries (docs/api.md §18)
            await self.carry_tiers(board_id)
        if state is BoardState.FROZEN:
            self.prepare_awards(board_id)
        if state is BoardState.FINALIZED:
            await self.settle_awards(board_id)
        if state is BoardState.ARCHIVED:
            try:
                await self._archive(ctl)
            except Exception:  # the state is durable; the next start builds the archive
                log.exception("archiving board %r failed; its rows stay on the shard actors until a restart "
                              "builds the archive", board_id)
        return await self.fanout.board(board_id)

    # ----------------------------------------------------------------- awards

    async def settle_awards(self, board_id: str) -> None:
        """Compute and log the awards of a board with prizes that became
        FINALIZED without them (docs/api.md §16): every row read in one cut
        once the FINALIZED record applied (no correction is decided between
        that record and the awards, :mod:`engine.router.decide`, so these are
        the rows at its log position), ranked, awarded, then logged as ``A``
        records, one submission per part so ingest goes on in between.
        Idempotent; one run per board at a time."""
        ctl = self.registry.ctl(board_id)
        if not ctl.awards_due:
            return
        lock = self._awarding.setdefault(board_id, asyncio.Lock())
        async with lock:
            if not ctl.awards_due or ctl.awards is None:
                return
            parts, n, version = await self._row_chunks(ctl)
            spec, league = ctl.spec, ctl.admission.league
            args = (spec.policy, spec.subscores, spec.prizes, parts, league)
            if n >= self.cfg.awards_process_rows:  # a big board: ranked in a helper process, whose numba
                # kernels and sorts then never hold this interpreter's lock (the event loop's writes wait on it)
                helper = await asyncio.to_thread(self.ensure_helper)
                awards = await asyncio.get_running_loop().run_in_executor(helper, board_awards, *args)
            else:
                awards = await asyncio.to_thread(board_awards, *args)
            del parts, args
            n_parts = award_parts(awards)
            for k in range(len(ctl.awards.offsets), n_parts):  # each part its own submission: ingest goes on between
                await self.sequencer.enqueue(Submission.AWARDS, (board_id, [award_record(board_id, version, awards, k)]),
                                             1)
            log.info("board %r finalized: %d awards logged in %d parts", board_id, len(ctl.awards), n_parts)

    async def finish_awards(self) -> None:
        """Log the awards a crash left unlogged (a board FINALIZED whose awards are not all in the log), and the
        tiers an instance of a league series carries (FROZEN without its ``Y`` record). At start."""
        for board_id, ctl in list(self.boards.items()):
            if ctl.carry_due:
                await self.carry_tiers(board_id)
            if ctl.awards_due:
                await self.settle_awards(board_id)

    async def carry_tiers(self, board_id: str) -> None:
        """Log the tiers an instance of a league series carries to its series now that it is FROZEN (docs/api.md
        §18), by the next-season rule (:func:`engine.core.league.next_tiers`) over its rows read in one cut
        once the FROZEN record applied: until the ``Y`` record is logged no correction or decision changes the
        rows and nobody enters another instance of the series (:mod:`engine.router.decide`), so these are the
        rows, and the tiers, at the FROZEN record's position. Idempotent; one run per board at a time."""
        ctl = self.registry.ctl(board_id)
        if not ctl.carry_due:
            return
        lock = self._awarding.setdefault("carry:" + board_id, asyncio.Lock())
        async with lock:
            league = ctl.admission.league
            if not ctl.carry_due or league is None or ctl.spec.series is None:
                return
            if ctl.archive is not None:  # archived by an admin before the carry (its archive: ranked rows, best first)
                arch = ctl.archive
                moves = await asyncio.to_thread(next_tiers, league, arch.id_bytes, arch.id_offsets,
                                                np.arange(arch.ranked, dtype=np.int64))
            else:
                rows, _ = await self._rows(ctl)
                order = rank_order(ctl.spec.policy, rows, ctl.spec.subscores)[:int(np.count_nonzero(rows.active))]
                moves = await asyncio.to_thread(next_tiers, league, rows.id_bytes, rows.id_offsets, order)
            await self.sequencer.enqueue(Submission.SERIES_CARRY, (board_id, moves), 1)
            log.info("instance %r froze: tiers of %d players carried to series %r", board_id, len(moves.tiers),
                     ctl.spec.series)

    async def _carry_then_settle(self, board_id: str) -> None:
        await self.carry_tiers(board_id)
        await self.settle_awards(board_id)

    def _settle_later(self, board_id: str) -> None:
        """Settle the board's awards in a task of their own (one at a time per board: the timer asks every tick)."""
        if board_id in self._settling:
            return
        task = asyncio.ensure_future(self._carry_then_settle(board_id))
        self._settling[board_id] = task
        task.add_done_callback(lambda t: self._settling.pop(board_id, None))
        task.add_done_callback(_log_awards_failure)

    async def _rows(self, ctl: BoardCtl, missing: str | None = None, unchanging: bool = False):
        """Every row of the board, read in one cut: (ArchiveRows, version).
        ``missing``: the StorageUnavailable message when the shard actors no longer hold them.
        ``unchanging``: nothing changes the board's rows any more (FINALIZED with its awards due, or
        ARCHIVED): read each partition in chunks of ``cfg.row_chunk_rows``, so no single call holds a
        shard actor (and the writes and reads of other boards queued on it) for long."""
        board_id = ctl.spec.board_id
        if unchanging:
            return await self._rows_in_chunks(ctl, missing)

        async def attempt():
            answers = await self.fanout.fan(ctl, lambda a: W.Rows(W.ROWS, board_id))
            return {o for o, _ in answers.values()}, answers

        answers = await self.fanout.consistent(attempt, ctl)
        got = [ans for _, ans in answers.values()]
        version = sum(ans.version for ans in got)
        parts = [cols for ans in got for cols in ans.value]
        if len(parts) != ctl.spec.shards:
            raise StorageUnavailable(missing or f"The rows of board {board_id!r} are no longer on the shard actors.")
        return await asyncio.to_thread(rows_from_wire, parts), version  # 1M rows: ~0.1 s, off the event loop

    async def _rows_in_chunks(self, ctl: BoardCtl, missing: str | None):
        parts, _, version = await self._row_chunks(ctl, missing)
        return await asyncio.to_thread(rows_from_wire, parts), version

    async def _row_chunks(self, ctl: BoardCtl, missing: str | None = None) -> tuple[list, int, int]:
        """Every row of an unchanging board as wire column chunks (:meth:`_rows`): (chunks, rows, version)."""
        board_id, step = ctl.spec.board_id, self.cfg.row_chunk_rows
        n = 0
        parts: list = []
        versions: dict[int, int] = {}
        for part, actor in enumerate(ctl.part_actor):
            start, total = 0, 1
            while start < total:
                _, got = await self.fanout.reads.ask(actor, W.RCols(W.RCOLS, board_id, part, start, step))
                if got.value is None:
                    raise StorageUnavailable(missing or f"The rows of board {board_id!r} are no longer on the shard "
                                             "actors.")
                versions[actor] = got.version
                total, cols = got.value
                parts.append(cols)
                got_n = len(cols[1]) // 8 - 1
                n += got_n
                start += max(got_n, 1)
        return parts, n, sum(versions.values())

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

        rows, version = await self._rows(ctl, f"Board {board_id!r} is ARCHIVED but its archive is missing and the "
                                              "shard actors no longer hold its rows: restore the archive file from a "
                                              "backup.", unchanging=True)
        found = await asyncio.to_thread(self.archives.open, board_id)  # finished before a crash: keep it
        if found is None:
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
        for barrier in self.drop_barriers:  # reads in other processes (engine.runtime.replica)
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

    async def close_due(self, board_ids: Sequence[str] | None = None, keep_behind: bool = False) -> int | None:
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
                    self.prepare_awards(board_id)
                if d.wake_at is not None and (wake_at is None or d.wake_at < wake_at):
                    wake_at = d.wake_at
        finally:
            done = await asyncio.gather(*waits, return_exceptions=True)  # what was queued is answered
        for outcome in done:
            if isinstance(outcome, BaseException):
                raise outcome
        for board_id in list(self.boards if board_ids is None else board_ids):
            ctl = self.boards.get(board_id)
            if ctl is not None and (ctl.awards_due or ctl.carry_due):  # by the schedule: its awards (and an
                self._settle_later(board_id)  # instance's carried tiers, docs/api.md §18), behind the timer
        if board_ids is None:  # every board: series windows too
            starts = await self.series_due(now, keep_behind)
            if starts is not None and (wake_at is None or starts < wake_at):
                wake_at = starts
        return wake_at

    async def series_due(self, now: int, keep_behind: bool = False) -> int | None:
        """What the series owe at ``now`` (docs/api.md §15): every series whose
        current window has no instance gets it, through the sequencer (a logged
        submission that creates it only if still missing when its turn comes, so
        a server that was down creates it at start); then :meth:`enforce_keep`
        (``keep_behind``: in a task of its own, so that the season timer never
        waits for an archive to be written before the next scheduled close).
        Returns when the next window of any series starts (None: no series)."""
        waits, wake_at = [], None
        try:
            for board_id, ctl in list(self.boards.items()):
                rec = ctl.spec.recurrence
                if rec is None or ctl.admission.state is BoardState.ARCHIVED:
                    continue
                w = window_of(rec, now)
                if instance_id(board_id, w) not in self.boards:
                    waits.append(self.sequencer.submit_instance(board_id))
                if wake_at is None or w.end_ms < wake_at:
                    wake_at = w.end_ms
        finally:
            done = await asyncio.gather(*waits, return_exceptions=True)
        for outcome in done:
            if isinstance(outcome, BaseException):
                raise outcome
        if not keep_behind:
            await self.enforce_keep()
        elif self.keeping is None or self.keeping.done():
            self.keeping = asyncio.ensure_future(self.enforce_keep())
            self.keeping.add_done_callback(_log_failure)
        return wake_at

    async def enforce_keep(self) -> None:
        """Whenever more than ``keep`` instances of a series are unarchived,
        archive the oldest FINALIZED ones (as an admin's ARCHIVED: the state
        through the sequencer, then the archive) until ``keep`` remain or no
        FINALIZED one is left to archive."""
        async with self._keeping:  # one at a time (the timer's and a start's): each sees what the last archived
            for board_id, ctl in list(self.boards.items()):
                await self._keep(board_id, ctl)

    async def _keep(self, board_id: str, ctl: BoardCtl) -> None:
        rec = ctl.spec.recurrence
        if rec is not None:
            live = [i for i in self.registry.instances_of(board_id)
                    if self.boards[i].admission.state is not BoardState.ARCHIVED]
            excess = len(live) - rec.keep
            for iid in reversed(live):  # oldest window first
                if excess <= 0:
                    break
                if self.boards[iid].admission.state is BoardState.FINALIZED:
                    try:
                        await self.set_state(iid, BoardState.ARCHIVED)
                    except FlowRankError:  # archived meanwhile (an admin): nothing left to do for it
                        log.warning("archiving instance %r of series %r for keep=%d failed", iid, board_id,
                                    rec.keep, exc_info=True)
                    excess -= 1

    def ensure_helper(self) -> ProcessPoolExecutor:
        """The helper process that ranks big boards' awards (and rewrites big archives for an erasure), started
        (and answering) now if it was not.
        Blocking: run it in a thread (starting a process costs ~0.1 s of this interpreter)."""
        with self._helper_lock:
            if self._helper is None:
                helper = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
                helper.submit(abs, 0).result()
                self._helper = helper
            return self._helper

    def prepare_awards(self, board_id: str) -> None:
        """A board with prizes froze: its FINALIZED (and awards) may follow soon. Start the helper
        process now, in the background, so that finalizing never waits for it."""
        ctl = self.boards.get(board_id)
        if ctl is not None and ctl.awards is not None and self._helper is None:
            task = asyncio.ensure_future(asyncio.to_thread(self.ensure_helper))
            task.add_done_callback(_log_awards_failure)

    def close(self) -> None:
        """Stop the helper process, if one was started."""
        if self._helper is not None:
            self._helper.shutdown(wait=False, cancel_futures=True)
            self._helper = None

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
                wake_at = await self.close_due(keep_behind=True)
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


def check_competition(spec: BoardSpec) -> None:
    """ValidationFailed for competition settings a board cannot have (docs/api.md §16). Every combination
    with a recurrence and subscores is allowed (docs/api.md §18): a series' instances copy them."""
    if spec.league is not None:
        check_league(spec.league)
    check_prizes(spec.prizes)


def _log_awards_failure(task: asyncio.Task) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("computing awards failed; the next start (or the next admin move) logs them",
                  exc_info=task.exception())


def _log_failure(task: asyncio.Task) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("archiving series instances beyond keep failed; the season timer tries again",
                  exc_info=task.exception())


def epoch_ms() -> int:
    """The wall clock in epoch milliseconds (the default ``wall_clock``)."""
    return time.time_ns() // 1_000_000

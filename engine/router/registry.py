"""The router's board registry: what it keeps per board, and the one fold that changes it.

:class:`BoardRegistry` holds a :class:`BoardCtl` per board (spec, admission,
version, delta ring, placement of its partitions on shard actors), the dead
letters already logged, and the log offset that state reflects. The
sequencer, the read fan-out and board control share it; :class:`CutLock`
(shared by the sequencer and the fan-out) lives here too, so none of them
imports another.

:meth:`BoardRegistry.apply` is the only mutator of admission state and the
registry: the sequencer calls it for each record once the record is durable,
and recovery calls it for each record of the log tail. One function, two
callers (docs/consistency.md, "One path"): there is no undo, because nothing
changes before a record is durable (:mod:`engine.router.decide` decides against the
registry plus the cycle's overlay without changing either).

Naming: a board has ``spec.shards`` *partitions* (the public field keeps the
name ``shards``; it counts partitions); partition ``p`` lives on *shard actor*
``part_actor[p]`` (:mod:`engine.core.placement`), a process that hosts partitions
of many boards.
"""

from __future__ import annotations

import asyncio
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Callable, NamedTuple

import numpy as np

from engine.core import records as R
from engine.core.admission import Admission
from engine.core.archive import ArchiveView
from engine.core.changes import ChangeRing
from engine.core.columns import ScoreColumns
from engine.core.erasure import ErasureTable, events_of
from engine.core.errors import BoardNotFound
from engine.core.model import DEFAULT_DEDUP_RETENTION, DEFAULT_DELTA_RETENTION, BoardSpec, BoardState
from engine.core.placement import actor_of
from engine.core.prizes import AwardTable
from engine.core.rank_keys import RankKeyCache
from engine.core.windows import instance_id, window_of


@dataclass
class RouterConfig:
    """The router's settings (every part of it reads them)."""

    dedup_retention: int = DEFAULT_DEDUP_RETENTION
    delta_retention: int = DEFAULT_DELTA_RETENTION
    max_queued_events: int = 200_000  # back-pressure: beyond this, OVERLOADED
    max_board_queued_events: int = 100_000  # per board, so one hot board cannot take the whole queue
    max_cycle_events: int = 20_000  # events appended with one fsync
    appends_in_flight: int = 2  # cycles whose log append may be in flight at once (engine.router.ingest; 1: serial)
    pinned_pages: int = 5  # page 1 materialises this many pages for its cursor
    max_view_entries: int = 2_000
    view_ttl_s: float = 120.0
    max_views: int = 256
    rank_key_cache: int = 1 << 18  # slots of the rank-key guesses (engine.core.rank_keys): 6 MiB
    # a board with at most this many rows gets a rank mirror beside the router (engine.core.rank_mirror) on its
    # first exact-rank read: ~90 B a row here; 0: none, every exact rank asks the shard actors
    rank_mirror_rows: int = 4_000_000
    rank_mirror_retry_s: float = 30.0  # after a mirror could not be built or followed, the fan-out path meanwhile
    rank_mirror_idle_s: float = 900.0  # a mirror no exact-rank read used this long is dropped (yesterday's window)
    read_retries: int = 5
    approx_sample_points: int = 256
    max_snapshot_page: int = 10_000  # /changes snapshot: largest (and default) page (docs/api.md §9)
    max_snapshot_rows: int = 4_000_000  # rows all cached snapshot views may hold together
    export_block_rows: int = 16_384  # rows per spill block: an export holds one per partition
    export_read_files: bool = True  # open spill files here when possible (False: always ask the shard actors; tests)
    schedule_poll_s: float = 0.5  # the season timer re-reads the wall clock at least this often (clock steps)
    history_chunk_rows: int = 1 << 20  # an archive reads a partition's journal this many rows per call
    row_chunk_rows: int = 1 << 16  # awards and archives read a partition's rows this many per call
    awards_process_rows: int = 200_000  # a board with this many rows is ranked for its awards in a helper process
    erasure_secret: bytes = b""  # keys the hashes an erasure keeps of event ids and player ids (docs/api.md §17)


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
    awards: AwardTable | None = None  # a board with prizes: its awards as logged (docs/api.md §16)
    carried: bool = False  # an instance of a league series: its Y record (the tiers it carries) is folded

    @property
    def carry_due(self) -> bool:
        """An instance of a league series that became FROZEN (or later) without the tiers it carries to its
        series logged yet (docs/api.md §18): until they are, nothing changes its rows and nobody enters
        another instance of its series (:mod:`engine.router.decide`)."""
        return (not self.carried and self.spec.series is not None and self.admission.league is not None
                and self.admission.state is not BoardState.OPEN)

    @property
    def awards_due(self) -> bool:
        """A board with prizes that became FINALIZED (or later) without all its awards logged yet."""
        return (self.awards is not None and not self.awards.complete
                and self.admission.state in (BoardState.FINALIZED, BoardState.ARCHIVED))


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
        # (offset, row) of every dead letter logged (engine.core.records.DeadLetter): one record each
        self.dead_logged: set[tuple[int, int | None]] = set()
        # guesses of players' rank keys: filled by reads and by every acknowledged score change
        self.rank_keys = RankKeyCache(self.cfg.rank_key_cache)
        # series id -> {window start (epoch ms): instance id} of its instances (docs/api.md §15)
        self.instances: dict[str, dict[int, str]] = {}
        # the webhook outbox's delivery state of awards (docs/api.md §16), set when webhooks are on:
        # (board_id, [(log offset of the award's A record, index within it)]) -> [(delivery, attempts)]
        self.delivery: Callable[[str, list], list] | None = None
        # the webhook feed (engine.runtime.outbox_feed), when webhooks are on: called with every folded T and A
        # record; and the log offset up to which its messages are all in the outbox (kept in router snapshots)
        self.on_record: Callable[[int, object], None] | None = None
        self.outbox_safe: Callable[[], int] | None = None
        self.loaded_outbox_safe: int | None = None  # what the router snapshot recovery loaded kept of it
        self.erasures = ErasureTable()  # every erasure logged (docs/api.md §17), never a player id

    def add(self, ctl: BoardCtl) -> None:
        """Keep a new board's control state (and index it under its series, for an instance; an instance of
        a league series places players at the tiers its series carried: docs/api.md §18)."""
        spec = ctl.spec
        self.boards[spec.board_id] = ctl
        if spec.series is not None and spec.window is not None:
            self.instances.setdefault(spec.series, {})[spec.window[0]] = spec.board_id
            series = self.boards.get(spec.series)
            if ctl.admission.league is not None and series is not None:
                ctl.admission.league.base = series.admission.league

    def carry_pending(self, series_id: str) -> str | None:
        """An instance of the series whose carried tiers are due (:attr:`BoardCtl.carry_due`), None if none."""
        for iid in self.instances.get(series_id, {}).values():
            ctl = self.boards.get(iid)
            if ctl is not None and ctl.carry_due:
                return iid
        return None

    def current_instance(self, series_id: str, now_ms: int) -> str | None:
        """The instance reads on the series answer from at ``now_ms``: the one
        of the window containing it; until the season timer has created that
        one (an instant at a window's start), the latest that started before it."""
        rec = self.boards[series_id].spec.recurrence
        assert rec is not None
        iid = instance_id(series_id, window_of(rec, now_ms))
        if iid in self.boards:
            return iid
        got = self.instances.get(series_id, {})
        started = [start for start in got if start <= now_ms]
        return got[max(started)] if started else None

    def instances_of(self, series_id: str) -> list[str]:
        """The instance ids of a series, latest window first."""
        got = self.instances.get(series_id, {})
        return [got[start] for start in sorted(got, reverse=True)]

    def ctl(self, board_id: str) -> BoardCtl:
        """The board's control state; BoardNotFound when there is none."""
        ctl = self.boards.get(board_id)
        if ctl is None:
            raise BoardNotFound(f"No board {board_id!r}.", "board_id")
        return ctl

    def new_ctl(self, spec: BoardSpec) -> BoardCtl:
        """Control state for a new board: each partition placed on its shard actor."""
        part_actor = [actor_of(spec.board_id, p, self.n_actors) for p in range(spec.shards)]
        admission = Admission(spec, self.cfg.dedup_retention)
        admission.erasure_secret = self.cfg.erasure_secret
        return BoardCtl(spec, admission, ChangeRing(self.cfg.delta_retention),
                        sorted(set(part_actor)), parts_on=dict(Counter(part_actor)), part_actor=part_actor,
                        # a series holds no rows: its instances award (docs/api.md §18)
                        awards=AwardTable(spec.board_id, spec.prizes) if spec.prizes and spec.recurrence is None
                        else None)

    def apply(self, offset: int, rec, memo=None) -> None:
        """Fold one logged record in: the same call for a record just made
        durable (the sequencer, with the ``memo`` its decision left) and for a
        record replayed from the log (recovery, no memo). No I/O. Records of
        unknown boards and kinds the router keeps nothing of change only
        ``log_offset``."""
        rec = R.parse(rec)
        kind = rec.kind
        if kind in R.BOARD_KINDS:
            spec = R.spec_of(rec)
            if spec.board_id not in self.boards:
                self.add(self.new_ctl(spec))
        elif kind == R.GROUP:  # each part as the C / M record it holds
            memos = [None] * len(rec.parts) if memo is None else memo.parts  # type: ignore[attr-defined]
            for part, part_memo in zip(R.group_parts(rec), memos):
                self._apply_scores(part, part_memo)
        elif kind == R.DEAD_LETTER:
            self.dead_logged.add(R.dead_letter_of(rec).key)
        elif kind == R.ERASE:
            self._apply_erase(offset, rec)
        elif kind == R.ERASED:
            self.erasures.fold_complete(rec)
        else:
            if self.on_record is not None and kind in (R.STATE, R.AWARDS):  # webhook messages (docs/api.md §16)
                self.on_record(offset, rec)
            ctl = self.boards.get(rec.board_id) if isinstance(rec.board_id, str) else None
            if ctl is not None:
                if kind in R.SCORE_BATCHES:
                    self._apply_scores(rec, memo)
                elif kind == R.SCORE:  # one event per record (logs written before columnar batches)
                    ev = R.event_of(rec)
                    ctl.admission.apply_scores(ScoreColumns.from_events([ev], ev.board_id),
                                               np.array([rec.verdict], np.uint8))
                elif kind == R.STATE:
                    ctl.admission.apply_state(BoardState(rec.state), offset)
                elif kind in R.DECISIONS:
                    ctl.admission.apply_decision(rec.event_id, rec.decision)
                elif kind == R.INVALIDATE:
                    ctl.corrections += 1
                elif kind == R.JOIN:  # docs/api.md §16: changes no board version
                    ctl.admission.apply_join(rec.player_id, rec.position)
                elif kind == R.JOINS:  # docs/api.md §18: a request's joins, as one record
                    ctl.admission.apply_joins(rec.player_ids, rec.first)
                elif kind == R.ENTER:
                    if ctl.admission.league is not None:
                        ctl.admission.league.place(rec.player_ids)
                elif kind == R.CARRY:
                    if ctl.admission.league is not None:
                        ctl.admission.league.carry(*R.carried_of(rec))
                elif kind == R.SERIES_CARRY:  # docs/api.md §18: an instance's zones move its series' tiers
                    series = self.boards.get(rec.series)
                    if not ctl.carried and series is not None and series.admission.league is not None:
                        series.admission.league.carry(*R.carried_of(rec))
                    ctl.carried = True
                elif kind == R.AWARDS:
                    if ctl.awards is not None:
                        ctl.awards.fold(offset, rec)
        self.log_offset = offset

    def _apply_erase(self, offset: int, rec: R.ErasureRecord) -> None:
        """An erasure (docs/api.md §17): every listed board forgets the player (and the pseudonym the
        rewritten log names them by): held and decided events, entry, cohort, awards; their events' ids
        leave the dedup window for keyed hashes."""
        self.erasures.fold_erase(offset, rec)
        ids = [x for x in (rec.player_id, rec.pseudonym) if x is not None]
        for ev in events_of(rec):
            ctl = self.boards.get(ev.board_id)
            if ctl is None:
                continue
            ctl.admission.erase(ids, ev)
            if ctl.awards is not None:
                ctl.awards.erase(ids)
            series = self.boards.get(ctl.spec.series) if ctl.spec.series is not None else None
            if series is not None and series.admission.league is not None:  # the tier carried for them (§18)
                series.admission.league.erase(ids)

    def _apply_scores(self, rec, memo) -> None:
        ctl = self.boards.get(rec.board_id)
        if ctl is None:
            return
        if memo is None:
            cols, verdicts = R.columns_of(rec)
            ctl.admission.apply_scores(cols, verdicts)
        else:
            ctl.admission.apply_scores(memo.cols, memo.verdicts, memo.words, memo.fps)


class ScoreMemo(NamedTuple):
    """What deciding a score record already computed, handed to
    :meth:`BoardRegistry.apply` with the record so the live fold does not
    parse the record or hash its ids again (replay computes the same)."""

    cols: ScoreColumns
    verdicts: np.ndarray
    words: np.ndarray
    fps: np.ndarray


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



"""One shard: the partitions of many boards that live on one shard actor.

``ShardCore`` is plain Python (the Ray actor in :mod:`engine.cluster` only
forwards to it). It applies the log records the router sends it, each
batch carrying its log offsets, and ignores offsets it has already applied
(Ray delivers at least once); it answers reads in batches; it snapshots
itself as plain data and replays the shared log from its snapshot's offset.
Arguments and answers are the named tuples of :mod:`engine.core.wire` (the
router's vocabulary too), which travel between processes as msgpack arrays:
read requests (one op name each), replies, rows (:class:`~engine.core.wire.RowWire`),
entries (:class:`~engine.core.wire.Entry`), changes (:class:`~engine.core.wire.ChangeWire`)
and apply results. Log records arrive as :mod:`engine.core.records` records.

Naming: a *shard actor* is this process (``index`` among ``n_actors``); it
hosts some *partitions* of many boards (a board's players are hashed across
its ``spec.shards`` partitions, placed on actors by :mod:`engine.core.placement`).
"""

from __future__ import annotations

import hashlib
import heapq
import logging
import os
import shutil
import tempfile
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor, wait
from itertools import islice
from typing import Iterable

import numpy as np

from engine.core import records as R
from engine.core import wire as W
from engine.core.columns import ScoreColumns
from engine.core.formats import SHARD_STATE_FORMAT, state_format
from engine.core.model import BoardSpec, Outcome
from engine.core.journal import Journal, JournalPlace, MergePlan, build_merge
from engine.log.framing import unpack_payload
from engine.log.journal_files import FilePlace
from engine.log.spill import read_frame, remove_dir, remove_spills, reset_dir, spill_path, write_spill
from engine.core.partition import KIND_DECISION, Applied, Partition, Row
from engine.core.placement import actor_of, part_of

log = logging.getLogger("flowrank.shard")

RESULT_CACHE = 4_096  # per-record results kept for re-delivered batches ...
RESULT_CACHE_BYTES = 16 << 20  # ... and at most this many bytes of them (a 10k-event batch's answer is ~170 kB)
DEAD = R.CODE[Outcome.DEAD_LETTERED]
UNKNOWN_SEASON = R.CODE[Outcome.REJECTED_UNKNOWN_SEASON]
ACTIVE = "ACTIVE"
ARCHIVED = "ARCHIVED"


_NONE = object()


def _result_nbytes(result) -> int:
    """Approximate bytes a cached answer holds: its byte strings, one level deep, plus a fixed overhead."""
    if isinstance(result, (bytes, bytearray)):
        return 64 + len(result)
    if isinstance(result, (list, tuple)):
        return 64 + sum(len(x) if isinstance(x, (bytes, bytearray)) else 32 for x in result)
    return 64


def _dead_key(d: list) -> tuple[int, int | None]:
    """A dead letter's ``(offset, row)`` (row None unless it is a row of a columnar record)."""
    return W.ShardDeadLetter(*d).key


#: Builds a named tuple from its items without the Python-level ``__new__`` (half the cost):
#: a read makes an entry per ranked row it returns (a snapshot, every row of the board).
_tuple_new = tuple.__new__


def entry(row) -> W.Entry:
    k = row.key
    if row.subscores is not None:  # a board with subscores: key (primary, *mid, tie, player_id)
        return _tuple_new(W.Entry, (k[0], k[-2], row.player_id, row.value, row.achieved_at, row.metadata or None,
                                    list(k[1:-2]), list(row.subscores)))
    return _tuple_new(W.Entry, (k[0], k[1], row.player_id, row.value, row.achieved_at, row.metadata or None))


def _subs_entry_key(e: W.Entry) -> tuple:
    """A subscores board's entry in rank order: ``(primary, *mid, tie, player_id)``."""
    mid: list = e[6] or []
    return (e[0], *mid, e[1], e[2])


def _merged(lists: list[list[W.Entry]]):
    """Entry lists (each in rank order) merged in rank order. An entry sorts
    as a tuple ``(primary, tie, player_id, ...)``; on a board with subscores
    the key puts the subscores (``mid``) between primary and tie."""
    if any(len(x[0]) > 6 for x in lists if x):
        return heapq.merge(*lists, key=_subs_entry_key)
    return heapq.merge(*lists)


def row_wire(row) -> W.RowWire:
    k = row.key
    if row.subscores is not None:
        return W.RowWire(row.player_id, row.value, row.achieved_at, row.submitted_at, k is not None, row.row_version,
                         k[0] if k else None, k[-2] if k else None, row.metadata or None,
                         list(k[1:-2]) if k else None, list(row.subscores))
    return W.RowWire(row.player_id, row.value, row.achieved_at, row.submitted_at, k is not None, row.row_version,
                     k[0] if k else None, k[1] if k else None, row.metadata or None)


def change_wire(change) -> W.ChangeWire | None:
    if change is None:
        return None
    if change.subscores is not None:
        return W.ChangeWire(change.player_id, change.value, change.achieved_at, change.status.value,
                            change.metadata or None, list(change.subscores))
    return W.ChangeWire(change.player_id, change.value, change.achieved_at, change.status.value,
                        change.metadata or None)


class ShardCore:
    def __init__(self, index: int, n_actors: int, journals: JournalPlace = JournalPlace()):
        """Shard actor ``index`` of ``n_actors``. ``journals``: where its
        partitions' journals live (default: in memory)."""
        self.index = index
        self.n_actors = n_actors
        self.journals = journals
        self.specs: dict[str, BoardSpec] = {}
        self.parts: dict[str, dict[int, Partition]] = {}  # board -> part number -> partition
        # Boards whose ARCHIVED record applied here: their partitions no longer change (a score
        # event is only held, as after the drop), so the history an archive copies is the same
        # whenever it is built (docs/storage.md, "Archives").
        self.archived: set[str] = set()
        self.applied_offset = -1
        # [offset, board_id, event_id, error] (+ row of a columnar record): engine.core.wire.ShardDeadLetter as kept
        self.dead_letters: list[list] = []
        self._dead_offsets: set[int] = set()
        self._dead_rows: set[tuple[int, int]] = set()  # (offset, row) of columnar records
        # Dead letters the log holds no dead-letter record of yet, by (offset, row): reported to
        # the router with every apply answer until their record comes back (docs/recovery.md).
        self._unlogged: dict[tuple[int, int | None], list] = {}
        # What replay must skip: the log's dead-letter records, by the offset they name.
        self._skip: dict[int, list[R.DeadLetter]] = {}
        self._results: OrderedDict[int, list | None] = OrderedDict()
        self._result_board: dict[int, str] = {}  # offset -> board of a cached result (dropped with the board)
        self._result_bytes: dict[int, int] = {}  # offset -> approximate bytes of a cached result
        self.result_cache_bytes = 0
        self.spill_dir: str | None = None  # export spill files (engine.log.spill); None: a temp dir on first use
        self._own_spill_dir = False
        # export spill writes on a spill thread (spill / spill_written); None: none started yet
        self._spiller: ThreadPoolExecutor | None = None
        self._spills: dict[str, Future] = {}  # token -> its files' write
        self._spills_dropped: set[str] = set()  # tokens dropped while their write ran
        # journal run merges on a worker thread (merge_in_background); None: inline, in the flush
        self._merger: ThreadPoolExecutor | None = None
        self._merges_due: dict[Journal, None] = {}  # journals a flush left a merge due in (insertion order)
        self._merging: dict[Journal, tuple[MergePlan, Future]] = {}

    # ------------------------------------------------------------------ writes

    def apply(self, through: int, items: list) -> W.ApplyAnswer:
        """Apply ``items`` (:class:`engine.core.wire.ApplyItem`, in log order) and mark every
        offset up to ``through`` applied. Returns ``(results, unlogged)``: each
        item's result, and every dead letter of this shard the log holds no
        dead-letter record of yet (``[offset, board_id, event_id, error]`` plus
        the row of a columnar record; the router logs them, and a dead-letter
        record applied here ends their reporting). Items already applied (a
        retried or replayed batch) answer from the result cache, unchanged. A
        score batch is one columnar record, applied as one batch."""
        out = []
        for item in items:
            offset, rec, ids_new = W.ApplyItem(*item)
            if isinstance(rec, bytes):  # as the log framed it: the sequencer packed it once
                rec = unpack_payload(rec)
            if offset <= self.applied_offset:
                out.append(self._results.get(offset, W.EventApplied(DEAD, None)))
            else:
                out.append(self._apply_record(offset, rec, ids_new))
        if through > self.applied_offset:
            self.applied_offset = through
        if self._merger is not None:
            self.tend_merges()
        return W.ApplyAnswer(out, list(self._unlogged.values()))

    def replay(self, records: Iterable[tuple[int, list]], dead: dict | None = None) -> int:
        """Fold the log tail into this shard, keeping only its own records,
        through the same apply as live. ``dead``: the dead letters the log
        holds (:func:`engine.core.records.dead_letters_in` of a scan that covers
        at least these records): what they name is skipped, as the live run
        skipped it, whatever apply would do today. Returns how many records
        were applied here."""
        if dead:
            self.skip(dead.values())
        n = 0
        for offset, rec in records:
            if offset <= self.applied_offset:
                continue
            rec = R.parse(rec, offset)
            if self.owns(rec):
                self._apply_record(offset, rec)
                n += 1
            self.applied_offset = offset
        return n

    def skip(self, dead: Iterable[R.DeadLetter]) -> None:
        """Remember dead letters the log holds: replay skips what they name
        (a decision, not a failure: no apply is tried), and a dead letter made
        here before is no longer reported as unlogged."""
        for d in dead:
            if d not in self._skip.setdefault(d.offset, []):
                self._skip[d.offset].append(d)
            self._unlogged.pop(d.key, None)

    def owns(self, rec) -> bool:
        """Whether a log record concerns a partition on this shard actor."""
        rec = R.parse(rec)
        kind = rec.kind
        if kind in R.BOARD_KINDS or kind == R.DEAD_LETTER:
            return True
        if kind == R.ERASE:
            return bool(self.parts)
        if kind == R.ERASED:
            return False
        if kind == R.GROUP:
            return any(self._hosts(part[1], part[2]) for part in rec.parts)
        spec = self.specs.get(rec.board_id)
        if spec is None:
            return False
        if kind in R.SCORE_BATCHES:
            return rec.partition in self.parts.get(spec.board_id, ())
        if kind == R.SCORE or kind in R.DECISIONS:  # self.parts holds only the partitions placed here
            return part_of(rec.player_id, spec.shards) in self.parts.get(spec.board_id, ())
        if kind == R.INVALIDATE:
            return spec.board_id in self.parts
        if kind == R.STATE:
            return rec.state == ARCHIVED and spec.board_id in self.parts
        return False

    def _hosts(self, board_id: str, partition: int) -> bool:
        return partition in self.parts.get(board_id, ())

    def _apply_record(self, offset: int, rec, ids_new: bool = False):
        rec = R.parse(rec)
        if offset in self._dead_offsets:
            result = W.EventApplied(DEAD, None)
        elif self._skipped_whole(offset, rec):
            result = W.EventApplied(DEAD, None)
        else:
            try:
                result = self._dispatch(rec, offset, ids_new)
            except Exception as exc:  # a bug, not an expected outcome: dead-letter it
                result = self._dead_letter(offset, rec, exc)
        board_id = getattr(rec, "board_id", None)
        self._remember_result(offset, result, board_id if isinstance(board_id, str) else None)
        return result

    def _remember_result(self, offset: int, result, board_id: str | None = None) -> None:
        """Cache a record's answer for a retried batch; the oldest go first once
        the cache holds RESULT_CACHE records or RESULT_CACHE_BYTES bytes (a
        retry only ever asks for the records of the cycles in flight)."""
        self._forget_result(offset)
        self._results[offset] = result
        size = _result_nbytes(result)
        self._result_bytes[offset] = size
        self.result_cache_bytes += size
        if board_id is not None and result is not None:
            self._result_board[offset] = board_id
        while len(self._results) > 1 and (len(self._results) > RESULT_CACHE
                                          or self.result_cache_bytes > RESULT_CACHE_BYTES):
            self._forget_result(next(iter(self._results)))

    def _forget_result(self, offset: int) -> None:
        if self._results.pop(offset, _NONE) is not _NONE:
            self.result_cache_bytes -= self._result_bytes.pop(offset)
            self._result_board.pop(offset, None)

    def _dead_letter(self, offset: int, rec: R.Record, exc: Exception) -> W.EventApplied:
        error = R.error_text(exc)
        log.error("dead-lettering log offset %d (%s %s %s): %s", offset, rec.kind, rec.board_id, R.event_id_of(rec), error)
        self._add_dead([offset, rec.board_id, R.event_id_of(rec), error], logged=False)
        return W.EventApplied(DEAD, None)

    def _add_dead(self, entry: list, logged: bool) -> None:
        """Keep a dead letter (``[offset, board_id, event_id, error]``, plus the row of a columnar record)."""
        self.dead_letters.append(entry)
        d = W.ShardDeadLetter(*entry)
        if d.row is not None:
            self._dead_rows.add((d.offset, d.row))
        else:
            self._dead_offsets.add(d.offset)
        if not logged:
            self._unlogged[_dead_key(entry)] = entry

    def _skipped_whole(self, offset: int, rec: R.Record) -> bool:
        """Whether the log holds a dead letter for this whole record (no row):
        if so it is dead-lettered here as it was live, with the logged error."""
        for d in self._skip.get(offset, ()):
            if d.row is None:
                if isinstance(rec, R.InvalidationRecord) and not any(
                        p.owns_event(rec.event_id) for p in self.parts.get(rec.board_id, {}).values()):
                    return False  # another shard actor's partition owns the event: nothing was dead-lettered here
                log.warning("skipping log offset %d (%s %s %s): dead-lettered before: %s", offset, rec.kind,
                            rec.board_id, R.event_id_of(rec), d.error)
                self._add_dead([offset, rec.board_id, R.event_id_of(rec), d.error], logged=True)
                return True
        return False

    def _apply_score(self, rec: R.ScoreRecord) -> W.EventApplied:
        """A score record: its code and change."""
        spec = self.specs.get(rec.board_id)
        if spec is None:
            return W.EventApplied(UNKNOWN_SEASON, None)
        partition = self.parts.get(spec.board_id, {}).get(part_of(rec.player_id, spec.shards))
        if partition is None or spec.board_id in self.archived:  # an ARCHIVED board: nothing changes
            return W.EventApplied(rec.verdict, None)
        ev = R.event_of(rec)
        if rec.verdict != R.APPLY:  # decided before apply (duplicate, held, conflict): history only
            partition.record(ev, R.outcome_of(rec.verdict))
            return W.EventApplied(rec.verdict, None)
        outcome, change = partition.apply(ev)
        return W.EventApplied(R.CODE[outcome], change_wire(change))

    def _apply_group(self, offset: int, rec: R.GroupRecord, ids_new: bool = False) -> list:
        """A ``G`` record: each part hosted here applied as its own columnar
        record (its rows numbered across the parts for dead letters); per part
        its :class:`engine.core.wire.ScoresApplied`, None for the parts hosted elsewhere."""
        out: list = []
        base = 0
        for part in R.group_parts(rec):
            hosted = self._hosts(part.board_id, part.partition)
            out.append(self._apply_scores(offset, part, ids_new, base) if hosted else None)
            base += len(part.event_ids)
        return out

    def _apply_scores(self, offset: int, rec: R.ScoresRecord | R.ScoresMetaRecord | R.ScoresSubsRecord,
                      ids_new: bool = False, base: int = 0) -> W.ScoresApplied:
        """A columnar score record, one batch (:class:`engine.core.wire.ScoresApplied`:
        codes, changed rows, values, achieved as uint8, int32, int64, int64 bytes). Rows dead-lettered
        before are journalled as DEAD_LETTERED; a batch that fails is applied
        row by row so only the poison rows are dead-lettered. ``base``: the
        number of the record's first row at ``offset`` (a part of a ``G`` record)."""
        spec = self.specs.get(rec.board_id)
        cols, verdicts = R.columns_of(rec)
        if spec is None:
            return W.ScoresApplied(bytes([UNKNOWN_SEASON]) * len(cols), b"", b"", b"")
        partition = self.parts.get(spec.board_id, {}).get(rec.partition)
        if partition is None or spec.board_id in self.archived:  # an ARCHIVED board: events are only held
            return W.ScoresApplied(verdicts.astype(np.uint8).tobytes(), b"", b"", b"")
        n = len(cols)
        for o, row in self._dead_rows:
            if o == offset and base <= row < base + n:
                verdicts[row - base] = DEAD
        for d in self._skip.get(offset, ()):  # dead-lettered before (the log says): skipped, not tried
            if d.row is not None and base <= d.row < base + n and (offset, d.row) not in self._dead_rows:
                log.warning("skipping log offset %d row %d (%s %s): dead-lettered before: %s", offset, d.row,
                            cols.board_id, cols.event_ids[d.row - base], d.error)
                self._add_dead([offset, cols.board_id, cols.event_ids[d.row - base], d.error, d.row], logged=True)
                verdicts[d.row - base] = DEAD
        try:
            got = partition.apply_columns(cols, verdicts, ids_new=ids_new)
        except Exception:
            got = self._apply_rows(offset, partition, cols, verdicts, base)
        rows = np.flatnonzero(got.changed)
        return W.ScoresApplied(got.codes.tobytes(), rows.astype("<i4").tobytes(),
                               got.values[rows].astype("<i8").tobytes(), got.achieved[rows].astype("<i8").tobytes())

    def _apply_rows(self, offset: int, partition: Partition, cols: ScoreColumns, verdicts: np.ndarray,
                    base: int = 0) -> Applied:
        n = len(cols)
        out = Applied(np.zeros(n, np.uint8), np.zeros(n, np.bool_), np.zeros(n, np.int64), np.zeros(n, np.int64),
                      np.zeros(n, np.int32))
        for row in range(n):
            one = np.array([row])
            try:
                got = partition.apply_columns(cols.take(one), verdicts[one])
            except Exception as exc:  # a bug, not an expected outcome: dead-letter the row
                error = R.error_text(exc)
                log.error("dead-lettering log offset %d row %d (%s %s): %s", offset, row, cols.board_id,
                          cols.event_ids[row], error)
                self._add_dead([offset, cols.board_id, cols.event_ids[row], error, base + row], logged=False)
                got = partition.apply_columns(cols.take(one), np.array([DEAD], np.uint8))
            for a, b in zip(out, got):
                a[row] = b[0]
        return out

    def _dispatch(self, rec: R.Record, offset: int = -1, ids_new: bool = False):
        kind = rec.kind
        if kind in R.SCORE_BATCHES:
            return self._apply_scores(offset, rec, ids_new)
        if kind == R.GROUP:
            return self._apply_group(offset, rec, ids_new)
        if kind == R.DEAD_LETTER:  # the router logged a dead letter: from now on the log knows it
            self.skip([R.dead_letter_of(rec)])
            return None
        if kind == R.SCORE:
            return self._apply_score(rec)
        if kind == R.ERASE:
            return self._erase(rec)
        if kind in R.BOARD_KINDS:
            spec = R.spec_of(rec)
            if spec.board_id not in self.specs:
                self.specs[spec.board_id] = spec
                mine = {
                    p: Partition(spec.policy, spec.max_plausible_time_ms, self._new_journal(spec.board_id, p),
                                 spec.subscores)
                    for p in range(spec.shards)
                    if actor_of(spec.board_id, p, self.n_actors) == self.index
                }
                if mine:
                    self.parts[spec.board_id] = mine
            return None
        if kind == R.INVALIDATE:
            for partition in self.parts.get(rec.board_id, {}).values():
                if partition.owns_event(rec.event_id):
                    row, change, refused = partition.invalidate(rec.event_id, rec.correction_id)
                    return W.Invalidated(row.player_id, row.key is not None, row.value, change_wire(change), refused)
            return None
        if kind in R.DECISIONS:
            ev = R.decided_event(rec)
            spec = self.specs[rec.board_id]
            partition = self.parts[rec.board_id][part_of(ev.player_id, spec.shards)]
            if rec.decision == "reject":
                partition.record_rejection(ev)
                return W.EventApplied(0, None)
            outcome, change = partition.apply(ev, kind=KIND_DECISION)
            return W.EventApplied(R.CODE[outcome], change_wire(change))
        if kind == R.STATE and rec.state == ARCHIVED:  # the router sends only this state change here
            self.archived.add(rec.board_id)
        return None  # state changes live in the router

    def _erase(self, rec: R.ErasureRecord) -> list:
        """A player's erasure (docs/api.md §17): every partition hosted here forgets the player (and the
        pseudonym the rewritten log names them by), archived boards excepted (their archive is rewritten).
        The result: ``[board_id, change]`` per ranked row removed (one version step each)."""
        ids = [x for x in (rec.player_id, rec.pseudonym) if x is not None]
        out = []
        for board_id in sorted(self.parts):
            if board_id in self.archived:
                continue
            for part in sorted(self.parts[board_id]):
                for change in self.parts[board_id][part].erase(ids):
                    out.append([board_id, change_wire(change)])
        return out

    # ------------------------------------------------------------------- reads

    def read(self, requests: list) -> W.ReadAnswer:
        """Answer a batch of read requests (:mod:`engine.core.wire`): this actor's
        applied log offset and one reply per request.

        Every reply starts with the board's local version (the sum of the
        ``changes`` of its partitions here), so the router can state the
        exact version a fan-out reflects.
        """
        if self._merging:
            self.tend_merges()
        reqs = [W.request(r) for r in requests]
        answers: list = [None] * len(reqs)
        batched: dict[tuple[str, str], list[int]] = {}

        def flush() -> None:
            for (op, board_id), at in batched.items():
                for i, ans in zip(at, _BATCHED[op](self, board_id, [reqs[i] for i in at])):
                    answers[i] = ans
            batched.clear()

        for i, req in enumerate(reqs):
            if req.op in _BATCHED:
                batched.setdefault((req.op, req.board_id), []).append(i)
            else:
                if req.op in W.CHANGES_STATE:
                    flush()  # the reads before it answer from the state before it
                answers[i] = self._read(req)
        flush()
        return W.ReadAnswer(self.applied_offset, answers)

    # Exact-rank reads of many concurrent requests (the router coalesces them
    # into one call per shard actor per round): one lookup / count / gather
    # per partition for all of them, not one per request (docs/http.md, "The
    # hot path"). Each answer is what :meth:`_read` gives for that request alone.

    def _parts_version(self, board_id: str) -> tuple[list[Partition], int]:
        parts = list(self.parts.get(board_id, {}).values())
        return parts, sum(p.changes for p in parts)

    @staticmethod
    def _counts(parts: list[Partition], keys: list[tuple]) -> list[int]:
        totals = [0] * len(keys)
        if keys:
            for p in parts:
                totals = [x + y for x, y in zip(totals, p.count_better_many(keys))]
        return totals

    def _get_many(self, board_id: str, reqs: list[W.Get]) -> list[W.RowReply]:
        parts, version = self._parts_version(board_id)
        ids = [r.player_id for r in reqs]
        rows: list[Row | None] = [None] * len(ids)
        for p in parts:
            for k, row in enumerate(p.get_many(ids)):
                if row is not None and rows[k] is None:
                    rows[k] = row
        ranked = {k: row.key for k, row in enumerate(rows) if row is not None and row.key is not None}
        local = dict(zip(ranked, self._counts(parts, list(ranked.values()))))
        return [W.RowReply(version, None, None) if row is None else W.RowReply(version, row_wire(row), local.get(k))
                for k, row in enumerate(rows)]

    def _count_many(self, board_id: str, reqs: list[W.Count]) -> list[W.Reply]:
        parts, version = self._parts_version(board_id)
        return [W.Reply(version, c) for c in self._counts(parts, [tuple(r.key) for r in reqs])]

    def _nbrs_many(self, board_id: str, reqs: list[W.Nbrs]) -> list[W.WindowReply]:
        parts, version = self._parts_version(board_id)
        keys = [tuple(r.key) for r in reqs]
        above, below = [r.above for r in reqs], [r.below for r in reqs]
        per_part = [p.neighbours_many(keys, above, below) for p in parts]
        out = []
        for k, (a, b) in enumerate(zip(above, below)):
            found = [pp[k] for pp in per_part]
            befores = [[entry(r) for r in f[0]] for f in found]
            afters = [[entry(r) for r in f[1]] for f in found]
            before = list(_merged(befores))[-a:] if a else []
            after = list(islice(_merged(afters), b))
            out.append(W.WindowReply(version, before, after, sum(f[2] for f in found)))
        return out

    def _read(self, req):
        op, board_id = req.op, req.board_id
        parts = list(self.parts.get(board_id, {}).values())
        version = sum(p.changes for p in parts)
        if op == W.TOP:
            n = req.n
            tops = [[entry(r) for r in p.top(0, n)] for p in parts]
            return W.Reply(version, list(islice(_merged(tops), n)) if len(tops) > 1 else tops[0] if tops else [])
        if op == W.MGET:
            rows = [r for p in parts for r in p.multi_get(req.player_ids) if r.key is not None]
            return W.Reply(version, [entry(r) for r in rows])
        if op == W.SIZE:
            return W.Reply(version, sum(len(p) for p in parts))
        if op == W.HIST:
            for p in parts:
                items = p.player_history(req.player_id)
                if items:
                    return W.Reply(version, [W.HistoryItem._make(h) for h in items])
            return W.Reply(version, [])
        if op == W.EFPS:  # [event ids, fingerprints as little-endian uint64 bytes]
            ids: list = []
            fps: list = []
            for p in parts:
                e, f = p.event_fingerprints(req.player_id)
                ids.extend(e)
                fps.extend(f)
            return W.Reply(version, [ids, np.array(fps, "<u8").tobytes()])
        if op == W.SUM:
            return W.Reply(version, format(sum(p.checksum_sum() for p in parts), "x"))  # > 64 bits: msgpack-safe text
        if op == W.ROWS:  # every row (any status) as columns, for an archive
            return W.Reply(version, [p.columns() for p in parts])
        if op == W.RCOLS:  # one chunk of one partition's rows: [total rows, columns] (None: not here)
            partition = self.parts.get(board_id, {}).get(req.partition)
            return W.Reply(version, None if partition is None else
                           [partition.row_count(), partition.columns(req.start, req.count)])
        if op == W.HCOLS:  # one chunk of one partition's journal, for an archive's history
            return W.Reply(version, self.history_chunk(board_id, req.partition, req.start, req.count))
        if op == W.SPILL:  # an export pins this cut: every partition's ranked rows to a file
            return W.Reply(version, self.spill(board_id, req.token, req.block_rows))
        if op == W.SPILL_READ:  # a frame of a spill file, for a router that cannot open it
            path = spill_path(self._spill_root(), req.token, req.partition)
            return W.Reply(version, list(read_frame(path, req.token, req.at)))
        if op == W.SPILL_DROP:
            return W.Reply(version, self.drop_spills(req.token))
        if op == W.SPILL_WAIT:  # None while the files are being written, "" once whole, else the failure
            return W.Reply(version, self.spill_written(req.token))
        if op == W.SCRUB:  # control: erased events' journal run entries (docs/api.md §17); rows scrubbed
            return W.Reply(version, sum(p.journal.scrub_runs() for ps in self.parts.values() for p in ps.values()))
        if op == W.DROP:  # control, not a read: the board is archived elsewhere (docs/storage.md, "Archives")
            return W.Reply(version, self.drop(board_id))
        if op == W.SAMPLE:
            keys = []
            for p in parts:
                keys.extend(p.sample_keys(req.step))
            keys.sort()
            return W.SampleReply(version, sum(len(p) for p in parts), keys)
        raise ValueError(f"unknown read op {op!r}")

    def history_chunk(self, board_id: str, part: int, start: int, count: int) -> W.HistoryChunk | None:
        """Journal rows ``start .. start+count-1`` of partition ``part`` as
        ``[total rows, columns, player ids]``: the columns as
        :meth:`engine.core.journal.JournalColumns.to_wire` bytes, the player ids
        (``[UTF-8 bytes, int64 offsets]`` of every player the partition
        knows, which ``pid`` indexes) only with the first chunk. None when the
        partition is not here. O(count + their bytes)."""
        partition = self.parts.get(board_id, {}).get(part)
        if partition is None:
            return None
        cols, total = partition.history_chunk(start, count)
        ids = None
        if start == 0:
            arena, offs = partition.players.bytes_of(np.arange(len(partition.players), dtype=np.int64))
            ids = [arena.tobytes(), offs.astype("<i8").tobytes()]
        return W.HistoryChunk(total, cols.to_wire(), ids)

    # ----------------------------------------------------------------- export

    def use_spill_dir(self, root: str) -> None:
        """Write export spill files under ``root``, emptied of stale ones now."""
        reset_dir(root)
        self.spill_dir, self._own_spill_dir = root, False

    def _spill_root(self) -> str:
        if self.spill_dir is None:
            self.spill_dir, self._own_spill_dir = tempfile.mkdtemp(prefix=f"flowrank-spill-{self.index}-"), True
        return self.spill_dir

    # ------------------------------------------------------------ journal run merges

    def merge_in_background(self) -> None:
        """From now on a journal run merge (``Journal._merge_runs``: O(the two runs),
        0.2 s for two runs of 5M ids) runs on this shard's merge thread, not inside
        the apply that flushed: the flush only notes it due, and :meth:`tend_merges`,
        between calls (the end of an apply, the start of a read), starts it there and
        swaps the merged run in once built. Lookups meanwhile search the two runs,
        which stay until the swap; a scrub that rewrites them first makes the
        merge's result be discarded (``Journal.finish_merge``). Issue 29 item 2."""
        if self._merger is None:
            self._merger = ThreadPoolExecutor(max_workers=1, thread_name_prefix="journal-merge")
            for ps in self.parts.values():
                for p in ps.values():
                    self._merge_elsewhere(p.journal)

    def _merge_elsewhere(self, journal: Journal) -> None:
        journal.merges_elsewhere = self._merge_due
        if journal.due_pair() is not None:  # due already (a recovery that merged inline is done)
            self._merges_due[journal] = None

    def _merge_due(self, journal: Journal) -> None:
        self._merges_due[journal] = None

    def tend_merges(self) -> int:
        """Swap in every merge the merge thread finished, then start the merges due
        (one at a time per journal; a swap may leave the next of a cascade due).
        Returns how many merges are in flight. O(journals with a merge due or in flight)."""
        for journal, (plan, fut) in list(self._merging.items()):
            if not fut.done():
                continue
            del self._merging[journal]
            exc = fut.exception()
            if exc is not None:
                log.warning("journal run merge %d failed (%s); its runs stay as they are", plan.seq, exc)
            journal.finish_merge(plan, None if exc is not None else fut.result())
            self._merges_due[journal] = None
        for journal in list(self._merges_due):
            if journal in self._merging or self._merger is None:
                continue
            del self._merges_due[journal]
            plan = journal.plan_merge()
            if plan is not None:
                self._merging[journal] = (plan, self._merger.submit(build_merge, plan))
        return len(self._merging)

    @property
    def merges_in_flight(self) -> int:
        return len(self._merging)

    def settle_merges(self) -> None:
        """Until no merge is due or in flight (tests; a close)."""
        while self._merger is not None and (self._merging or self._merges_due):
            for _plan, fut in list(self._merging.values()):
                wait([fut])
            self.tend_merges()

    def close(self) -> None:
        """Let go of every file this shard holds open: its partitions' journal
        files and its spill files (an in-process service's close; a shard
        actor's process ends instead)."""
        if self._merger is not None:
            for _plan, fut in self._merging.values():
                wait([fut])
            self._merger.shutdown(wait=True)
        for parts in self.parts.values():
            for p in parts.values():
                p.journal.close()
        self.close_spills()

    def close_spills(self) -> None:
        """Remove every spill file (and a temp spill directory of our own), once
        the spill thread wrote what it was writing."""
        if self._spiller is not None:
            self._spills_dropped.update(self._spills)
            self._spiller.shutdown(wait=True)
            self._spiller = None
            self._spills.clear()
            self._spills_dropped.clear()
        if self.spill_dir is not None:
            if self._own_spill_dir:
                remove_dir(self.spill_dir)
                self.spill_dir = None
            else:
                remove_spills(self.spill_dir)

    def spill(self, board_id: str, token: str, block_rows: int) -> list:
        """Pin the board's partitions here for an export: each one's ranked rows,
        in local rank order, as they are now (:meth:`Partition.ranked_cut`:
        column copies, 20-28 bytes a row, no I/O), then written to its spill file
        on this shard's spill thread (``block_rows`` rows per block) while it
        goes on applying and answering (issue 29 item 2). Returns a
        :class:`engine.core.wire.SpillFile` per partition at once; a
        ``SPILL_WAIT`` for ``token`` says when the files are whole. O(rows)
        here in memory copies, O(rows) there."""
        root = self._spill_root()
        cuts = [(n, spill_path(root, token, n), p.ranked_cut()) for n, p in self.parts.get(board_id, {}).items()]
        if self._spiller is None:
            self._spiller = ThreadPoolExecutor(max_workers=1, thread_name_prefix="export-spill")
        self._spills[token] = self._spiller.submit(self._write_spills, root, token, cuts, block_rows)
        return [W.SpillFile(n, path, cut.rows) for n, path, cut in cuts]

    def _write_spills(self, root: str, token: str, cuts: list, block_rows: int) -> None:
        """On the spill thread: the cuts' blocks to their files. Any failure, or
        a drop of ``token`` meanwhile, removes every file of ``token``."""
        try:
            for _n, path, cut in cuts:
                if token in self._spills_dropped:
                    break
                write_spill(path, token, cut.rows,
                            (cut.block(a, a + block_rows) for a in range(0, cut.rows, block_rows)))
        except BaseException:
            remove_spills(root, token)
            raise
        if token in self._spills_dropped:
            remove_spills(root, token)

    def spill_written(self, token: str) -> str | None:
        """None while the spill files of ``token`` are being written; "" once
        they are whole; else why there are none (the write failed, or this
        process does not know the token: a restarted shard actor, whose spill
        directory was emptied). The first answer other than None is the last:
        the token is forgotten then."""
        fut = self._spills.get(token)
        if fut is None:
            return f"spill {token} is unknown to this shard (it restarted, or the export ended)"
        if not fut.done():
            return None
        del self._spills[token]  # answered once: the router asks no more
        exc = fut.exception()
        return "" if exc is None else f"{type(exc).__name__}: {exc}"

    def drop_spills(self, token: str) -> int:
        """Remove the spill files of ``token`` (a write still running stops at its
        next file and removes what it wrote). Returns how many files went now."""
        fut = self._spills.pop(token, None)
        if fut is not None and not fut.done():
            self._spills_dropped.add(token)
            fut.add_done_callback(lambda _f: self._spills_dropped.discard(token))
        return remove_spills(self._spill_root(), token)

    def drop(self, board_id: str) -> int:
        """Forget the board's partitions here, journal files included, keeping
        its spec: the board is ARCHIVED and its rows live in its archive, which
        the router made durable before asking. Idempotent; returns how many
        partitions were dropped. Later score records for the board are answered
        with their logged verdicts (all held) and touch nothing."""
        parts = self.parts.pop(board_id, {})
        # Cached results of the board's records go too: every batch before the ARCHIVED
        # record was answered before the router asked for the drop.
        for offset in [o for o, b in self._result_board.items() if b == board_id]:
            self._forget_result(offset)
        for n, p in parts.items():
            merging = self._merging.pop(p.journal, None)
            if merging is not None:  # its merge thread done with the directory before it goes
                wait([merging[1]])
                p.journal.finish_merge(merging[0], None)
            self._merges_due.pop(p.journal, None)
            p.journal.close()
            place = self._journal_place(board_id, n)
            if place is not None:
                shutil.rmtree(place.directory, ignore_errors=True)
        return len(parts)

    def stats(self) -> dict:
        return {
            "index": self.index,
            "applied_offset": self.applied_offset,
            "rows": {b: sum(len(p) for p in ps.values()) for b, ps in self.parts.items()},
            "dead_letters": list(self.dead_letters),
        }

    # --------------------------------------------------------------- snapshots

    def to_state(self, sync: bool = True) -> dict:
        """This shard as plain data (every array copied). ``sync``: each journal's files fsync'd first;
        False leaves that to :meth:`snapshot_cut`'s callables."""
        return {
            "format": SHARD_STATE_FORMAT,
            "index": self.index,
            "n_actors": self.n_actors,
            "applied_offset": self.applied_offset,
            "specs": [R.board_record(s) for s in self.specs.values()],
            "parts": [[b, n, p.to_state(sync)] for b, ps in self.parts.items() for n, p in ps.items()],
            "dead_letters": [list(d) for d in self.dead_letters],  # copied: the snapshot thread packs it later
            "archived": sorted(self.archived),
            # additive (log format 4): which of them the log holds a dead-letter record of
            "dead_logged": [list(_dead_key(d)) for d in self.dead_letters if _dead_key(d) not in self._unlogged],
        }

    def snapshot_cut(self) -> tuple[int, dict, list]:
        """The cut of a background snapshot (docs/storage.md, "Snapshots in the background"):
        ``(applied offset, state, syncs)``, where ``state`` equals :meth:`to_state`'s (every array
        copied, so this shard may go on applying and answering at once) but no journal file is
        fsync'd yet, and ``syncs`` are the callables that do it, for another thread to run before
        the state is saved. O(rows + journal tails): memory copies, no I/O."""
        syncs = [p.journal.sync_later() for ps in self.parts.values() for p in ps.values()]
        return self.applied_offset, self.to_state(sync=False), syncs

    def _journal_place(self, board_id: str, part: int) -> FilePlace | None:
        """A partition's journal directory under the root (None: in memory)."""
        if self.journals.root is None:
            return None
        digest = hashlib.sha1(board_id.encode("utf-8", "surrogatepass")).hexdigest()[:20]
        return FilePlace(os.path.join(self.journals.root, f"{digest}-{part}"))

    def _new_journal(self, board_id: str, part: int) -> Journal:
        place = self._journal_place(board_id, part)
        journal = Journal(None if place is None else place.fresh(), self.journals.tail_rows)
        if self._merger is not None:
            self._merge_elsewhere(journal)
        return journal

    @classmethod
    def from_state(cls, state: dict, journals: JournalPlace = JournalPlace()) -> "ShardCore":
        """Raises :class:`~engine.core.journal.JournalLost` when a partition's
        journal files are not where ``journals`` says, as the snapshot left them."""
        state_format(state, SHARD_STATE_FORMAT, f"shard-{state.get('index')} snapshot")
        core = cls(state["index"], state["n_actors"], journals)
        core.applied_offset = state["applied_offset"]
        for rec in state["specs"]:
            spec = R.spec_of(rec)
            core.specs[spec.board_id] = spec
        for board_id, n, pstate in state["parts"]:
            spec = core.specs[board_id]
            core.parts.setdefault(board_id, {})[n] = Partition.from_state(
                spec.policy, spec.max_plausible_time_ms, pstate, core._journal_place(board_id, n), journals.tail_rows)
        core.archived = set(state.get("archived", ()))  # absent: a snapshot from before it was kept
        logged = {(k[0], k[1]) for k in state.get("dead_logged", ())}  # absent (before log format 4): none
        for d in state["dead_letters"]:
            core._add_dead(list(d), logged=_dead_key(d) in logged)
        return core

    def checksum_of_state(self) -> int:
        """Sum of every partition's checksum (recovery compares this)."""
        return sum(p.checksum_sum() for ps in self.parts.values() for p in ps.values())

    def _check(self) -> None:
        for board_id, ps in self.parts.items():
            spec = self.specs[board_id]
            for n, p in ps.items():
                assert actor_of(board_id, n, self.n_actors) == self.index
                p._check()
                for row in p.all_rows():
                    assert part_of(row.player_id, spec.shards) == n


_BATCHED = {W.GET: ShardCore._get_many, W.COUNT: ShardCore._count_many, W.NBRS: ShardCore._nbrs_many}

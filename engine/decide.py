"""Decide: what a submission becomes in the log, judged against the registry
plus what earlier submissions of the same cycle decided. Pure.

The sequencer takes a cycle of submissions in queue order (which is log
order). For each it calls :func:`decide`, which reads the registry
(:mod:`engine.registry`) and the cycle's :class:`Overlay`, and returns the
records to append with what the answer needs later; it changes neither.
:meth:`Overlay.note` then adds those records to the overlay, so the next
submission of the cycle is judged as if they were applied (a board created,
a state changed, an event id admitted or a held event decided earlier in the
cycle). After the one durable append, :meth:`engine.registry.BoardRegistry.apply`
folds each record in, the same fold recovery runs over the log. A failed
append drops the overlay and nothing else: there is nothing to undo.

Submissions are named after the record kinds they are logged as
(:class:`Submission`).
"""

from __future__ import annotations

from collections import Counter
from enum import Enum
from typing import NamedTuple

import numpy as np

from engine import records as R
from engine import season
from engine.admission import ScoreVerdicts
from engine.columns import ScoreBatch
from engine.dedup import DedupTable
from engine.entry import EntryTable, join_answer, new_overlay
from engine.entry import lookup as entry_lookup
from engine.errors import BoardExists
from engine.model import BoardSpec, BoardState, Invalidation, JoinResult, QuarantineDecision
from engine.placement import parts_of
from engine.registry import BoardCtl, BoardRegistry, ScoreMemo

_FOREVER = 1 << 62


class Submission(str, Enum):
    """What a queued submission is: named after the log record kind
    (:data:`engine.records.KINDS`) it is logged as."""

    SCORES = "scores"  # a ScoreBatch: one C / M record per board partition with events
    BOARD = "board"  # a BoardSpec: one K record
    STATE = "state"  # (board_id, BoardState) from an admin: one T record
    SCHEDULE = "schedule"  # (board_id, now_ms) from the season timer: a T record per transition due (maybe none)
    DECISION = "decision"  # a QuarantineDecision: one D / E record
    INVALIDATION = "invalidation"  # an Invalidation: one I record
    DEAD_LETTERS = "dead_letters"  # L records the shard actors reported (never refused for a full queue)
    JOIN = "join"  # (board_id, player_id): one J record for a new join, none for a player who joined before


class ScorePlace(NamedTuple):
    """Where one board's share of a score submission went: the index of a
    record in the cycle's decision and the board's row numbers in it, in
    record order."""

    record: int
    rows: np.ndarray


class Decision(NamedTuple):
    """What one submission becomes: its records in log order, per record the
    memo its fold can use (None: the fold parses the record) and whether the
    record's events were all never seen before (the partition may skip the
    journal's search for old redeliveries: ``ids_new``), and for a score
    submission, per board of the batch its places (None: unknown board,
    answered REJECTED_UNKNOWN_SEASON and not logged); ``answer``: what the
    caller is answered once the records are durable, when the decision
    already knows it (a join's :class:`engine.model.JoinResult`)."""

    records: list
    memos: list
    ids_new: list
    places: list | None = None
    answer: object = None


class Overlay:
    """What the submissions decided so far in one cycle add to the registry,
    before it is durable: boards created, season states reached, event ids
    remembered, held events decided, corrections counted. Lives for one cycle."""

    def __init__(self, registry: BoardRegistry):
        self.registry = registry
        self.new: dict[str, BoardCtl] = {}
        self.states: dict[str, BoardState] = {}
        self._ids: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}  # per board: (words, fps) noted, not in a table yet
        self._tables: dict[str, DedupTable] = {}
        self.decided: dict[str, set[str]] = {}
        self.corrections: Counter = Counter()
        self.entry: dict[str, EntryTable] = {}  # per board: the entry table's overlay (engine.entry)

    def ctl(self, board_id: str) -> BoardCtl | None:
        got = self.registry.boards.get(board_id)
        return got if got is not None else self.new.get(board_id)

    def need(self, board_id: str) -> BoardCtl:
        got = self.ctl(board_id)
        return got if got is not None else self.registry.ctl(board_id)  # raises BoardNotFound

    def state(self, ctl: BoardCtl) -> BoardState:
        return self.states.get(ctl.spec.board_id, ctl.admission.state)

    def earlier(self, board_id: str) -> DedupTable | None:
        """The event ids that earlier submissions of the cycle remembered on
        this board, as a table ``Admission.decide_columns`` looks in (None:
        none). Built only when a second submission of the cycle touches the
        board, so a cycle of one batch per board builds none."""
        pending = self._ids.pop(board_id, None)
        table = self._tables.get(board_id)
        if pending:
            if table is None:
                table = self._tables[board_id] = DedupTable(_FOREVER, board_id)
            for words, fps in pending:
                table.remember_words(words, fps)
        return table

    def entry_over(self, ctl: BoardCtl, create: bool = False) -> EntryTable | None:
        """The board's entry overlay: players joined or counted earlier in the cycle (None: none yet)."""
        board_id = ctl.spec.board_id
        got = self.entry.get(board_id)
        if got is None and create:
            got = self.entry[board_id] = new_overlay(ctl.admission.entry)
        return got

    def note(self, decision: Decision) -> None:
        """Add a decision's records to the overlay, so later submissions of
        the cycle are judged as if they were applied."""
        for rec, memo in zip(decision.records, decision.memos):
            kind = rec.kind
            if kind in R.BOARD_KINDS:
                spec = R.spec_of(rec)
                self.new[spec.board_id] = self.registry.new_ctl(spec)
            elif kind == R.STATE:
                self.states[rec.board_id] = BoardState(rec.state)
            elif kind in R.SCORE_BATCHES and memo is not None:
                keep = memo_remembered(memo)
                if len(keep):
                    self._ids.setdefault(rec.board_id, []).append((memo.words[keep], memo.fps[keep]))
                    _note_entry_scores(self, rec.board_id, memo)
            elif kind in R.DECISIONS:
                self.decided.setdefault(rec.board_id, set()).add(rec.event_id)
                ctl = self.ctl(rec.board_id)
                if ctl is not None and ctl.spec.entry is not None:
                    ctl.admission.fold_decided_row(rec.player_id, rec.value, rec.decision, self.entry_over(ctl, True))
            elif kind == R.JOIN:
                ctl = self.need(rec.board_id)
                over = self.entry_over(ctl, True)
                assert over is not None
                over.fold_join(rec.player_id, rec.position, base=ctl.admission.entry)
            elif kind == R.INVALIDATE:
                self.corrections[rec.board_id] += 1


def _note_entry_scores(ov: Overlay, board_id: str, memo: ScoreMemo) -> None:
    ctl = ov.ctl(board_id)
    if ctl is not None and ctl.spec.entry is not None and ctl.spec.entry.limits:
        ctl.admission.fold_entry(memo.cols, memo.verdicts, ov.entry_over(ctl, True))


def memo_remembered(memo: ScoreMemo) -> np.ndarray:
    """Positions of a decided score record's events that the board remembers."""
    return ScoreVerdicts(memo.verdicts, memo.words, memo.fps).remembered()


def decide(ov: Overlay, kind: Submission, payload) -> Decision:
    """The records one submission becomes, judged against the registry and
    the overlay ``ov``. Pure: changes neither. Raises the submission's
    FlowRankError (BoardExists, BoardNotFound, InvalidTransition,
    AlreadyDecided, EventNotFound) when it cannot be logged."""
    if kind == Submission.SCORES:
        return _decide_scores(ov, payload)
    if kind == Submission.BOARD:
        spec: BoardSpec = payload
        if ov.ctl(spec.board_id) is not None:
            raise BoardExists(f"Board {spec.board_id!r} already exists.", "board_id")
        return _plain([R.board_record(spec)])
    if kind == Submission.STATE:
        board_id, wanted = payload
        ctl = ov.need(board_id)
        season.next_state(ov.state(ctl), wanted)  # raises InvalidTransition
        return _plain([R.StateRecord(R.STATE, board_id, wanted.value)])
    if kind == Submission.SCHEDULE:  # what the schedule owes at the instant close_due read the clock
        board_id, now = payload
        ctl = ov.need(board_id)
        spec = ctl.spec
        moves = season.due(ov.state(ctl), spec.closes_at, spec.finalize_after_s, now).transitions
        return _plain([R.StateRecord(R.STATE, board_id, target.value) for target in moves])
    if kind == Submission.DECISION:
        d: QuarantineDecision = payload
        ctl = ov.need(d.board_id)
        held = ctl.admission.check_decision(d.event_id, ov.decided.get(d.board_id, ()), ov.state(ctl))
        return _plain([R.decide_record(d.board_id, d.event_id, d.decision, d.reason, d.moderator, held)])
    if kind == Submission.INVALIDATION:
        inv: Invalidation = payload
        ctl = ov.need(inv.board_id)
        ctl.admission.check_corrections_allowed(ov.state(ctl))
        cid = R.correction_id(inv.event_id, ctl.corrections + ov.corrections[inv.board_id] + 1)
        return _plain([R.InvalidationRecord(R.INVALIDATE, inv.board_id, inv.event_id, cid, inv.reason, inv.moderator)])
    if kind == Submission.DEAD_LETTERS:
        return _plain(list(payload))
    if kind == Submission.JOIN:
        return _decide_join(ov, *payload)
    raise ValueError(kind)


def _decide_join(ov: Overlay, board_id: str, player_id: str) -> Decision:
    """A join (docs/api.md §16): a player who joined before (durably, or
    earlier in the cycle) gets their position and no record; else the board
    must be OPEN and not full, and the join is one J record at the next
    position. Raises BoardNotFound, BoardNotOpen, BoardFull."""
    ctl = ov.need(board_id)
    over = ov.entry_over(ctl)
    table = ctl.admission.entry
    joined = (over if over is not None else table).joined
    known = entry_lookup(table, over, player_id)
    had = join_answer(ctl.spec.entry, known, joined, ov.state(ctl) is BoardState.OPEN)
    if had is not None:
        return Decision([], [], [], answer=JoinResult(player_id, had, False))
    return Decision([R.join_record(board_id, player_id, joined)], [None], [False],
                    answer=JoinResult(player_id, joined, True))


def _plain(records: list) -> Decision:
    return Decision(records, [None] * len(records), [False] * len(records))


def _decide_scores(ov: Overlay, batch: ScoreBatch) -> Decision:
    """Each board's events are decided in order (one pass over its columns),
    then each partition's share becomes one columnar record."""
    records: list = []
    memos: list = []
    ids_new: list = []
    places: list = []
    for cols in batch.boards:
        ctl = ov.ctl(cols.board_id)
        if ctl is None:
            places.append(None)
            continue
        fresh = ctl.admission.remembers_every_id
        got = ctl.admission.decide_columns(cols, earlier=ov.earlier(cols.board_id), state=ov.state(ctl),
                                           entry_over=ov.entry_over(ctl))
        n_parts = ctl.spec.shards
        mine = []
        if n_parts == 1:
            split = [np.arange(len(cols))]
            parts = [0]
        else:
            owner = parts_of(cols.player_ids, n_parts)
            order = np.argsort(owner, kind="stable")
            bounds = np.searchsorted(owner[order], np.arange(n_parts + 1))
            split, parts = [], []
            for part in range(n_parts):
                rows = order[bounds[part]:bounds[part + 1]]
                if len(rows):
                    split.append(rows)
                    parts.append(part)
        for part, rows in zip(parts, split):
            whole = len(rows) == len(cols)
            sub = cols if whole else cols.take(rows)
            verdicts = got.verdicts if whole else got.verdicts[rows]
            records.append(R.scores_record(sub, part, verdicts))
            memos.append(ScoreMemo(sub, verdicts, got.words if whole else got.words[rows],
                                   got.fps if whole else got.fps[rows]))
            ids_new.append(fresh)
            mine.append(ScorePlace(len(records) - 1, rows))
        places.append(mine)
    return Decision(records, memos, ids_new, places)

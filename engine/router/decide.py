"""Decide: what a submission becomes in the log, judged against the registry
plus what earlier submissions of the same cycle decided. Pure.

The sequencer takes a cycle of submissions in queue order (which is log
order). For each it calls :func:`decide`, which reads the registry
(:mod:`engine.router.registry`) and the cycle's :class:`Overlay`, and returns the
records to append with what the answer needs later; it changes neither.
:meth:`Overlay.note` then adds those records to the overlay, so the next
submission of the cycle is judged as if they were applied (a board created,
a state changed, an event id admitted or a held event decided earlier in the
cycle). After the one durable append, :meth:`engine.router.registry.BoardRegistry.apply`
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

from engine.core import records as R
from engine.core import season
from engine.core.admission import ScoreVerdicts
from engine.core.columns import ScoreBatch, ScoreColumns, concat_columns
from engine.core.dedup import DedupTable
from engine.core.entry import EntryTable, PlayerEntry, join_answer, join_positions, new_overlay
from engine.core.errors import AwardsPending, BoardExists, BoardFull, BoardNotFound, BoardNotOpen, ValidationFailed
from engine.core.model import BoardSpec, BoardState, BulkJoinResult, Invalidation, JoinResult, QuarantineDecision
from engine.core.placement import parts_of
from engine.core.players import ids_of
from engine.router.registry import BoardCtl, BoardRegistry, ScoreMemo
from engine.core.timefmt import format_timestamp
from engine.core.windows import Window, horizon, instance_id, window_of, windows_of

_FOREVER = 1 << 62


class Submission(str, Enum):
    """What a queued submission is: named after the log record kind
    (:data:`engine.core.records.KINDS`) it is logged as."""

    SCORES = "scores"  # a ScoreBatch: one C / M record per board partition with events (one G holding them
    #                    when the batch fans out), after the W (+ T) records of series instances it creates
    BOARD = "board"  # a BoardSpec: one K record (a series: its R record and its current window's W record)
    INSTANCE = "instance"  # a series id from the season timer: the current window's W record, if missing
    STATE = "state"  # (board_id, BoardState) from an admin: one T record
    SCHEDULE = "schedule"  # (board_id, now_ms) from the season timer: a T record per transition due (maybe none)
    DECISION = "decision"  # a QuarantineDecision: one D / E record
    INVALIDATION = "invalidation"  # an Invalidation: one I record
    DEAD_LETTERS = "dead_letters"  # L records the shard actors reported (never refused for a full queue)
    JOIN = "join"  # (board_id, player_id): one J record for a new join, none for a player who joined before
    JOINS = "joins"  # (board_id, player_ids): one H record holding the request's new joins (none: no record)
    LEAGUE_BOARD = "league_board"  # (BoardSpec, TierMoves): next-season of a league: its O record, then one Q record
    SERIES_CARRY = "series_carry"  # (instance id, TierMoves): a FROZEN instance of a league series: one Y record
    AWARDS = "awards"  # (board_id, A records): the parts of a FINALIZED board's awards not logged yet
    ERASE = "erase"  # an X record the shell made (docs/api.md §17): logged as is, once per erasure id
    ERASED = "erased"  # a Z record: an erasure complete on disk


class ScorePlace(NamedTuple):
    """Where one board's share of a score submission went: the index of a
    record in the cycle's decision and the board's row numbers in it, in
    record order; ``part``: the index of the part within a ``G`` record (-1:
    the record is the part)."""

    record: int  # -1: answered without a record (``codes``)
    rows: np.ndarray
    part: int = -1
    codes: np.ndarray | None = None  # the verdicts of rows answered without a record


class GroupMemo(NamedTuple):
    """A ``G`` record's memo: its parts' :class:`ScoreMemo`, in order."""

    parts: list


class Decision(NamedTuple):
    """What one submission becomes: its records in log order, per record the
    memo its fold can use (None: the fold parses the record) and whether the
    record's events were all never seen before (the partition may skip the
    journal's search for old redeliveries: ``ids_new``), and for a score
    submission, per board of the batch its places (None: unknown board,
    answered REJECTED_UNKNOWN_SEASON and not logged); ``answer``: what the
    caller is answered once the records are durable, when the decision
    already knows it (a join's :class:`engine.core.model.JoinResult`). ``routed``:
    for a score submission with events sent to a series, the batch as its
    events landed (each on its window's instance; ``places`` then follow its
    boards)."""

    records: list
    memos: list
    ids_new: list
    places: list | None = None
    answer: object = None
    routed: ScoreBatch | None = None


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
        self.entry: dict[str, EntryTable] = {}  # per board: the entry table's overlay (engine.core.entry)
        self.carried: set[str] = set()  # instances whose Y record (docs/api.md §18) was decided this cycle

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
                self._remember(rec.board_id, memo)
            elif kind == R.GROUP and memo is not None:
                for part, part_memo in zip(R.group_parts(rec), memo.parts):
                    self._remember(part.board_id, part_memo)
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
            elif kind == R.JOINS:
                ctl = self.need(rec.board_id)
                over = self.entry_over(ctl, True)
                assert over is not None
                over.fold_joins(rec.player_ids, rec.first, base=ctl.admission.entry)
            elif kind == R.INVALIDATE:
                self.corrections[rec.board_id] += 1
            elif kind == R.SERIES_CARRY:
                self.carried.add(rec.board_id)


    def _remember(self, board_id: str, memo: ScoreMemo) -> None:
        keep = memo_remembered(memo)
        if len(keep):
            self._ids.setdefault(board_id, []).append((memo.words[keep], memo.fps[keep]))
            _note_entry_scores(self, board_id, memo)


def _note_entry_scores(ov: Overlay, board_id: str, memo: ScoreMemo) -> None:
    ctl = ov.ctl(board_id)
    if ctl is not None and ctl.spec.entry is not None and ctl.spec.entry.limits:
        ctl.admission.fold_entry(memo.cols, memo.verdicts, ov.entry_over(ctl, True))


def memo_remembered(memo: ScoreMemo) -> np.ndarray:
    """Positions of a decided score record's events that the board remembers."""
    return ScoreVerdicts(memo.verdicts, memo.words, memo.fps).remembered()


def decide(ov: Overlay, kind: Submission, payload, now_ms: int = 0) -> Decision:
    """The records one submission becomes, judged against the registry and
    the overlay ``ov``. Pure: changes neither. ``now_ms``: the server's wall
    clock as the sequencer read it for this cycle (series windows). Raises the
    submission's FlowRankError (BoardExists, BoardNotFound, InvalidTransition,
    AlreadyDecided, EventNotFound, ValidationFailed for an event too far
    ahead of its series' current window) when it cannot be logged."""
    if kind == Submission.SCORES:
        return _decide_scores(ov, payload, now_ms)
    if kind == Submission.BOARD:
        spec: BoardSpec = payload
        if ov.ctl(spec.board_id) is not None:
            raise BoardExists(f"Board {spec.board_id!r} already exists.", "board_id")
        records = [R.board_record(spec)]
        if spec.recurrence is not None:  # the series and, in the same cycle, its current window's instance
            w = window_of(spec.recurrence, now_ms)
            if ov.ctl(instance_id(spec.board_id, w)) is not None:
                raise BoardExists(f"Board {instance_id(spec.board_id, w)!r} (this series' current window) already "
                                  "exists.", "board_id")
            records.extend(_new_instance(spec, w, now_ms))
        return _plain(records)
    if kind == Submission.INSTANCE:
        series_id: str = payload
        ctl = ov.need(series_id)
        if ctl.spec.recurrence is None:
            raise BoardNotFound(f"Board {series_id!r} is not a series.", "board_id")
        w = window_of(ctl.spec.recurrence, now_ms)
        if ov.ctl(instance_id(series_id, w)) is not None:
            return _plain([])
        return _plain(_new_instance(ctl.spec, w, now_ms))
    if kind == Submission.STATE:
        board_id, wanted = payload
        ctl = ov.need(board_id)
        season.next_state(ov.state(ctl), wanted)  # raises InvalidTransition
        if wanted is BoardState.ARCHIVED:
            _no_awards_due(ov, ctl)
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
        _no_awards_due(ov, ctl)
        held = ctl.admission.check_decision(d.event_id, ov.decided.get(d.board_id, ()), ov.state(ctl))
        return _plain([R.decide_record(d.board_id, d.event_id, d.decision, d.reason, d.moderator, held)])
    if kind == Submission.INVALIDATION:
        inv: Invalidation = payload
        ctl = ov.need(inv.board_id)
        _no_awards_due(ov, ctl)
        ctl.admission.check_corrections_allowed(ov.state(ctl))
        cid = R.correction_id(inv.event_id, ctl.corrections + ov.corrections[inv.board_id] + 1)
        return _plain([R.InvalidationRecord(R.INVALIDATE, inv.board_id, inv.event_id, cid, inv.reason, inv.moderator)])
    if kind == Submission.DEAD_LETTERS:
        return _plain(list(payload))
    if kind == Submission.JOIN:
        board_id, player_id = payload
        got = _decide_joins(ov, board_id, [player_id], now_ms, bulk=False)
        one = got.answer.results[0]
        if isinstance(one, Exception):
            raise one
        return got._replace(answer=one)
    if kind == Submission.JOINS:
        board_id, player_ids = payload
        return _decide_joins(ov, board_id, player_ids, now_ms, bulk=True)
    if kind == Submission.LEAGUE_BOARD:
        spec, moves = payload
        if ov.ctl(spec.board_id) is not None:
            raise BoardExists(f"Board {spec.board_id!r} already exists.", "board_id")
        ids = ids_of(moves.id_bytes, moves.id_offsets)
        return _plain([R.board_record(spec), R.carry_record(spec.board_id, ids, moves.tiers)])
    if kind == Submission.SERIES_CARRY:
        board_id, moves = payload
        ctl = ov.need(board_id)
        if not _carry_due(ov, ctl) or ctl.spec.series is None:
            return _plain([])
        ids = ids_of(moves.id_bytes, moves.id_offsets)
        return _plain([R.series_carry_record(board_id, ctl.spec.series, ids, moves.tiers)])
    if kind == Submission.AWARDS:
        board_id, parts = payload
        ctl = ov.need(board_id)
        done = 0 if ctl.awards is None else len(ctl.awards.offsets)
        return _plain([rec for rec in parts if rec.part >= done] if ctl.awards_due else [])
    if kind == Submission.ERASE:
        rec: R.ErasureRecord = payload
        for ev in rec.boards:
            ctl = ov.ctl(ev[0])
            if ctl is not None:
                _no_awards_due(ov, ctl)  # awards still being logged could name the player again
        if rec.erasure_id in ov.registry.erasures.entries:
            return _plain([])
        return _plain([rec])
    if kind == Submission.ERASED:
        complete: R.ErasureDoneRecord = payload
        got = ov.registry.erasures.get(complete.erasure_id)
        return _plain([complete] if got is not None and got.pending else [])
    raise ValueError(kind)


def _carry_due(ov: Overlay, ctl: BoardCtl) -> bool:
    """Whether the board (as the cycle has it) is an instance of a league series that is FROZEN or later without
    its ``Y`` record (the tiers it carries to its series, docs/api.md §18)."""
    return (not ctl.carried and ctl.spec.board_id not in ov.carried and ctl.spec.series is not None
            and ctl.admission.league is not None and ov.state(ctl) is not BoardState.OPEN)


def _no_carry_due(ov: Overlay, series_id: str | None) -> None:
    """AwardsPending while an instance of the series ``series_id`` awaits its ``Y`` record: nobody enters an
    instance of a league series between another instance's FROZEN and the tiers it carries (docs/api.md §18),
    so a player entering after FROZEN enters at the tier carried there."""
    if series_id is None:
        return
    for iid in ov.registry.instances.get(series_id, {}).values():
        ctl = ov.ctl(iid)
        if ctl is not None and _carry_due(ov, ctl):
            raise AwardsPending(f"Instance {iid!r} of series {series_id!r} froze and the tiers it carries are being "
                                "logged; retry in a moment.", None, retry_after=1)


def _no_awards_due(ov: Overlay, ctl: BoardCtl) -> None:
    """AwardsPending when the board (as the cycle has it) is FINALIZED with prizes whose awards are not all logged,
    or an instance of a league series FROZEN without the tiers it carries (docs/api.md §18): nothing that changes
    its rows (or archives it) comes between its FINALIZED record and its awards, or its FROZEN and its carry."""
    if _carry_due(ov, ctl):
        raise AwardsPending(f"Board {ctl.spec.board_id!r} froze and the tiers it carries to its series are being "
                            "logged; retry in a moment.", None, retry_after=1)
    awards = ctl.awards
    if awards is not None and not awards.complete and ov.state(ctl) in (BoardState.FINALIZED, BoardState.ARCHIVED):
        raise AwardsPending(f"Board {ctl.spec.board_id!r} is FINALIZED and its awards are being computed; retry in a "
                            "moment.", None, retry_after=1)


def _join_target(ov: Overlay, board_id: str, now_ms: int) -> tuple[BoardCtl, BoardState, list]:
    """The board a join of ``board_id`` joins, its season state and the records creating it first: the
    board itself, or for a series the instance of the window containing ``now_ms`` (docs/api.md §18),
    created on demand at this log position as a score event creates it (:func:`_new_instance`). Raises
    BoardNotFound."""
    ctl = ov.need(board_id)
    rec = ctl.spec.recurrence
    if rec is None:
        return ctl, ov.state(ctl), []
    w = window_of(rec, now_ms)
    got = ov.ctl(instance_id(board_id, w))
    if got is not None:
        return got, ov.state(got), []
    made = _new_instance(ctl.spec, w, now_ms)
    state = _made_state(made)
    return ov.registry.new_ctl(R.spec_of(made[0])), state, made


def _decide_joins(ov: Overlay, board_id: str, player_ids, now_ms: int, bulk: bool) -> Decision:
    """Joins (docs/api.md §16, §18), each player in order judged by the one rule of a join
    (:func:`engine.core.entry.join_answer`) as if the joins before it were applied: a player who joined
    before (durably, earlier in the cycle, or earlier in this request) gets their position and no record;
    else the board must be OPEN and not full, and the join takes the next position. The answer is a
    :class:`BulkJoinResult` with, per player, a JoinResult or the BoardNotOpen / BoardFull the join meets.
    The new joins are one ``H`` record (``bulk``) or, for a single join, one ``J`` record. Raises
    BoardNotFound."""
    ctl, state, records = _join_target(ov, board_id, now_ms)
    target = ctl.spec.board_id
    if ctl.admission.league is not None and state is BoardState.OPEN:
        _no_carry_due(ov, ctl.spec.series)
    over = ov.entry_over(ctl) if not records else None
    table = ctl.admission.entry
    joined = (over if over is not None else table).joined
    first = joined
    is_open = state is BoardState.OPEN
    series = target if target != board_id else None
    known = join_positions(table, over, player_ids)
    results: list = []
    new: list[str] = []
    for player_id, pos in zip(player_ids, known.tolist()):
        try:
            had = join_answer(ctl.spec.entry, PlayerEntry(None if pos < 0 else pos, 0, False), joined, is_open)
        except (BoardNotOpen, BoardFull) as exc:
            results.append(exc)
            continue
        if had is not None:
            results.append(JoinResult(player_id, had, False, series))
            continue
        results.append(JoinResult(player_id, joined, True, series))
        new.append(player_id)
        joined += 1
    if new:
        records.append(R.joins_record(target, new, first) if bulk else R.join_record(target, new[0], first))
    n = len(records)
    return Decision(records, [None] * n, [False] * n, answer=BulkJoinResult(target, tuple(results)))


def _plain(records: list) -> Decision:
    return Decision(records, [None] * len(records), [False] * len(records))


def instance_spec(series: BoardSpec, w: Window) -> BoardSpec:
    """The spec of window ``w``'s instance of the series ``series``: the
    series' settings (competition settings and subscores too, docs/api.md
    §18), closing at the window's end."""
    return BoardSpec(instance_id(series.board_id, w), series.policy, series.shards, series.max_plausible_time_ms,
                     series.review_above, w.end_ms, series.finalize_after_s, entry=series.entry,
                     league=series.league, prizes=series.prizes, series=series.board_id,
                     window=(w.start_ms, w.end_ms), subscores=series.subscores)


def _new_instance(series: BoardSpec, w: Window, now_ms: int) -> list:
    """The records creating ``w``'s instance at ``now_ms``: its ``W`` (``V``)
    record, then the season moves already due (FROZEN when its window has
    ended, FINALIZED ``finalize_after_s`` later); an instance of a league
    series created FROZEN carries no tiers (nobody entered it while it was
    open), so its empty ``Y`` record follows the FROZEN at once (docs/api.md
    §18)."""
    spec = instance_spec(series, w)
    moves = season.due(BoardState.OPEN, spec.closes_at, spec.finalize_after_s, now_ms).transitions
    made: list = [R.board_record(spec)]
    for m in moves:
        made.append(R.StateRecord(R.STATE, spec.board_id, m.value))
        if m is BoardState.FROZEN and spec.league is not None:
            made.append(R.series_carry_record(spec.board_id, series.board_id, [], np.zeros(0, np.int8)))
    return made


def _made_state(made: list) -> BoardState:
    """The season state of an instance :func:`_new_instance` made: its last state record's, else OPEN."""
    states = [rec.state for rec in made if rec.kind == R.STATE]
    return BoardState(states[-1]) if states else BoardState.OPEN


def _route(ov: Overlay, batch: ScoreBatch, now_ms: int, records: list, created: dict) -> ScoreBatch | None:
    """Send every event addressed to a series to its window's instance (one
    :func:`engine.core.windows.windows_of` per series of the batch), adding the
    records of instances created on demand to ``records`` and their control
    state and season state to ``created``. Returns the batch as its events
    land, one entry per board in order of first appearance (None: no event
    was sent to a series). Raises ValidationFailed naming the first event (in
    request order) more than one window ahead."""
    if not any((c := ov.ctl(cols.board_id)) is not None and c.spec.recurrence is not None for cols in batch.boards):
        return None
    pieces: dict[str, list] = {}
    too_far: tuple[int, int] | None = None  # (request index, horizon) of the first event too far ahead
    for cols, pos in zip(batch.boards, batch.positions):
        ctl = ov.ctl(cols.board_id)
        rec = None if ctl is None else ctl.spec.recurrence
        if ctl is None or rec is None:
            pieces.setdefault(cols.board_id, []).append((cols, pos))
            continue
        limit = horizon(rec, now_ms)
        late = np.flatnonzero(cols.achieved >= limit)
        if len(late):
            first = batch.request_index(int(pos[late].min()))  # positions grow with request order
            if too_far is None or first < too_far[0]:
                too_far = (first, limit)
            continue
        starts, ends, dates = windows_of(rec, cols.achieved)
        if int(dates.min()) == int(dates.max()):
            groups = [(0, np.arange(len(cols)))]
        else:
            _, first_rows, which = np.unique(dates, return_index=True, return_inverse=True)
            order = np.argsort(which, kind="stable")
            bounds = np.searchsorted(which[order], np.arange(len(first_rows) + 1))
            groups = sorted((int(first_rows[k]), order[bounds[k]:bounds[k + 1]]) for k in range(len(first_rows)))
            # (instances in order of their first event)
        for at, rows in groups:
            w = Window(int(starts[at]), int(ends[at]), int(dates[at]))
            iid = instance_id(ctl.spec.board_id, w)
            if iid not in created and ov.ctl(iid) is None:
                made = _new_instance(ctl.spec, w, now_ms)
                records.extend(made)
                state = _made_state(made)
                created[iid] = (ov.registry.new_ctl(R.spec_of(made[0])), state)
            whole = len(rows) == len(cols)
            pieces.setdefault(iid, []).append((cols if whole else cols.take(rows), pos if whole else pos[rows]))
    if too_far is not None:
        raise ValidationFailed(f"achieved_at is more than one window ahead of its series' current window (windows "
                               f"starting at {format_timestamp(too_far[1])} or later are not open yet).",
                               f"events[{too_far[0]}].achieved_at")
    boards, positions = [], []
    for board_id, got in pieces.items():
        if len(got) == 1:
            cols, pos = got[0]
            boards.append(cols if cols.board_id == board_id else ScoreColumns(board_id, *cols[1:]))
            positions.append(pos)
            continue
        cols = concat_columns(board_id, [c for c, _ in got])
        pos = np.concatenate([p for _, p in got])
        order = np.argsort(pos, kind="stable")  # one board's events in submission order
        boards.append(cols.take(order))
        positions.append(pos[order])
    return ScoreBatch(batch.event_ids, boards, positions, batch.origin)


def _decide_scores(ov: Overlay, batch: ScoreBatch, now_ms: int = 0) -> Decision:
    """Events sent to a series go to their windows' instances first
    (:func:`_route`, creating missing ones). Then each board's events are
    decided in order (one pass over its columns), and each partition's share
    becomes one columnar record; when the batch fans out (an event for
    several boards), those records travel as one ``G`` record, so a torn log
    tail keeps all of them or none."""
    records: list = []
    created: dict[str, tuple[BoardCtl, BoardState]] = {}
    routed = _route(ov, batch, now_ms, records, created)
    memos: list = [None] * len(records)
    ids_new: list = [False] * len(records)
    places: list = []
    lead = len(records)
    entering: list = []  # P records: players the batch makes enter a league board (docs/api.md §16)
    for cols in (batch if routed is None else routed).boards:
        made = created.get(cols.board_id)
        ctl = made[0] if made is not None else ov.ctl(cols.board_id)
        if ctl is None:
            places.append(None)
            continue
        state = made[1] if made is not None else ov.state(ctl)
        fresh = ctl.admission.remembers_every_id
        got = ctl.admission.decide_columns(cols, earlier=ov.earlier(cols.board_id), state=state,
                                           entry_over=ov.entry_over(ctl))
        league = ctl.admission.league
        if league is not None:  # in submission order, whatever the partition count
            new = league.entrants(cols.player_ids, got.verdicts)
            if new:
                _no_carry_due(ov, ctl.spec.series)  # an instance of a league series (docs/api.md §18)
                entering.append(R.EnterRecord(R.ENTER, cols.board_id, new))
        n_parts = ctl.spec.shards
        mine = []
        quiet = got.erased  # an erased player's events sent again: answered, never logged (docs/api.md §17)
        if quiet is not None:
            mine.append(ScorePlace(-1, quiet, codes=got.verdicts[quiet]))
            keep = np.setdiff1d(np.arange(len(cols)), quiet)
            if not len(keep):
                places.append(mine)
                continue
            cols = cols.take(keep)
            got = got._replace(verdicts=got.verdicts[keep], words=got.words[keep], fps=got.fps[keep], erased=None)
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
            mine.append(ScorePlace(len(records) - 1, rows if quiet is None else keep[rows]))
        places.append(mine)
    if batch.origin is not None and len(records) - lead > 1:  # a fan-out: its score records as one G record
        parts = records[lead:]
        group_memo = GroupMemo(memos[lead:])
        fresh_all = all(ids_new[lead:])
        del records[lead:], memos[lead:], ids_new[lead:]
        records.append(R.group_record(parts))
        memos.append(group_memo)
        ids_new.append(fresh_all)
        places = [None if mine is None else [p if p.record < 0 else ScorePlace(lead, p.rows, p.record - lead)
                                             for p in mine] for mine in places]
    if entering:  # before the score records: a torn tail never keeps scores without their placement
        k = len(entering)
        records[lead:lead] = entering
        memos[lead:lead] = [None] * k
        ids_new[lead:lead] = [False] * k
        places = [None if mine is None else [p if p.record < 0 else p._replace(record=p.record + k) for p in mine]
                  for mine in places]
    return Decision(records, memos, ids_new, places, routed=routed)

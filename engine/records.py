"""What goes into the event log, as compact msgpack-able lists.

Every record is a list whose first item is its kind letter; :data:`KINDS` is
the table of kinds and their field layouts, :data:`CODE` the table of outcome
codes. Both are on-disk formats (docs/storage.md, "Record vocabulary"):
append-only, pinned by tests/engine/test_records.py, and numbered together as
:data:`engine.formats.LOG_FORMAT`. A letter or a code never changes meaning;
a new layout is a new letter (as ``C`` followed ``S``).

Score events are logged as received together with the admission verdict the
router decided in log order (0 = go on to apply, else the outcome code), so
every partition can replay its share of the log on its own and reach the same
outcomes, whatever the current dedup settings. Nothing here reads a clock.
"""

from __future__ import annotations

from typing import Iterable, Iterator, NamedTuple

import numpy as np

from engine.columns import ScoreColumns
from engine.errors import UnsupportedFormat
from engine.formats import LOG_FORMAT
from engine.model import BoardSpec, Outcome, Policy, ScoreEvent

BOARD, STATE, SCORE, SCORES, INVALIDATE, DECIDE = "B", "T", "S", "C", "I", "D"
BOARD2 = "K"
#: Either board-creation kind (``K`` followed ``B`` in log format 2).
BOARD_KINDS = frozenset({BOARD, BOARD2})
SCORES_META, DECIDE_META = "M", "E"
#: Both columnar score kinds (``M`` is ``C`` plus the events' metadata).
SCORE_BATCHES = (SCORES, SCORES_META)
#: Both decision kinds (``E`` is ``D`` plus the held event's metadata).
DECISIONS = (DECIDE, DECIDE_META)
#: A dead letter: a record (or one row of a columnar one) a shard could not apply (log format 4).
DEAD_LETTER = "L"
#: At most this many characters of a dead letter's error text are kept (in the log and in shard state).
MAX_ERROR_CHARS = 500


class RecordKind(NamedTuple):
    """One kind of log record: its name and the fields after the kind letter."""

    name: str
    fields: tuple[str, ...]
    doc: str


#: Record kinds as logged: append-only (a letter never changes meaning or layout).
KINDS: dict[str, RecordKind] = {
    BOARD: RecordKind("board", ("board_id", "policy", "shards", "max_plausible_time_ms", "review_above"),
                      "board created; policy is the Policy value, review_above None or an int (logs written "
                      "before the scheduled record K; still replayed, no longer written)"),
    BOARD2: RecordKind("scheduled board", ("board_id", "policy", "shards", "max_plausible_time_ms", "review_above",
                                           "closes_at", "finalize_after_s"),
                       "board created, as B plus its season schedule: closes_at None or epoch ms, "
                       "finalize_after_s an int >= 0"),
    STATE: RecordKind("state", ("board_id", "state"),
                      "season state change to a BoardState value; its offset is the freeze position"),
    SCORES: RecordKind("scores", ("board_id", "partition", "event_ids", "player_ids", "values", "achieved",
                                  "submitted", "verdicts"),
                       "score events of one board partition from one sequencing cycle, as columns: lists of "
                       "str, little-endian int64 arrays as bytes, verdicts uint8 bytes (0 = apply, else a "
                       "CODE); one frame, one offset; an event is (offset, row)"),
    SCORES_META: RecordKind("scores_meta", ("board_id", "partition", "event_ids", "player_ids", "values", "achieved",
                                            "submitted", "verdicts", "meta", "meta_offsets"),
                            "a scores record whose events carry metadata (docs/api.md §13): the fields of C, then "
                            "the metadata arena (canonical compact JSON, bytes) and little-endian int64 offsets "
                            "(one more than events; an empty slice: none). Written only when some event of the "
                            "frame carries metadata, so logs without metadata are unchanged"),
    SCORE: RecordKind("score", ("board_id", "event_id", "player_id", "value", "achieved_at", "submitted_at",
                                "verdict"),
                      "one score event (logs written before the columnar record; still replayed, no "
                      "longer written)"),
    INVALIDATE: RecordKind("invalidation", ("board_id", "event_id", "correction_id", "reason", "moderator"),
                           "a moderator's invalidation of an applied event"),
    DECIDE: RecordKind("decision", ("board_id", "event_id", "decision", "reason", "moderator", "player_id",
                                    "value", "achieved_at", "submitted_at"),
                       "quarantine decision (\"apply\" | \"reject\") on a held event, with the held event"),
    DECIDE_META: RecordKind("decision_meta", ("board_id", "event_id", "decision", "reason", "moderator", "player_id",
                                              "value", "achieved_at", "submitted_at", "metadata"),
                            "a decision whose held event carries metadata: the fields of D, then the metadata "
                            "(canonical compact JSON, bytes); written only then"),
    DEAD_LETTER: RecordKind("dead_letter", ("board_id", "offset", "row", "event_id", "error"),
                            "a record that raised when a shard applied it (a bug, not an expected outcome): the "
                            "offset of that record, the row of the event within a columnar score record (None "
                            "for other kinds), its event id (None when it has none) and the error text (at most "
                            "MAX_ERROR_CHARS characters). Logged by the router after the record it names; replay "
                            "skips what it names, whatever the code does today (log format 4)"),
}

# Outcome codes as logged: append-only (a code never changes meaning). 0 means "apply".
CODE = {
    Outcome.APPLIED_FIRST_SCORE: 1, Outcome.APPLIED_NEW_BEST: 2, Outcome.REJECTED_NOT_AN_IMPROVEMENT: 3,
    Outcome.APPLIED: 4, Outcome.APPLIED_NEW_BEST_TIME: 5, Outcome.REJECTED_NOT_FASTER: 6,
    Outcome.REJECTED_INVALID_TIMING: 7, Outcome.DUPLICATE_IGNORED: 8, Outcome.REJECTED_EVENT_ID_CONFLICT: 9,
    Outcome.HELD_FOR_CORRECTION: 10, Outcome.HELD_FOR_REVIEW: 11, Outcome.REJECTED_UNKNOWN_SEASON: 12,
    Outcome.DEAD_LETTERED: 13, Outcome.REJECTED_TOTAL_OUT_OF_RANGE: 14,
}
assert set(CODE) == set(Outcome), "every outcome needs a code"
_BY_CODE = {c: o for o, c in CODE.items()}
APPLY = 0


#: outcome name by code (index), for turning a column of codes into the API's strings
OUTCOME_NAMES: tuple[str, ...] = tuple(_BY_CODE[c].value if c in _BY_CODE else "" for c in range(max(_BY_CODE) + 1))


def outcome_of(code: int) -> Outcome:
    return _BY_CODE[code]


def check_kind(offset: int, rec: list) -> None:
    """Refuse a record whose kind is not in :data:`KINDS` (a newer writer's
    vocabulary, or damage) rather than skip it silently."""
    if not isinstance(rec, list) or not rec or rec[0] not in KINDS:
        kind = rec[0] if isinstance(rec, list) and rec else rec
        raise UnsupportedFormat(
            f"log record at offset {offset} has kind {kind!r}, not in log record format {LOG_FORMAT} "
            f"(kinds {''.join(KINDS)}); it was written by a newer FlowRank or is damaged")


def decide_record(board_id: str, event_id: str, decision: str, reason, moderator, held) -> list:
    """The log record of a quarantine decision on ``held`` (a HeldEvent):
    ``E`` when the held event carries metadata, else ``D``."""
    rec = [DECIDE, board_id, event_id, decision, reason, moderator, held.player_id, held.value, held.achieved_at,
           held.submitted_at]
    if held.metadata:
        rec[0] = DECIDE_META
        rec.append(held.metadata)
    return rec


def decided_event(rec: list) -> ScoreEvent:
    """The held event a ``D`` / ``E`` record decides on."""
    return ScoreEvent(rec[1], rec[2], rec[6], rec[7], rec[8], rec[9], rec[10] if rec[0] == DECIDE_META else b"")


def board_record(spec: BoardSpec) -> list:
    return [BOARD2, spec.board_id, spec.policy.value, spec.shards, spec.max_plausible_time_ms, spec.review_above,
            spec.closes_at, spec.finalize_after_s]


def spec_of(rec: list) -> BoardSpec:
    """The spec of a ``K`` record, or of an older ``B`` one (no schedule:
    ``closes_at`` None, the default ``finalize_after_s``)."""
    if rec[0] == BOARD2:
        return BoardSpec(rec[1], Policy(rec[2]), rec[3], rec[4], rec[5], rec[6], rec[7])
    return BoardSpec(rec[1], Policy(rec[2]), rec[3], rec[4], rec[5])


def score_record(ev: ScoreEvent, verdict: Outcome | None) -> list:
    return [SCORE, ev.board_id, ev.event_id, ev.player_id, ev.value, ev.achieved_at, ev.submitted_at,
            APPLY if verdict is None else CODE[verdict]]


def event_of(rec: list) -> ScoreEvent:
    return ScoreEvent(rec[1], rec[2], rec[3], rec[4], rec[5], rec[6])


def verdict_of(rec: list) -> Outcome | None:
    return None if rec[7] == APPLY else outcome_of(rec[7])


def scores_record(cols: ScoreColumns, partition: int, verdicts: np.ndarray) -> list:
    """One columnar record for a partition's share of a cycle's events
    (``M`` when some event carries metadata, else ``C``)."""
    rec = [SCORES, cols.board_id, partition, cols.event_ids, cols.player_ids, _le64(cols.values),
           _le64(cols.achieved), _le64(cols.submitted), np.asarray(verdicts, np.uint8).tobytes()]
    if cols.moffs is not None and cols.meta is not None:
        rec[0] = SCORES_META
        rec += [cols.meta.tobytes(), _le64(cols.moffs)]
    return rec


def columns_of(rec: list) -> tuple[ScoreColumns, np.ndarray]:
    """A ``SCORES`` (or ``SCORES_META``) record's columns and verdicts (0 = apply)."""
    meta = moffs = None
    if rec[0] == SCORES_META:
        meta = np.frombuffer(rec[9], np.uint8).copy()
        moffs = np.frombuffer(rec[10], "<i8").astype(np.int64)
    return (ScoreColumns(rec[1], rec[3], rec[4], np.frombuffer(rec[5], "<i8").astype(np.int64),
                         np.frombuffer(rec[6], "<i8").astype(np.int64), np.frombuffer(rec[7], "<i8").astype(np.int64),
                         meta, moffs),
            np.frombuffer(rec[8], np.uint8).copy())


def logged_events(rec: list) -> Iterator[tuple[ScoreEvent, int]]:
    """Every score event a record holds with its verdict code, in log order
    (either record kind; none for other records)."""
    if rec[0] == SCORE:
        yield event_of(rec), rec[7]
    elif rec[0] in SCORE_BATCHES:
        cols, verdicts = columns_of(rec)
        yield from zip(cols.events(), verdicts.tolist())


class DeadLetter(NamedTuple):
    """What a dead-letter record says: the record at ``offset`` (row ``row``
    of a columnar score record, else None) was not applied, because of ``error``."""

    board_id: str | None
    offset: int
    row: int | None
    event_id: str | None
    error: str

    @property
    def key(self) -> tuple[int, int | None]:
        return (self.offset, self.row)


def error_text(exc: BaseException) -> str:
    """The error text a dead letter keeps: type and message, at most MAX_ERROR_CHARS characters."""
    return f"{type(exc).__name__}: {exc}"[:MAX_ERROR_CHARS]


def dead_letter_record(d: DeadLetter) -> list:
    return [DEAD_LETTER, d.board_id, d.offset, d.row, d.event_id, d.error[:MAX_ERROR_CHARS]]


def dead_letter_of(rec: list) -> DeadLetter:
    return DeadLetter(rec[1], rec[2], rec[3], rec[4], rec[5])


#: How a dead-letter record's payload begins: a msgpack fixarray of its six items, then its kind
#: letter as a one-character fixstr. No other record begins so (another kind letter, or another
#: length), so :meth:`engine.log.EventLog.read_where` finds them from these 3 bytes without
#: decoding any other record.
DEAD_LETTER_HEAD = bytes([0x90 | (1 + len(KINDS[DEAD_LETTER].fields)), 0xA1]) + DEAD_LETTER.encode()


def dead_letters_in(records: Iterable[tuple[int, list]]) -> dict[tuple[int, int | None], DeadLetter]:
    """The dead letters named by ``(offset, record)`` pairs (others are ignored), by
    ``(offset, row)`` of the record they name; a repeated one counts once (the first)."""
    out: dict[tuple[int, int | None], DeadLetter] = {}
    for _, rec in records:
        if rec[0] == DEAD_LETTER:
            d = dead_letter_of(rec)
            out.setdefault(d.key, d)
    return out


def _le64(a: np.ndarray) -> bytes:
    return np.asarray(a, "<i8").tobytes()

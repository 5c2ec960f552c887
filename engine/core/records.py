"""What goes into the event log: named records that msgpack writes as lists.

Every record is a list whose first item is its kind letter; :data:`KINDS` is
the table of kinds and their field layouts, :data:`CODE` the table of outcome
codes. Code reads and writes records as the named tuple of their kind
(:data:`TYPES`, :func:`parse`): its first field is ``kind``, the others are the
kind's fields, and msgpack packs it to the same bytes as the list. Both are on-disk formats (docs/storage.md, "Record vocabulary"):
append-only, pinned by tests/engine/test_records.py, and numbered together as
:data:`engine.core.formats.LOG_FORMAT`. A letter or a code never changes meaning;
a new layout is a new letter (as ``C`` followed ``S``).

Score events are logged as received together with the admission verdict the
router decided in log order (0 = go on to apply, else the outcome code), so
every partition can replay its share of the log on its own and reach the same
outcomes, whatever the current dedup settings. Nothing here reads a clock.
"""

from __future__ import annotations

import json
from typing import Iterable, Iterator, NamedTuple

import numpy as np

from engine.core.columns import ScoreColumns
from engine.core.errors import UnsupportedFormat
from engine.core.formats import LOG_FORMAT
from engine.core.model import BoardSpec, EntrySpec, LeagueSpec, Outcome, Policy, Prize, ScoreEvent
from engine.core.entry import ENTRY_CODES, ENTRY_OUTCOMES
from engine.core.windows import Recurrence

BOARD, STATE, SCORE, SCORES, INVALIDATE, DECIDE = "B", "T", "S", "C", "I", "D"
BOARD2 = "K"
#: A series board (docs/api.md §15): ``K`` plus its recurrence; written only for a board that has one.
SERIES = "R"
#: A board with options (docs/api.md §16): ``R``'s fields (recurrence nil for none), then a map of
#: options; written only for a board that has one (today: ``entry``), so other boards' records are unchanged.
OPTIONS_BOARD = "O"
#: One window's board of a series (docs/api.md §15): ``K`` plus its series and window.
INSTANCE = "W"
#: One window's board of a series with competition settings or subscores (docs/api.md §18): ``W`` plus options.
INSTANCE_OPTIONS = "V"
#: Every board-creation kind (``K`` followed ``B`` in log format 2; ``R`` is ``K`` with a recurrence, ``W`` with
#: a series and window, ``O`` with options, ``U`` with subscores).
BOARD_KINDS = frozenset({BOARD, BOARD2, SERIES, INSTANCE, OPTIONS_BOARD, "U", INSTANCE_OPTIONS})  # "U": BOARD_SUBS
#: A player joined a competition (docs/api.md §16): their 0-based position in the order of joining.
JOIN = "J"
#: Players joining a competition together (docs/api.md §18, bulk entry): one record for a request's new joins.
JOINS = "H"
#: The score records of one submission that fans out to several boards (docs/api.md §15), as one record.
GROUP = "G"
#: The tiers a league board's next season carries (docs/api.md §16): logged right after the new board's record.
CARRY = "Q"
#: The tiers an instance of a league series carries to its series when it becomes FROZEN (docs/api.md §18).
SERIES_CARRY = "Y"
#: Players entering a league board with a score submission, in submission order (docs/api.md §16).
ENTER = "P"
#: One part of the awards computed when a board with prizes became FINALIZED (docs/api.md §16).
AWARDS = "A"
SCORES_META, DECIDE_META = "M", "E"
#: Both columnar score kinds (``M`` is ``C`` plus the events' metadata).
SCORE_BATCHES = (SCORES, SCORES_META, "N")  # "N": SCORES_SUBS, below
#: Both decision kinds (``E`` is ``D`` plus the held event's metadata; ``F`` also has subscores).
DECISIONS = (DECIDE, DECIDE_META, "F")  # "F": DECIDE_SUBS, below
#: A dead letter: a record (or one row of a columnar one) a shard could not apply (log format 4).
DEAD_LETTER = "L"
#: A player's erasure (docs/api.md §17, log format 7): from its position the player is gone; and its completion
#: on disk. ``engine.core.erasure`` holds what they mean.
ERASE, ERASED = "X", "Z"
#: Subscores (docs/api.md §14, log format 5): a board declared with subscores (``U``: ``K`` plus
#: their directions), its score frames (``N``: ``M`` plus the subscores) and decisions (``F``:
#: ``E`` plus the held event's subscores). Written only for boards with subscores, so the
#: records of every other board are byte for byte as before.
BOARD_SUBS, SCORES_SUBS, DECIDE_SUBS = "U", "N", "F"
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
    SERIES: RecordKind("series board", ("board_id", "policy", "shards", "max_plausible_time_ms", "review_above",
                                        "closes_at", "finalize_after_s", "recurrence"),
                       "a recurring board (a series of time windows, docs/api.md §15): the fields of K, then its "
                       "recurrence as a map {every, timezone, at, keep} (Recurrence.to_json, keys in that order). "
                       "Written only for a board that has a recurrence, so logs without series are unchanged"),
    OPTIONS_BOARD: RecordKind("options board", ("board_id", "policy", "shards", "max_plausible_time_ms",
                                                "review_above", "closes_at", "finalize_after_s", "recurrence",
                                                "options"),
                              "a board with options: the fields of R (recurrence nil for none), then a map of "
                              "options whose keys a reader must all know (else UnsupportedFormat): \"entry\" "
                              "{join_required, max_players, max_attempts}, \"league\" {cohort_size, tiers, promote, "
                              "demote}, \"prizes\" [{ranks: [from, to], reward}] (each in that key order; a key "
                              "only when the board has that option; docs/api.md §16), and from log format 9 "
                              "\"subscores\" [directions] when a board with subscores also has a recurrence or "
                              "another option (docs/api.md §18; a board with subscores only stays U). "
                              "Written only for a board that has an option, so other boards' records are unchanged"),
    JOIN: RecordKind("join", ("board_id", "player_id", "position"),
                     "a player joined a competition (docs/api.md §16) at this 0-based position in the order of "
                     "joining; logged once per player and board, changes no board version"),
    JOINS: RecordKind("joins", ("board_id", "player_ids", "first"),
                      "players joining a competition in one request (docs/api.md §18, bulk entry): those who had "
                      "not joined before, in request order, at the consecutive 0-based positions first, first + 1, "
                      "…; one frame, so a torn tail keeps all of a request's joins or none; changes no board "
                      "version (log format 8)"),
    CARRY: RecordKind("carried tiers", ("board_id", "player_ids", "tiers"),
                      "the tiers a league board made by next-season carries (docs/api.md §16), logged right after "
                      "its board record: per player who had entered the previous season's board, its id and its "
                      "tier there after the promote and demote zones moved it (int8 bytes, 1 the lowest)"),
    ENTER: RecordKind("league entry", ("board_id", "player_ids"),
                      "the players a score submission makes enter a league board (docs/api.md §16): those of its "
                      "admitted events not placed in a cohort before it, in the order the submission listed them "
                      "(so placement does not depend on the partition count); logged before the submission's score "
                      "records, and folded by placing each one not placed yet"),
    AWARDS: RecordKind("awards", ("board_id", "version", "part", "parts", "player_ids", "ranks", "tiers", "numbers",
                                  "prizes"),
                       "part ``part`` (0-based) of ``parts`` of the awards of a board with prizes, computed from the "
                       "ranking at its FINALIZED record (board version ``version``) and logged after it, in award "
                       "order (docs/api.md §16): per award the player id, its strict rank (cohort-local on a "
                       "league; little-endian int64 bytes), its cohort's tier (int8) and number (int32; both 0 off "
                       "leagues) and the index of its prize range in the board's prizes (int16)"),
    INSTANCE_OPTIONS: RecordKind("instance board with options",
                                 ("board_id", "policy", "shards", "max_plausible_time_ms", "review_above",
                                  "closes_at", "finalize_after_s", "series", "starts_at", "ends_at", "options"),
                                 "one window's board of a series that has competition settings or subscores "
                                 "(docs/api.md §18): the fields of W, then the options map of an O record (entry, "
                                 "league, prizes, subscores: the series' own). Written only for such an instance, "
                                 "so other instances stay W (log format 9)"),
    SERIES_CARRY: RecordKind("tiers carried to a series", ("board_id", "series", "player_ids", "tiers"),
                             "the tiers an instance of a league series (board_id) carries to its series when it "
                             "becomes FROZEN (docs/api.md §18), by the next-season rule of Q, from the ranking at its "
                             "FROZEN record (nothing changes its rows in between): per player who had entered the "
                             "instance, its id and its tier after the zones moved it (int8 bytes, 1 the lowest). "
                             "Folded into the series' carried tiers, where later instances place players; logged "
                             "once per instance (log format 9)"),
    INSTANCE: RecordKind("instance board", ("board_id", "policy", "shards", "max_plausible_time_ms", "review_above",
                                            "closes_at", "finalize_after_s", "series", "starts_at", "ends_at"),
                         "one window's board of a series (docs/api.md §15): the fields of K (closes_at is the "
                         "window's end), then the series' board id and the window's start and end (epoch ms)"),
    GROUP: RecordKind("score group", ("parts",),
                      "the score records of one submission whose events fan out to several boards (docs/api.md "
                      "§15), as one frame so that a torn tail keeps all of them or none: a list of C / M records "
                      "(each as its own list), at most one per board partition. A dead letter names a row of a "
                      "group by its index counted across the parts in order"),
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
    BOARD_SUBS: RecordKind("subscores board", ("board_id", "policy", "shards", "max_plausible_time_ms",
                                               "review_above", "closes_at", "finalize_after_s", "subscores"),
                           "board created with subscores (docs/api.md §14): the fields of K, then the list of "
                           "the subscores' directions (\"desc\" | \"asc\", 1 to 3)"),
    SCORES_SUBS: RecordKind("scores_subs", ("board_id", "partition", "event_ids", "player_ids", "values", "achieved",
                                            "submitted", "verdicts", "meta", "meta_offsets", "subscores"),
                            "a scores record of a board with subscores: the fields of M (meta and meta_offsets "
                            "empty bytes when no event of the frame carries metadata), then the subscores as "
                            "little-endian int64 bytes, row by row (events x the board's subscores)"),
    DECIDE_SUBS: RecordKind("decision_subs", ("board_id", "event_id", "decision", "reason", "moderator", "player_id",
                                              "value", "achieved_at", "submitted_at", "metadata", "subscores"),
                            "a decision on a held event of a board with subscores: the fields of E (metadata "
                            "b\"\" when none), then the held event's subscores (a list of ints)"),
    ERASE: RecordKind("erasure", ("erasure_id", "requested_at", "subject", "player_id", "pseudonym", "key", "boards"),
                      "a player's erasure (docs/api.md §17): its id, when it was requested (epoch ms), the keyed "
                      "hash of the player id (32 hex digits), the player id and the key (bytes) its pseudonyms are "
                      "derived from (both nil once the log before it is rewritten), the pseudonym the player id "
                      "becomes in the rewritten records, and per board [board_id, event ids, keyed hashes (12 "
                      "bytes each), content folds (little-endian uint32)] of the player's events. Every shard actor "
                      "removes the player id and the pseudonym from every partition it hosts; the router from "
                      "admission, entry, cohorts and awards, and keeps the keyed hashes (log format 7)"),
    ERASED: RecordKind("erasure complete", ("erasure_id", "completed_at"),
                       "the erasure's forgetting on disk is complete (epoch ms): the log before its X record is "
                       "rewritten, snapshots, journals, archives and the outbox no longer hold the ids (log "
                       "format 7)"),
    DEAD_LETTER: RecordKind("dead_letter", ("board_id", "offset", "row", "event_id", "error"),
                            "a record that raised when a shard applied it (a bug, not an expected outcome): the "
                            "offset of that record, the row of the event within a columnar score record (None "
                            "for other kinds), its event id (None when it has none) and the error text (at most "
                            "MAX_ERROR_CHARS characters). Logged by the router after the record it names; replay "
                            "skips what it names, whatever the code does today (log format 4)"),
}

class BoardRecord(NamedTuple):
    """``B``: a board created without a season schedule (read, no longer written)."""

    kind: str
    board_id: str
    policy: str
    shards: int  # how many partitions the board has (the API's name for it)
    max_plausible_time_ms: int | None
    review_above: int | None


class ScheduledBoardRecord(NamedTuple):
    """``K``: a board created, with its season schedule."""

    kind: str
    board_id: str
    policy: str
    shards: int  # how many partitions the board has (the API's name for it)
    max_plausible_time_ms: int | None
    review_above: int | None
    closes_at: int | None
    finalize_after_s: int


class SubscoresBoardRecord(NamedTuple):
    """``U``: a board created with subscores."""

    kind: str
    board_id: str
    policy: str
    shards: int
    max_plausible_time_ms: int | None
    review_above: int | None
    closes_at: int | None
    finalize_after_s: int
    subscores: list


class SeriesBoardRecord(NamedTuple):
    """``R``: a series board created: ``K`` plus its recurrence."""

    kind: str
    board_id: str
    policy: str
    shards: int
    max_plausible_time_ms: int | None
    review_above: int | None
    closes_at: int | None
    finalize_after_s: int
    recurrence: dict  # Recurrence.to_json()


class OptionsBoardRecord(NamedTuple):
    """``O``: a board created with options (``R``'s fields, then the options map)."""

    kind: str
    board_id: str
    policy: str
    shards: int
    max_plausible_time_ms: int | None
    review_above: int | None
    closes_at: int | None
    finalize_after_s: int
    recurrence: dict | None  # Recurrence.to_json(), or None
    options: dict  # {"entry": EntrySpec.to_json()}


class JoinRecord(NamedTuple):
    """``J``: a player joined a competition."""

    kind: str
    board_id: str
    player_id: str
    position: int


class JoinsRecord(NamedTuple):
    """``H``: players joining a competition in one request, at consecutive positions from ``first``."""

    kind: str
    board_id: str
    player_ids: list
    first: int


class CarryRecord(NamedTuple):
    """``Q``: the tiers a league board's next season carries."""

    kind: str
    board_id: str
    player_ids: list
    tiers: bytes


class EnterRecord(NamedTuple):
    """``P``: players entering a league board with a score submission."""

    kind: str
    board_id: str
    player_ids: list


class AwardsRecord(NamedTuple):
    """``A``: one part of a board's awards, in award order."""

    kind: str
    board_id: str
    version: int
    part: int
    parts: int
    player_ids: list
    ranks: bytes
    tiers: bytes
    numbers: bytes
    prizes: bytes


class InstanceBoardRecord(NamedTuple):
    """``W``: a series' instance board created: ``K`` plus its series and window."""

    kind: str
    board_id: str
    policy: str
    shards: int
    max_plausible_time_ms: int | None
    review_above: int | None
    closes_at: int | None
    finalize_after_s: int
    series: str
    starts_at: int
    ends_at: int


class InstanceOptionsRecord(NamedTuple):
    """``V``: a series' instance board with competition settings or subscores: ``W`` plus an options map."""

    kind: str
    board_id: str
    policy: str
    shards: int
    max_plausible_time_ms: int | None
    review_above: int | None
    closes_at: int | None
    finalize_after_s: int
    series: str
    starts_at: int
    ends_at: int
    options: dict


class SeriesCarryRecord(NamedTuple):
    """``Y``: the tiers an instance of a league series carries to its series at FROZEN."""

    kind: str
    board_id: str
    series: str
    player_ids: list
    tiers: bytes


class GroupRecord(NamedTuple):
    """``G``: the score records (``C`` / ``M``) of one fanned-out submission, as one record."""

    kind: str
    parts: list

    @property
    def board_id(self) -> None:  # a group concerns several boards (boards_of names them)
        return None


class StateRecord(NamedTuple):
    """``T``: a season state change."""

    kind: str
    board_id: str
    state: str


class ScoresRecord(NamedTuple):
    """``C``: one partition's score events of one sequencing cycle, as columns."""

    kind: str
    board_id: str
    partition: int
    event_ids: list
    player_ids: list
    values: bytes
    achieved: bytes
    submitted: bytes
    verdicts: bytes


class ScoresMetaRecord(NamedTuple):
    """``M``: a ``C`` record whose events carry metadata."""

    kind: str
    board_id: str
    partition: int
    event_ids: list
    player_ids: list
    values: bytes
    achieved: bytes
    submitted: bytes
    verdicts: bytes
    meta: bytes
    meta_offsets: bytes


class ScoresSubsRecord(NamedTuple):
    """``N``: a score frame of a board with subscores."""

    kind: str
    board_id: str
    partition: int
    event_ids: list
    player_ids: list
    values: bytes
    achieved: bytes
    submitted: bytes
    verdicts: bytes
    meta: bytes
    meta_offsets: bytes
    subscores: bytes


class ScoreRecord(NamedTuple):
    """``S``: one score event (read, no longer written)."""

    kind: str
    board_id: str
    event_id: str
    player_id: str
    value: int
    achieved_at: int
    submitted_at: int
    verdict: int


class InvalidationRecord(NamedTuple):
    """``I``: a moderator's invalidation of an applied event."""

    kind: str
    board_id: str
    event_id: str
    correction_id: str
    reason: str | None
    moderator: str | None


class DecisionRecord(NamedTuple):
    """``D``: a quarantine decision, with the held event."""

    kind: str
    board_id: str
    event_id: str
    decision: str
    reason: str | None
    moderator: str | None
    player_id: str
    value: int
    achieved_at: int
    submitted_at: int


class DecisionMetaRecord(NamedTuple):
    """``E``: a ``D`` record whose held event carries metadata."""

    kind: str
    board_id: str
    event_id: str
    decision: str
    reason: str | None
    moderator: str | None
    player_id: str
    value: int
    achieved_at: int
    submitted_at: int
    metadata: bytes


class DecisionSubsRecord(NamedTuple):
    """``F``: a decision on a held event of a board with subscores."""

    kind: str
    board_id: str
    event_id: str
    decision: str
    reason: str | None
    moderator: str | None
    player_id: str
    value: int
    achieved_at: int
    submitted_at: int
    metadata: bytes
    subscores: list


class DeadLetterRecord(NamedTuple):
    """``L``: a record (or a row of one) a shard actor could not apply."""

    kind: str
    board_id: str | None
    offset: int
    row: int | None
    event_id: str | None
    error: str


class ErasureRecord(NamedTuple):
    """``X``: a player's erasure (engine.core.erasure)."""

    kind: str
    erasure_id: str
    requested_at: int
    subject: str
    player_id: str | None
    pseudonym: str
    key: bytes | None
    boards: list


class ErasureDoneRecord(NamedTuple):
    """``Z``: an erasure complete on disk."""

    kind: str
    erasure_id: str
    completed_at: int


#: The named record type of each kind: its first field is ``kind``, the others are
#: exactly ``KINDS[kind].fields``. msgpack packs a tuple as an array, so writing one
#: of these gives the same bytes as the list it replaced (tests/engine/test_records.py).
TYPES: dict[str, type] = {
    BOARD: BoardRecord, BOARD2: ScheduledBoardRecord, SERIES: SeriesBoardRecord, INSTANCE: InstanceBoardRecord,
    GROUP: GroupRecord, STATE: StateRecord, SCORES: ScoresRecord,
    SCORES_META: ScoresMetaRecord, SCORE: ScoreRecord, INVALIDATE: InvalidationRecord, DECIDE: DecisionRecord,
    DECIDE_META: DecisionMetaRecord, DEAD_LETTER: DeadLetterRecord, BOARD_SUBS: SubscoresBoardRecord,
    SCORES_SUBS: ScoresSubsRecord, DECIDE_SUBS: DecisionSubsRecord,
    OPTIONS_BOARD: OptionsBoardRecord, JOIN: JoinRecord, JOINS: JoinsRecord, CARRY: CarryRecord,
    AWARDS: AwardsRecord, ENTER: EnterRecord, ERASE: ErasureRecord, ERASED: ErasureDoneRecord,
    INSTANCE_OPTIONS: InstanceOptionsRecord, SERIES_CARRY: SeriesCarryRecord,
}
for _kind, _type in TYPES.items():
    assert _type._fields == ("kind",) + KINDS[_kind].fields, f"record type of {_kind!r} disagrees with KINDS"
assert set(TYPES) == set(KINDS), "every kind needs a record type"

Record = (BoardRecord | ScheduledBoardRecord | SeriesBoardRecord | InstanceBoardRecord | GroupRecord | StateRecord
          | ScoresRecord | ScoresMetaRecord | ScoreRecord | InvalidationRecord | DecisionRecord | DecisionMetaRecord
          | DeadLetterRecord | OptionsBoardRecord | JoinRecord | JoinsRecord | SubscoresBoardRecord
          | ScoresSubsRecord | DecisionSubsRecord | CarryRecord | AwardsRecord | EnterRecord | ErasureRecord | ErasureDoneRecord
          | InstanceOptionsRecord | SeriesCarryRecord)
_RECORD_TYPES = frozenset(TYPES.values())


def parse(rec, offset: int = -1) -> Record:
    """A log record (a list as msgpack decodes it, or already a record) as its
    named type. Each kind has one layout (a longer one is a new letter), so
    the list's length is the type's (another length raises TypeError); an
    unknown kind raises UnsupportedFormat (:func:`check_kind`; ``offset``:
    where the record is, for the message)."""
    if type(rec) in _RECORD_TYPES:
        return rec
    kind = TYPES.get(rec[0]) if isinstance(rec, (list, tuple)) and rec else None
    if kind is None:
        check_kind(offset, rec)
    return kind._make(rec)


# Outcome codes as logged: append-only (a code never changes meaning). 0 means "apply".
CODE = {
    Outcome.APPLIED_FIRST_SCORE: 1, Outcome.APPLIED_NEW_BEST: 2, Outcome.REJECTED_NOT_AN_IMPROVEMENT: 3,
    Outcome.APPLIED: 4, Outcome.APPLIED_NEW_BEST_TIME: 5, Outcome.REJECTED_NOT_FASTER: 6,
    Outcome.REJECTED_INVALID_TIMING: 7, Outcome.DUPLICATE_IGNORED: 8, Outcome.REJECTED_EVENT_ID_CONFLICT: 9,
    Outcome.HELD_FOR_CORRECTION: 10, Outcome.HELD_FOR_REVIEW: 11, Outcome.REJECTED_UNKNOWN_SEASON: 12,
    Outcome.DEAD_LETTERED: 13, Outcome.REJECTED_TOTAL_OUT_OF_RANGE: 14,
    Outcome.APPLIED_LATEST: 15, Outcome.REJECTED_NOT_LATEST: 16,  # log format 5
    Outcome.REJECTED_NOT_JOINED: 17, Outcome.REJECTED_BOARD_FULL: 18, Outcome.REJECTED_MAX_ATTEMPTS: 19,
}
assert set(CODE) == set(Outcome), "every outcome needs a code"
assert tuple(CODE[o] for o in ENTRY_OUTCOMES) == ENTRY_CODES, "engine.core.entry repeats the entry codes"
_BY_CODE = {c: o for o, c in CODE.items()}
APPLY = 0


#: outcome name by code (index), for turning a column of codes into the API's strings
OUTCOME_NAMES: tuple[str, ...] = tuple(_BY_CODE[c].value if c in _BY_CODE else "" for c in range(max(_BY_CODE) + 1))


def outcome_of(code: int) -> Outcome:
    return _BY_CODE[code]


def event_id_of(rec: Record) -> str | None:
    """The event a record concerns (``S``, ``I``, ``D``, ``E``, ``L``), else None."""
    return getattr(rec, "event_id", None)


def check_kind(offset: int, rec) -> None:
    """Refuse a record whose kind is not in :data:`KINDS` (a newer writer's
    vocabulary, or damage) rather than skip it silently."""
    if not isinstance(rec, (list, tuple)) or not rec or rec[0] not in KINDS:
        kind = rec[0] if isinstance(rec, (list, tuple)) and rec else rec
        raise UnsupportedFormat(
            f"log record at offset {offset} has kind {kind!r}, not in log record format {LOG_FORMAT} "
            f"(kinds {''.join(KINDS)}); it was written by a newer FlowRank or is damaged")


def correction_id(event_id: str, n: int) -> str:
    """The id of a board's ``n``-th correction (1-based), which invalidates ``event_id``."""
    return f"correction:{event_id}:{n}"


def decide_record(board_id: str, event_id: str, decision: str, reason, moderator,
                  held) -> DecisionRecord | DecisionMetaRecord | DecisionSubsRecord:
    """The log record of a quarantine decision on ``held`` (a HeldEvent):
    ``F`` when the held event has subscores, else ``E`` when it carries
    metadata, else ``D``."""
    fields = (board_id, event_id, decision, reason, moderator, held.player_id, held.value, held.achieved_at,
              held.submitted_at)
    if held.subscores:
        return DecisionSubsRecord(DECIDE_SUBS, *fields, held.metadata, list(held.subscores))
    if held.metadata:
        return DecisionMetaRecord(DECIDE_META, *fields, held.metadata)
    return DecisionRecord(DECIDE, *fields)


def decided_event(rec) -> ScoreEvent:
    """The held event a ``D`` / ``E`` record decides on."""
    rec = parse(rec)
    return ScoreEvent(rec.board_id, rec.event_id, rec.player_id, rec.value, rec.achieved_at, rec.submitted_at,
                      rec.metadata if isinstance(rec, (DecisionMetaRecord, DecisionSubsRecord)) else b"",
                      tuple(rec.subscores) if isinstance(rec, DecisionSubsRecord) else ())


def board_record(spec: BoardSpec) -> (ScheduledBoardRecord | SeriesBoardRecord | InstanceBoardRecord | OptionsBoardRecord
                                      | SubscoresBoardRecord | InstanceOptionsRecord):
    """The record that creates ``spec``'s board: for an instance of a series
    (a spec with a series), ``V`` when it has competition settings or
    subscores, else ``W``; otherwise ``U`` for a board with subscores and
    nothing else of these, ``O`` for a board with an option (entry rules, a
    league, prizes; with a recurrence and subscores, those too), else ``R``
    for a series (a spec with a recurrence), else ``K`` (the same bytes as
    before any of them existed)."""
    fields = (spec.board_id, spec.policy.value, spec.shards, spec.max_plausible_time_ms, spec.review_above,
              spec.closes_at, spec.finalize_after_s)
    options = options_of(spec)
    if spec.series is not None and spec.window is not None:
        if options or spec.subscores:
            return InstanceOptionsRecord(INSTANCE_OPTIONS, *fields, spec.series, spec.window[0], spec.window[1],
                                         options | _subscores_option(spec))
        return InstanceBoardRecord(INSTANCE, *fields, spec.series, spec.window[0], spec.window[1])
    if spec.subscores and not options and spec.recurrence is None:
        return SubscoresBoardRecord(BOARD_SUBS, *fields, list(spec.subscores))
    if options or spec.subscores:
        return OptionsBoardRecord(OPTIONS_BOARD, *fields,
                                  None if spec.recurrence is None else spec.recurrence.to_json(),
                                  options | _subscores_option(spec))
    if spec.recurrence is not None:
        return SeriesBoardRecord(SERIES, *fields, spec.recurrence.to_json())
    return ScheduledBoardRecord(BOARD2, *fields)


def _subscores_option(spec: BoardSpec) -> dict:
    """The ``"subscores"`` option of an ``O`` or ``V`` record (log format 9): the board's directions, if any."""
    return {"subscores": list(spec.subscores)} if spec.subscores else {}


def spec_of(rec) -> BoardSpec:
    """The spec of an ``O``, ``R`` or ``K`` record, or of an older ``B`` one (no
    schedule: ``closes_at`` None, the default ``finalize_after_s``). An ``O``
    record with an option this version does not know is refused
    (UnsupportedFormat), never read without it."""
    rec = parse(rec)
    if isinstance(rec, SubscoresBoardRecord):
        return BoardSpec(rec.board_id, Policy(rec.policy), rec.shards, rec.max_plausible_time_ms, rec.review_above,
                         rec.closes_at, rec.finalize_after_s, subscores=tuple(rec.subscores))
    if isinstance(rec, InstanceBoardRecord):
        return BoardSpec(rec.board_id, Policy(rec.policy), rec.shards, rec.max_plausible_time_ms, rec.review_above,
                         rec.closes_at, rec.finalize_after_s, series=rec.series, window=(rec.starts_at, rec.ends_at))
    if isinstance(rec, InstanceOptionsRecord):
        return BoardSpec(rec.board_id, Policy(rec.policy), rec.shards, rec.max_plausible_time_ms, rec.review_above,
                         rec.closes_at, rec.finalize_after_s, series=rec.series, window=(rec.starts_at, rec.ends_at),
                         **_options_in(rec.board_id, rec.options))
    if isinstance(rec, (ScheduledBoardRecord, SeriesBoardRecord, OptionsBoardRecord)):
        raw = rec.recurrence if isinstance(rec, (SeriesBoardRecord, OptionsBoardRecord)) else None
        recurrence = Recurrence.parse(raw) if raw is not None else None
        opts = _options_in(rec.board_id, rec.options) if isinstance(rec, OptionsBoardRecord) else {}
        return BoardSpec(rec.board_id, Policy(rec.policy), rec.shards, rec.max_plausible_time_ms, rec.review_above,
                         rec.closes_at, rec.finalize_after_s, recurrence, **opts)
    return BoardSpec(rec.board_id, Policy(rec.policy), rec.shards, rec.max_plausible_time_ms, rec.review_above)


def options_of(spec: BoardSpec) -> dict:
    """The options map of an ``O`` record for ``spec`` (empty: the board needs no ``O`` record)."""
    out: dict = {}
    if spec.entry is not None:
        out["entry"] = spec.entry.to_json()
    if spec.league is not None:
        out["league"] = spec.league.to_json()
    if spec.prizes:
        out["prizes"] = [p.to_json() for p in spec.prizes]
    return out


def _options_in(board_id: str, options: dict) -> dict:
    """BoardSpec keyword arguments of an ``O`` record's options."""
    unknown = set(options) - {"entry", "league", "prizes", "subscores"}
    if unknown:
        raise UnsupportedFormat(f"board {board_id!r} has options {sorted(unknown)} that this FlowRank version does "
                                "not know; it was written by a newer FlowRank")
    out: dict = {}
    raw = options.get("entry")
    if raw is not None:
        out["entry"] = EntrySpec(bool(raw["join_required"]), raw["max_players"], raw["max_attempts"])
    raw = options.get("league")
    if raw is not None:
        out["league"] = LeagueSpec(int(raw["cohort_size"]), int(raw["tiers"]), int(raw["promote"]),
                                   int(raw["demote"]))
    raw = options.get("prizes")
    if raw:
        out["prizes"] = tuple(Prize(int(p["ranks"][0]), int(p["ranks"][1]), canonical_json(p["reward"]))
                              for p in raw)
    raw = options.get("subscores")
    if raw:
        out["subscores"] = tuple(str(d) for d in raw)
    return out


def canonical_json(value) -> str:
    """Compact JSON text (keys in their given order, UTF-8 kept as is): how a prize's reward is kept."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def carry_record(board_id: str, player_ids: list, tiers: np.ndarray) -> CarryRecord:
    return CarryRecord(CARRY, board_id, player_ids, np.asarray(tiers, np.int8).tobytes())


def carried_of(rec) -> tuple[list, np.ndarray]:
    """The ids and tiers of a ``Q`` or ``Y`` record."""
    rec = parse(rec)
    return rec.player_ids, np.frombuffer(rec.tiers, np.int8)


def series_carry_record(board_id: str, series: str, player_ids: list, tiers: np.ndarray) -> SeriesCarryRecord:
    return SeriesCarryRecord(SERIES_CARRY, board_id, series, player_ids, np.asarray(tiers, np.int8).tobytes())


def join_record(board_id: str, player_id: str, position: int) -> JoinRecord:
    return JoinRecord(JOIN, board_id, player_id, position)


def joins_record(board_id: str, player_ids: list, first: int) -> JoinsRecord:
    return JoinsRecord(JOINS, board_id, list(player_ids), first)


def score_record(ev: ScoreEvent, verdict: Outcome | None) -> ScoreRecord:
    return ScoreRecord(SCORE, ev.board_id, ev.event_id, ev.player_id, ev.value, ev.achieved_at, ev.submitted_at,
                       APPLY if verdict is None else CODE[verdict])


def event_of(rec) -> ScoreEvent:
    """The event of an ``S`` record."""
    rec = parse(rec)
    return ScoreEvent(rec.board_id, rec.event_id, rec.player_id, rec.value, rec.achieved_at, rec.submitted_at)


def verdict_of(rec) -> Outcome | None:
    """The verdict of an ``S`` record (None: apply)."""
    verdict = parse(rec).verdict
    return None if verdict == APPLY else outcome_of(verdict)


def scores_record(cols: ScoreColumns, partition: int,
                  verdicts: np.ndarray) -> ScoresRecord | ScoresMetaRecord | ScoresSubsRecord:
    """One columnar record for a partition's share of a cycle's events
    (``N`` when the events carry subscores, else ``M`` when some event
    carries metadata, else ``C``)."""
    fields = (cols.board_id, partition, cols.event_ids, cols.player_ids, _le64(cols.values), _le64(cols.achieved),
              _le64(cols.submitted), np.asarray(verdicts, np.uint8).tobytes())
    if cols.subs is not None:
        meta, moffs = (b"", b"") if cols.moffs is None or cols.meta is None else (cols.meta.tobytes(), _le64(cols.moffs))
        return ScoresSubsRecord(SCORES_SUBS, *fields, meta, moffs, _le64(cols.subs))
    if cols.moffs is not None and cols.meta is not None:
        return ScoresMetaRecord(SCORES_META, *fields, cols.meta.tobytes(), _le64(cols.moffs))
    return ScoresRecord(SCORES, *fields)


def columns_of(rec) -> tuple[ScoreColumns, np.ndarray]:
    """A ``SCORES`` (or ``SCORES_META``) record's columns and verdicts (0 = apply)."""
    rec = parse(rec)
    meta = moffs = subs = None
    if isinstance(rec, (ScoresMetaRecord, ScoresSubsRecord)) and rec.meta_offsets:
        meta = np.frombuffer(rec.meta, np.uint8).copy()
        moffs = np.frombuffer(rec.meta_offsets, "<i8").astype(np.int64)
    if isinstance(rec, ScoresSubsRecord):
        n = len(rec.event_ids)
        subs = np.frombuffer(rec.subscores, "<i8").astype(np.int64).reshape(n, len(rec.subscores) // (8 * n) if n else 0)
    return (ScoreColumns(rec.board_id, rec.event_ids, rec.player_ids, np.frombuffer(rec.values, "<i8").astype(np.int64),
                         np.frombuffer(rec.achieved, "<i8").astype(np.int64),
                         np.frombuffer(rec.submitted, "<i8").astype(np.int64), meta, moffs, subs),
            np.frombuffer(rec.verdicts, np.uint8).copy())


def group_record(parts: list) -> GroupRecord:
    """One ``G`` record holding the score records ``parts`` (each ``C`` / ``M``)."""
    return GroupRecord(GROUP, [list(p) for p in parts])


def group_parts(rec) -> list:
    """The ``C`` / ``M`` records of a ``G`` record, parsed, in order."""
    return [parse(p) for p in parse(rec).parts]


def score_parts(rec) -> list:
    """The columnar score records a record holds: itself (``C`` / ``M``), its
    parts (``G``), else none."""
    rec = parse(rec)
    if rec.kind in SCORE_BATCHES:
        return [rec]
    if rec.kind == GROUP:
        return group_parts(rec)
    return []


def boards_of(rec) -> list[str]:
    """The boards a record concerns (a group's: every part's board)."""
    rec = parse(rec)
    if rec.kind == GROUP:
        return list(dict.fromkeys(p.board_id for p in group_parts(rec)))
    if rec.kind == ERASE:
        return [b[0] for b in rec.boards]
    if rec.kind == ERASED:
        return []
    return [rec.board_id] if isinstance(rec.board_id, str) else []


def logged_events(rec) -> Iterator[tuple[ScoreEvent, int]]:
    """Every score event a record holds with its verdict code, in log order
    (either record kind, and a group's parts; none for other records)."""
    rec = parse(rec)
    if isinstance(rec, GroupRecord):
        for part in group_parts(rec):
            yield from logged_events(part)
    elif isinstance(rec, ScoreRecord):
        yield event_of(rec), rec.verdict
    elif isinstance(rec, (ScoresRecord, ScoresMetaRecord, ScoresSubsRecord)):
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


def dead_letter_record(d: DeadLetter) -> DeadLetterRecord:
    return DeadLetterRecord(DEAD_LETTER, d.board_id, d.offset, d.row, d.event_id, d.error[:MAX_ERROR_CHARS])


def dead_letter_of(rec) -> DeadLetter:
    rec = parse(rec)
    return DeadLetter(rec.board_id, rec.offset, rec.row, rec.event_id, rec.error)


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

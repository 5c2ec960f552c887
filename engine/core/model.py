"""The shared vocabulary of FlowRank: enums and frozen records.

Everything here is plain data. Timestamps are integers of epoch
milliseconds (UTC); values are Python ints (a board never holds a float).
Parsing and formatting timestamps for people lives in :mod:`engine.core.timefmt`.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from engine.core.windows import Recurrence

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
DEFAULT_MAX_PLAUSIBLE_TIME_MS = 86_400_000
DEFAULT_DEDUP_RETENTION = 5_000_000
DEFAULT_DELTA_RETENTION = 10_000
DEFAULT_FINALIZE_AFTER_S = 3_600  # a scheduled close finalizes this long after closes_at (docs/api.md §13)
# closes_at + finalize_after_s stays a 64-bit millisecond count; a round number that JSON Schema
# readers holding numbers as doubles read exactly (OpenAPI ``maximum``).
MAX_FINALIZE_AFTER_S = 10**12
#: At most this many subscores per board (docs/api.md §14).
MAX_SUBSCORES = 3
#: The directions a subscore may be declared with: "desc" (higher first) or "asc" (lower first).
SUBSCORE_DIRECTIONS = ("desc", "asc")


class Policy(str, enum.Enum):
    """How a board orders its players (docs/api.md §6)."""

    BEST_SCORE = "best_score"
    CUMULATIVE = "cumulative"
    FASTEST_TIME = "fastest_time"
    LATEST = "latest"  # the most recent valid event is the row (docs/api.md §6, §14)


class BoardState(str, enum.Enum):
    """Season lifecycle of a board (docs/api.md §5); see :mod:`engine.core.season`."""

    OPEN = "OPEN"
    FROZEN = "FROZEN"
    FINALIZED = "FINALIZED"
    ARCHIVED = "ARCHIVED"


class RowStatus(str, enum.Enum):
    ACTIVE = "ACTIVE"
    INVALIDATED = "INVALIDATED"
    ERASED = "ERASED"  # only in a delta: the player was erased (docs/api.md §17)


class Outcome(str, enum.Enum):
    """What applying one score event did (docs/api.md §7). Expected, never raised."""

    APPLIED_FIRST_SCORE = "APPLIED_FIRST_SCORE"
    APPLIED_NEW_BEST = "APPLIED_NEW_BEST"
    REJECTED_NOT_AN_IMPROVEMENT = "REJECTED_NOT_AN_IMPROVEMENT"
    APPLIED = "APPLIED"
    APPLIED_NEW_BEST_TIME = "APPLIED_NEW_BEST_TIME"
    REJECTED_NOT_FASTER = "REJECTED_NOT_FASTER"
    REJECTED_INVALID_TIMING = "REJECTED_INVALID_TIMING"
    DUPLICATE_IGNORED = "DUPLICATE_IGNORED"
    REJECTED_EVENT_ID_CONFLICT = "REJECTED_EVENT_ID_CONFLICT"
    HELD_FOR_CORRECTION = "HELD_FOR_CORRECTION"
    HELD_FOR_REVIEW = "HELD_FOR_REVIEW"
    REJECTED_UNKNOWN_SEASON = "REJECTED_UNKNOWN_SEASON"
    # An extension (docs/api.md §7 allows adding): the event made the engine fail
    # unexpectedly (a bug); it is dead-lettered and skipped on every replay.
    DEAD_LETTERED = "DEAD_LETTERED"
    # Extension: a cumulative delta that would take the total outside the
    # signed 64-bit range every reader and the wire format can carry.
    REJECTED_TOTAL_OUT_OF_RANGE = "REJECTED_TOTAL_OUT_OF_RANGE"
    # latest boards (docs/api.md §14): the event is now the row / it is older than the row.
    APPLIED_LATEST = "APPLIED_LATEST"
    REJECTED_NOT_LATEST = "REJECTED_NOT_LATEST"
    # Competition entry (docs/api.md §16), decided by the router's admission:
    REJECTED_NOT_JOINED = "REJECTED_NOT_JOINED"  # join_required, and the player has not joined
    REJECTED_BOARD_FULL = "REJECTED_BOARD_FULL"  # a new player's first event when max_players have a row
    REJECTED_MAX_ATTEMPTS = "REJECTED_MAX_ATTEMPTS"  # the player already has max_attempts admitted events

    @property
    def changes_ranking(self) -> bool:
        return self in _RANKING_CHANGES


_RANKING_CHANGES = frozenset(
    {Outcome.APPLIED_FIRST_SCORE, Outcome.APPLIED_NEW_BEST, Outcome.APPLIED, Outcome.APPLIED_NEW_BEST_TIME,
     Outcome.APPLIED_LATEST}
)


class ScoreEvent(NamedTuple):
    """One score event as a game server sent it, timestamps resolved to ms.

    ``submitted_at`` defaults to ``achieved_at`` (docs/api.md §7), so a caller that
    omits it and one that repeats ``achieved_at`` send the same content.
    A NamedTuple: built once per event on the hot path, so it must be cheap.
    """

    board_id: str
    event_id: str
    player_id: str
    value: int
    achieved_at: int
    submitted_at: int
    metadata: bytes = b""  # canonical compact JSON of the event's metadata object; b"" none (docs/api.md §13)
    subscores: tuple[int, ...] = ()  # the event's subscores (docs/api.md §14), () on a board without them

    @property
    def content(self) -> tuple[str, int, int, int, bytes, tuple[int, ...]]:
        """What a redelivery must repeat for the id to count as a duplicate."""
        return (self.player_id, self.value, self.achieved_at, self.submitted_at, self.metadata, self.subscores)


@dataclass(frozen=True, slots=True)
class EntrySpec:
    """Who may enter a competition and how often (docs/api.md §16, "Entry").

    ``join_required``: only players who joined may submit; ``max_players``
    (None: no cap) caps the joins, and without ``join_required`` the players
    with a row; ``max_attempts`` (None: no cap) caps each player's admitted
    score events (:mod:`engine.core.entry`)."""

    join_required: bool = False
    max_players: int | None = None
    max_attempts: int | None = None

    @property
    def limits(self) -> bool:
        """Score events are judged at all (else the entry table only keeps joins)."""
        return self.join_required or self.max_players is not None or self.max_attempts is not None

    def to_json(self) -> dict:
        return {"join_required": self.join_required, "max_players": self.max_players,
                "max_attempts": self.max_attempts}


@dataclass(frozen=True, slots=True)
class LeagueSpec:
    """A league (docs/api.md §16, "Leagues"): players placed in cohorts of at
    most ``cohort_size`` within ``tiers`` tiers (1 the lowest); at most
    ``promote`` of a cohort's ranked members are in its promote zone and
    ``demote`` in its demote zone (:mod:`engine.core.league`)."""

    cohort_size: int
    tiers: int = 1
    promote: int = 0
    demote: int = 0

    def to_json(self) -> dict:
        return {"cohort_size": self.cohort_size, "tiers": self.tiers, "promote": self.promote,
                "demote": self.demote}


@dataclass(frozen=True, slots=True)
class Prize:
    """One prize range (docs/api.md §16, "Prizes"): players whose strict rank
    (cohort-local on a league) is in ``first .. last`` get ``reward``, kept as
    its canonical compact JSON text (so a spec stays hashable)."""

    first: int
    last: int
    reward: str

    def to_json(self) -> dict:
        return {"ranks": [self.first, self.last], "reward": json.loads(self.reward)}


@dataclass(frozen=True, slots=True)
class BoardSpec:
    """A board's immutable configuration (docs/api.md §5, §13).

    ``closes_at`` (epoch ms or None) schedules the season's close: the board
    moves to FROZEN once the server's clock reaches it and to FINALIZED
    ``finalize_after_s`` seconds later (:func:`engine.core.season.due`).
    ``recurrence`` (None for an ordinary board) makes the board a series of
    time windows (docs/api.md §15, :mod:`engine.core.windows`). An *instance* of a
    series (one window's board) names its ``series`` and its ``window``
    ``(starts_at, ends_at)`` in epoch ms; its ``closes_at`` is the window's end.
    """

    board_id: str
    policy: Policy
    shards: int = 1  # how many partitions the board's players are hashed across (placed on shard actors)
    max_plausible_time_ms: int = DEFAULT_MAX_PLAUSIBLE_TIME_MS
    review_above: int | None = None
    closes_at: int | None = None
    finalize_after_s: int = DEFAULT_FINALIZE_AFTER_S
    recurrence: Recurrence | None = None
    entry: EntrySpec | None = None  # competition entry (docs/api.md §16); None: none of its rules
    league: LeagueSpec | None = None  # cohorts and tiers (docs/api.md §16); None: not a league
    prizes: tuple[Prize, ...] = ()  # awarded at FINALIZED (docs/api.md §16); () none
    series: str | None = None
    window: tuple[int, int] | None = None
    #: per subscore, its direction ("desc" | "asc"), compared after the primary
    #: value and before the policy's tie keys (docs/api.md §14); () none
    subscores: tuple[str, ...] = ()


class JoinResult(NamedTuple):
    """A join's answer (docs/api.md §16): the player's 0-based position in
    the order of joining; ``created``: this call made the join (201), else the
    player had joined before (200)."""

    player_id: str
    position: int
    created: bool
    board_id: str | None = None  # the instance joined, when the join named a series (docs/api.md §18); else None


class BulkJoinResult(NamedTuple):
    """A bulk join's answer (docs/api.md §18): the board joined (a series' current instance when a series was
    named) and per player, in request order, their :class:`JoinResult` or the error the single join would
    have raised (``BoardFull``, ``BoardNotOpen``)."""

    board_id: str
    results: tuple


class EventResult(NamedTuple):
    event_id: str
    outcome: Outcome
    version: int


class RowChange(NamedTuple):
    """A row as it is after a change: what deltas and live updates carry."""

    player_id: str
    value: int
    achieved_at: int
    status: RowStatus
    metadata: bytes | None = None  # compact JSON of the row's metadata, None when it has none
    subscores: tuple[int, ...] | None = None  # the row's subscores, None on a board without them (§14)


class Delta(NamedTuple):
    """The row changes that brought a board to ``version`` (from version - 1)."""

    version: int
    changes: tuple[RowChange, ...]


class RankedEntry(NamedTuple):
    rank: int
    player_id: str
    value: int
    achieved_at: int
    tied_rank: int | None = None  # competition rank (1, 1, 3), only when asked (?ties=competition)
    metadata: bytes | None = None  # compact JSON of the row's metadata, None when it has none
    subscores: tuple[int, ...] | None = None  # the row's subscores, None on a board without them (§14)


@dataclass(frozen=True, slots=True)
class PlayerView:
    version: int
    player_id: str
    rank: int | None
    value: int
    achieved_at: int
    status: RowStatus
    row_version: int = 0
    approximate: bool = False
    rank_error_bound: int | None = None
    tied_rank: int | None = None  # competition rank, only when asked (?ties=competition)
    metadata: bytes | None = None  # compact JSON of the row's metadata, None when it has none
    attempts: int | None = None  # admitted score events so far, on boards with max_attempts (docs/api.md §16)
    subscores: tuple[int, ...] | None = None  # the row's subscores, None on a board without them (§14)


@dataclass(frozen=True, slots=True)
class BoardInfo:
    board_id: str
    policy: Policy
    state: BoardState
    version: int
    size: int
    shards: int
    max_plausible_time_ms: int = DEFAULT_MAX_PLAUSIBLE_TIME_MS
    review_above: int | None = None
    closes_at: int | None = None
    finalize_after_s: int = DEFAULT_FINALIZE_AFTER_S
    entry: EntrySpec | None = None
    recurrence: dict | None = None  # a series: Recurrence.to_json()
    current: str | None = None  # a series: the id of the current window's instance (None: not created yet)
    series: str | None = None  # an instance: its series
    window: tuple[int, int] | None = None  # an instance: (starts_at, ends_at), epoch ms
    subscores: tuple[str, ...] = ()  # the board's declared subscore directions (docs/api.md §14)
    league: LeagueSpec | None = None  # a league's settings (docs/api.md §16)
    prizes: tuple[Prize, ...] = ()  # its prize ranges (docs/api.md §16)


@dataclass(frozen=True, slots=True)
class InstanceInfo:
    """One instance of a series, as ``GET /v1/boards/{series}/instances`` lists it."""

    board_id: str
    starts_at: int
    ends_at: int
    state: BoardState
    size: int


@dataclass(frozen=True, slots=True)
class Page:
    """A ranked window (top page, around window or local subset) at a version."""

    version: int
    entries: tuple[RankedEntry, ...]
    board_id: str | None = None  # read on a series: the instance that answered (docs/api.md §15)


@dataclass(frozen=True, slots=True)
class CohortView:
    """A league cohort read (docs/api.md §16): its ranked members with local
    ranks, and per entry its zone ("promote" | "demote" | None)."""

    version: int
    tier: int
    cohort: str
    members: int
    entries: tuple[RankedEntry, ...]
    zones: tuple[str | None, ...]
    board_id: str | None = None  # the board that answered (a series' current instance, docs/api.md §18)


class CohortSummary(NamedTuple):
    """One cohort in the list of a league's cohorts (docs/api.md §18)."""

    cohort: str
    tier: int
    members: int


class CohortsPage(NamedTuple):
    """A page of a league's cohorts, by tier then cohort number (docs/api.md §18); ``after``: the (tier,
    number) of the page's last cohort when more follow, else None."""

    board_id: str
    version: int
    cohorts: tuple[CohortSummary, ...]
    after: tuple[int, int] | None


class PlayerTier(NamedTuple):
    """A player's tier on a league board (docs/api.md §18): the one they were placed in (``entered``), else
    the one they would enter at (carried, else 1)."""

    board_id: str
    player_id: str
    tier: int
    entered: bool


class Award(NamedTuple):
    """One award as the awards read shows it (docs/api.md §16)."""

    award_id: str
    player_id: str
    rank: int
    cohort: str | None
    reward: str  # compact JSON text of the reward object
    delivery: str  # "pending" | "delivered" | "failed"
    attempts: int


@dataclass(frozen=True, slots=True)
class AwardsPage:
    """A page of a board's awards in award order; ``next_cursor``: the index of the next award (None: last page)."""

    awards: tuple[Award, ...]
    next_cursor: int | None


@dataclass(frozen=True, slots=True)
class PlayerBoardData:
    """What one board holds about a player (docs/api.md §17): the §8 player view (None: no row), the §10
    history entries, the events of theirs held in the quarantine, and their §16 awards."""

    board_id: str
    row: "PlayerView | None"
    history: tuple["HistoryEntry", ...]
    held: tuple["HeldEvent", ...]
    awards: tuple[Award, ...]
    joined: int | None = None  # their position in the order of joining (§16), None: not joined
    cohort: str | None = None  # their league cohort (§16), None: none


@dataclass(frozen=True, slots=True)
class PlayerData:
    """Everything FlowRank holds about a player, board by board (docs/api.md §17, ``GET /v1/players/{id}/data``)."""

    player_id: str
    boards: tuple[PlayerBoardData, ...]


@dataclass(frozen=True, slots=True)
class ErasureAccepted:
    """``DELETE /v1/players/{id}`` (docs/api.md §17): the erasure, durable, and the boards it concerns."""

    erasure_id: str
    player_id: str
    boards: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ErasureStatus:
    """``GET /v1/erasures/{id}`` (docs/api.md §17); times in epoch ms."""

    erasure_id: str
    status: str  # "pending" | "complete"
    requested_at: int
    completed_at: int | None


@dataclass(frozen=True, slots=True)
class Changes:
    """Answer to ``changes_since``: contiguous deltas, or a snapshot (Test I)."""

    kind: str  # "deltas" | "snapshot"
    version: int
    from_version: int | None = None
    deltas: tuple[Delta, ...] = ()
    entries: tuple[RankedEntry, ...] = ()
    # snapshot only: (version, offset) of the next page when ranked rows remain
    # (docs/api.md §9); the gateway encodes it as an opaque cursor, like top pages.
    next_cursor: tuple[int, int] | None = None


@dataclass(frozen=True, slots=True)
class HeldEvent:
    event_id: str
    player_id: str
    value: int
    achieved_at: int
    submitted_at: int
    reason: Outcome  # HELD_FOR_CORRECTION | HELD_FOR_REVIEW
    metadata: bytes = b""  # the held event's metadata (canonical compact JSON; b"" none)
    subscores: tuple[int, ...] = ()  # the held event's subscores (docs/api.md §14)


@dataclass(frozen=True, slots=True)
class HistoryEntry:
    event_id: str
    kind: str  # "score" | "invalidation" | "decision"
    value: int | None
    achieved_at: int | None
    outcome: str
    invalidated: bool = False  # a later invalidation made this event invalid
    metadata: bytes = b""  # the event's metadata (canonical compact JSON; b"" none)


@dataclass(frozen=True, slots=True)
class InvalidationResult:
    correction_event_id: str
    player_id: str
    status: RowStatus
    value: int | None
    version: int


@dataclass(frozen=True, slots=True)
class DecisionResult:
    event_id: str
    decision: str  # "apply" | "reject"
    outcome: Outcome | None  # the apply outcome, None for reject
    version: int


@dataclass(frozen=True, slots=True)
class Checksum:
    version: int
    checksum: str


@dataclass(frozen=True, slots=True)
class Invalidation:
    """A moderator's correction request (docs/api.md §10)."""

    board_id: str
    event_id: str
    reason: str = ""
    moderator: str = ""


@dataclass(frozen=True, slots=True)
class QuarantineDecision:
    board_id: str
    event_id: str
    decision: str  # "apply" | "reject"
    reason: str = ""
    moderator: str = ""

"""Typed request/response models: what /openapi.json and /docs describe.

Request models validate strictly (``StrictInt``: floats, strings and booleans
are not integers). The events batch is validated by hand in
:mod:`gateway.validation` (so a 10,001-event batch is a 413 before any event
is looked at, and the first bad field is named exactly); :class:`EventBatchIn`
documents that body.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, Strict, WithJsonSchema
from pydantic.json_schema import SkipJsonSchema

from engine.core.errors import ValidationFailed
from engine.core.model import INT64_MAX, INT64_MIN, MAX_FINALIZE_AFTER_S, BoardState, Outcome, Policy, RowStatus
from engine.core.league import MAX_COHORT, MAX_TIERS, MIN_COHORT
from engine.core.prizes import MAX_PRIZES, MAX_REWARD_BYTES
from engine.core.season import ID_PART
from engine.core.timefmt import MAX_MS, MIN_MS, parse_timestamp
from engine.core.windows import (
    AT_PATTERN,
    DEFAULT_AT,
    DEFAULT_KEEP,
    DEFAULT_TIMEZONE,
    MAX_KEEP,
    MAX_SERIES_SEASON,
    is_zone,
    zone_names,
)

from gateway.validation import BOARD_ID_PATTERN, ID_PATTERN, MAX_FANOUT_BOARDS, id_problem


def _valid_id(v: str) -> str:
    problem = id_problem(v)
    if problem is not None:
        raise ValueError(f"id {problem}")
    return v


Int64 = Annotated[int, Strict(), Field(ge=INT64_MIN, le=INT64_MAX)]
BoardId = Annotated[
    str,
    Field(
        pattern=BOARD_ID_PATTERN,
        description="`game:mode:season:scope`, each part `[A-Za-z0-9][A-Za-z0-9_.-]{0,63}`.",
        examples=["arena-clash:solo:S7:global"],
    ),
]
PlayerId = Annotated[
    str,
    Field(min_length=1, max_length=128, description="1-128 Unicode characters, no control characters.",
          examples=["p-ava"], json_schema_extra={"pattern": ID_PATTERN}),
    AfterValidator(_valid_id),
]
EventId = Annotated[
    str,
    Field(min_length=1, max_length=128, description="1-128 Unicode characters, no control characters; "
          "deduplicated per board.", examples=["evt-101"], json_schema_extra={"pattern": ID_PATTERN}),
    AfterValidator(_valid_id),
]
Timestamp = Annotated[
    str,
    Field(description="UTC, always `YYYY-MM-DDTHH:MM:SS.sssZ`.", examples=["2026-11-01T10:05:00.000Z"]),
]
# What engine.core.timefmt.parse_timestamp accepts: epoch ms in years 0001-9999, or RFC 3339 with a zone
# (format date-time; the pattern adds the server's limits: years from 0001, at most 9 fraction digits).
RFC3339_PATTERN = (r"^(000[1-9]|00[1-9][0-9]|0[1-9][0-9]{2}|[1-9][0-9]{3})-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])"
                   r"[Tt]([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\.[0-9]{1,9})?([Zz]|[+-]([01][0-9]|2[0-3]):[0-5][0-9])$")
TimestampIn = Annotated[
    Annotated[int, Field(ge=MIN_MS, le=MAX_MS)]
    | Annotated[str, Field(json_schema_extra={"format": "date-time", "pattern": RFC3339_PATTERN})],
    Field(description="Epoch milliseconds (integer, years 0001-9999) or an RFC 3339 string with a zone.",
          examples=["2026-11-01T10:05:00Z", 1793527500000]),
]
def _epoch_ms(v: object) -> int:
    try:
        return parse_timestamp(v)
    except ValidationFailed as exc:
        raise ValueError(exc.message) from None


def _season_part(v: str) -> str:
    if ID_PART.fullmatch(v) is None:
        raise ValueError("must match [A-Za-z0-9][A-Za-z0-9_.-]{0,63} (the board id's season part)")
    return v


#: A timestamp on input, parsed to epoch ms (strict: no floats, booleans or zone-less strings).
TimestampMs = Annotated[
    int,
    BeforeValidator(_epoch_ms),
    WithJsonSchema({"anyOf": [{"type": "integer", "minimum": MIN_MS, "maximum": MAX_MS},
                              {"type": "string", "format": "date-time"}],
                    "description": "Epoch milliseconds (integer) or an RFC 3339 string with a zone.",
                    "examples": ["2026-12-01T00:00:00Z"]}),
]
FinalizeAfterS = Annotated[int, Strict(), Field(ge=0, le=MAX_FINALIZE_AFTER_S)]
Version = Annotated[int, Field(ge=0, description="Board version this answer reflects (a consistent cut).")]
StaleMs = Annotated[
    int | None,
    Field(description="Only with `?max_staleness_ms`: how old (ms) the served view is; 0 when fresh."),
]


class _Out(BaseModel):
    model_config = ConfigDict(extra="allow")


def _no_default(schema: dict, **extra) -> None:
    """A property that may be absent but never null: no ``default: null`` in its schema."""
    schema.pop("default", None)
    schema.update(extra)


# ---- errors -----------------------------------------------------------------


class ErrorDetail(BaseModel):
    code: str = Field(description="Stable machine code (docs/api.md §3).", examples=["VALIDATION_FAILED"])
    message: str = Field(description="A human sentence. Never contains keys or tracebacks.")
    field: str | None = Field(description="Path of the offending input, e.g. `events[3].value`, or null.",
                              examples=["events[3].value"])


class ErrorBody(BaseModel):
    error: ErrorDetail


_ERROR_TEXT = {
    400: "Bad request.",
    401: "`UNAUTHENTICATED`: missing, malformed, unknown or revoked key; expired or forged token; a key in "
         "`?access_token=`.",
    403: "`FORBIDDEN`: the key's role may not call this route (a token: not a reader's GET, or not its board).",
    404: "`BOARD_NOT_FOUND`, `PLAYER_NOT_FOUND`, `PLAYER_NOT_RANKED`, `EVENT_NOT_FOUND`, `COHORT_NOT_FOUND` or an "
         "unknown route.",
    409: "`BOARD_EXISTS`, `INVALID_TRANSITION`, `ALREADY_DECIDED`, `BOARD_FULL` or `BOARD_NOT_OPEN`.",
    410: "`VIEW_EXPIRED`: the pinned page version is gone; fetch page 1 again.",
    413: "`BATCH_TOO_LARGE`: more than 10,000 events or a body over 8 MiB.",
    422: "`VALIDATION_FAILED`: schema, types, ranges or ids; `field` names the first bad input.",
    429: "`RATE_LIMITED`; see the `Retry-After` header (seconds).",
    503: "`OVERLOADED`, or `NOT_LEADER` on a standby (docs/api.md §19, with `X-FlowRank-Leader`); see the "
         "`Retry-After` header (seconds).",
}

_RETRY_HEADER = {"Retry-After": {"description": "Seconds to wait before retrying.", "schema": {"type": "integer"}}}


def error_responses(*statuses: int) -> dict:
    """``responses=`` for a route: every listed status answers :class:`ErrorBody`."""
    base = (401, 403, 422, 429, 503)
    out: dict = {}
    for s in sorted(set(base + statuses)):
        entry: dict = {"model": ErrorBody, "description": _ERROR_TEXT.get(s, "Error.")}
        if s in (429, 503):
            entry["headers"] = _RETRY_HEADER
        out[s] = entry
    return out


# ---- boards -------------------------------------------------------------------


def _zone_name(v: str) -> str:
    if not is_zone(v):
        raise ValueError(f'timezone must be an IANA time zone name such as "Europe/Berlin"; {v[:80]!r} is not one')
    return v


class RecurrenceIn(BaseModel):
    """How a series' windows recur (docs/api.md §15)."""

    # the route builds the engine's Recurrence with Recurrence.parse, the one definition of these rules

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"every": "day", "timezone": "Europe/Berlin", "at": "04:00", "keep": 30}]})

    every: Literal["day", "week", "month"] = Field(
        description="Windows start every day, every Monday or on the 1st of every month.")
    timezone: Annotated[str, Field(examples=["Europe/Berlin"], json_schema_extra={"enum": zone_names()}),
                        AfterValidator(_zone_name)] = Field(
        DEFAULT_TIMEZONE, description="IANA time zone name of `at` (daylight-saving aware).")
    at: Annotated[str, Field(pattern=AT_PATTERN, examples=["04:00"])] = Field(
        DEFAULT_AT, description="Local start time `HH:MM`. A time the clocks skip moves forward by the gap; a "
                                "time that happens twice is the first.")
    keep: Annotated[int, Strict(), Field(ge=1, le=MAX_KEEP)] = Field(
        DEFAULT_KEEP, description="How many window instances stay unarchived.")


class EntryIn(BaseModel):
    """Who may enter a competition and how often (docs/api.md §16, "Entry")."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"join_required": True, "max_players": 100, "max_attempts": 3}]})

    join_required: Annotated[bool, Strict()] = Field(
        False, description="Only players who joined may submit: others' events are `REJECTED_NOT_JOINED`.")
    max_players: Annotated[int, Strict(), Field(ge=1, le=INT64_MAX)] | None = Field(
        None, description="At most this many players join (`BOARD_FULL`); without `join_required`, at most this "
                          "many players get a row (a new player's first event on a full board is "
                          "`REJECTED_BOARD_FULL`). Null: no cap.")
    max_attempts: Annotated[int, Strict(), Field(ge=1, le=INT64_MAX)] | None = Field(
        None, description="A player's admitted score events beyond this many are `REJECTED_MAX_ATTEMPTS`. "
                          "Null: no cap.")


class EntryRulesOut(_Out):
    join_required: bool
    max_players: int | None
    max_attempts: int | None


class JoinOut(_Out):
    player_id: str
    position: int = Field(description="0-based order of joining.")
    board_id: str | None = Field(None, description="The instance joined, when the join named a series (§18); "
                                                   "left out otherwise.", json_schema_extra=_no_default)


class JoinsIn(BaseModel):
    """A bulk join (docs/api.md §18)."""

    model_config = ConfigDict(json_schema_extra={"examples": [{"player_ids": ["p-ava", "p-ben", "p-chloe"]}]})

    player_ids: list[PlayerId] = Field(min_length=1, max_length=1000,
                                       description="1 to 1,000 distinct player ids, joined in this order (a repeated "
                                                   "id is 422 naming its second place).")


class JoinItemOut(_Out):
    player_id: str
    status: Literal[201, 200, 409] = Field(description="What the single join would have answered: 201 joined now, "
                                                       "200 had joined before, 409 refused (`error` says why).")
    position: int | None = Field(None, description="0-based order of joining (201 and 200).",
                                 json_schema_extra=_no_default)
    error: ErrorDetail | None = Field(None, description="409 only: `BOARD_FULL` or `BOARD_NOT_OPEN`, as the single "
                                                        "join's error body has it.", json_schema_extra=_no_default)


class JoinsOut(_Out):
    board_id: str = Field(description="The board joined: for a series, its current instance.")
    results: list[JoinItemOut] = Field(description="One per player id, in request order.")


class CohortSummaryOut(_Out):
    cohort: str = Field(description="`<tier>-<n>`.", examples=["1-3"])
    tier: int = Field(ge=1)
    members: int = Field(ge=0, description="Players placed in the cohort (ranked or not).")


class CohortsOut(_Out):
    board_id: str = Field(description="The board read: for a series, its current instance.")
    version: Version
    cohorts: list[CohortSummaryOut] = Field(description="By tier, then cohort number.")
    next_cursor: str | None = Field(description="Token for the next page; null on the last page.")


class TierOut(_Out):
    board_id: str = Field(description="The board read: for a series, its current instance.")
    player_id: str
    tier: int = Field(ge=1, description="The tier of the player's cohort, else the tier they would enter at "
                                        "(carried by next-season, else 1).")
    entered: bool = Field(description="Whether the player has entered (been placed in a cohort).")


Rank = Annotated[int, Strict(), Field(ge=1, le=INT64_MAX)]


class LeagueIn(BaseModel):
    """Cohorts within tiers (docs/api.md §16, "Leagues")."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"cohort_size": 50, "tiers": 5, "promote": 10, "demote": 10}]})

    cohort_size: Annotated[int, Strict(), Field(ge=MIN_COHORT, le=MAX_COHORT)] = Field(
        description=f"At most this many players per cohort ({MIN_COHORT}-{MAX_COHORT:,}); a player entering is "
                    "placed in the newest cohort of their tier with room, else a new one.")
    tiers: Annotated[int, Strict(), Field(ge=1, le=MAX_TIERS)] = Field(
        1, description=f"Tiers 1 (the lowest) to `tiers` (1-{MAX_TIERS}); a player starts in tier 1 unless "
                       "next-season carried their tier.")
    promote: Annotated[int, Strict(), Field(ge=0, le=MAX_COHORT)] = Field(
        0, description="Local ranks 1..promote of a cohort below the top tier are its promote zone "
                       "(`promote + demote <= cohort_size`).")
    demote: Annotated[int, Strict(), Field(ge=0, le=MAX_COHORT)] = Field(
        0, description="The last `demote` ranked members of a cohort above tier 1 are its demote zone.")


class PrizeIn(BaseModel):
    """One prize range (docs/api.md §16, "Prizes")."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"ranks": [1, 1], "reward": {"coins": 1000, "badge": "gold"}}]})

    ranks: tuple[Rank, Rank] = Field(
        description="`[from, to]`, 1-based and inclusive (`from <= to`); ranges of one board do not overlap. "
                    "On a league board the ranks are local to each cohort.")
    reward: dict[str, Any] = Field(
        description=f"Any JSON object of at most {MAX_REWARD_BYTES:,} bytes as compact UTF-8 JSON (integers "
                    "within 64 bits, finite numbers); every award of the range carries it as given.")


class LeagueOut(_Out):
    cohort_size: int
    tiers: int
    promote: int
    demote: int


class PrizeOut(_Out):
    ranks: list[int] = Field(min_length=2, max_length=2, description="`[from, to]`.")
    reward: dict[str, Any]


class BoardCreate(BaseModel):
    board_id: BoardId
    policy: Policy = Field(description="`best_score`, `cumulative`, `fastest_time` or `latest` (a player's most "
                                       "recent event is their row; ranked as `best_score`).")
    shards: Annotated[int, Strict(), Field(ge=1, le=1024)] | None = Field(
        None, description="Partition count; default: the server's `--shards`.")
    max_plausible_time_ms: Annotated[int, Strict(), Field(ge=1, le=INT64_MAX)] | None = Field(
        None, description="`fastest_time` only: larger times are `REJECTED_INVALID_TIMING` (default 24 h).")
    review_above: Int64 | None = Field(None, description="Values (or deltas) above this are `HELD_FOR_REVIEW`.")
    closes_at: TimestampMs | None = Field(
        None, description="Scheduled close: once the server's clock reaches it the board moves to FROZEN, at "
                          "that log position, as if an admin had asked (a past time: right after creation).")
    finalize_after_s: FinalizeAfterS | None = Field(
        None, description="Seconds after `closes_at` at which the board moves to FINALIZED (default 3600).")
    subscores: list[Literal["desc", "asc"]] | None = Field(
        None, max_length=3, description="0-3 subscores, each `desc` (higher first) or `asc` (lower first), "
        "compared after the primary value and before the policy's tie keys (§14); `best_score`, "
        "`fastest_time` and `latest` only (`[]` is the same as none). Every event on the board then carries that many.")
    recurrence: RecurrenceIn | None = Field(
        None, description="Makes the board a series of time windows, one instance board per window "
                          f"(docs/api.md §15); its id's season part is then at most {MAX_SERIES_SEASON} characters.")
    entry: EntryIn | None = Field(None, description="Competition entry rules (docs/api.md §16); none by default.")
    league: LeagueIn | None = Field(None, description="Makes the board a league: players in cohorts within tiers "
                                                      "(docs/api.md §16); none by default.")
    prizes: list[PrizeIn] | None = Field(
        None, max_length=MAX_PRIZES, description=f"Up to {MAX_PRIZES} non-overlapping rank ranges, each with a "
        "reward, awarded when the board becomes FINALIZED (docs/api.md §16); none by default.")

    model_config = ConfigDict(json_schema_extra={
        "allOf": [
            # a series' season part leaves room for ".YYYYMMDD" (docs/api.md §15); a series has no entry
            # rules, league, prizes or subscores (yet)
            {"if": {"required": ["recurrence"], "properties": {"recurrence": {"type": "object"}}},
             "then": {"properties": {
                 "board_id": {"pattern": rf"^[^:]*:[^:]*:[^:]{{0,{MAX_SERIES_SEASON}}}:[^:]*$"},
                 "entry": {"type": "null"},
                 "league": {"type": "null"},
                 "prizes": {"anyOf": [{"type": "array", "maxItems": 0}, {"type": "null"}]},
                 "subscores": {"anyOf": [{"type": "array", "maxItems": 0}, {"type": "null"}]}}}},
            # a cumulative board takes no subscores (docs/api.md §14): say so to generated clients too
            {"if": {"properties": {"policy": {"const": "cumulative"}}, "required": ["policy"]},
             "then": {"properties": {"subscores": {"anyOf": [{"type": "array", "maxItems": 0}, {"type": "null"}]}}}},
            # a board with entry rules, a league or prizes has no subscores (yet)
            {"if": {"anyOf": [{"required": ["entry"], "properties": {"entry": {"type": "object"}}},
                              {"required": ["league"], "properties": {"league": {"type": "object"}}},
                              {"required": ["prizes"], "properties": {"prizes": {"type": "array", "minItems": 1}}}]},
             "then": {"properties": {"subscores": {"anyOf": [{"type": "array", "maxItems": 0}, {"type": "null"}]}}}},
        ],
        "examples": [
        {"board_id": "arena-clash:solo:S7:global", "policy": "best_score", "shards": 4,
         "max_plausible_time_ms": 86400000, "review_above": None, "closes_at": "2026-12-01T00:00:00Z",
         "finalize_after_s": 3600},
        {"board_id": "arena-clash:solo:daily:global", "policy": "best_score",
         "recurrence": {"every": "day", "timezone": "Europe/Berlin", "at": "04:00", "keep": 30}},
        {"board_id": "arena-clash:league:S7:global", "policy": "best_score",
         "league": {"cohort_size": 50, "tiers": 5, "promote": 10, "demote": 10},
         "prizes": [{"ranks": [1, 1], "reward": {"coins": 1000}}, {"ranks": [2, 10], "reward": {"coins": 100}}]}]})


class NextSeasonIn(BaseModel):
    season: Annotated[str, Field(min_length=1, max_length=64, pattern=rf"^{ID_PART.pattern}$", examples=["S8"],
                                 description="The new board id's season part, `[A-Za-z0-9][A-Za-z0-9_.-]{0,63}`."),
                      AfterValidator(_season_part)]
    closes_at: TimestampMs | None = Field(None, description="The new season's scheduled close (none by default).")
    finalize_after_s: FinalizeAfterS | None = Field(
        None, description="Default: the board's own `finalize_after_s`.")


class BoardOut(_Out):
    board_id: str = Field(examples=["arena-clash:solo:S7:global"])
    policy: Policy
    state: BoardState
    version: Version
    size: int = Field(description="Number of ranked (ACTIVE) players.")
    shards: int
    max_plausible_time_ms: int | None = None
    review_above: int | None = None
    closes_at: Timestamp | None = Field(None, description="Scheduled close, or null.")
    finalize_after_s: int = Field(3600, description="Seconds from `closes_at` to the scheduled FINALIZED.")
    subscores: list[Literal["desc", "asc"]] = Field([], description="The board's subscores' directions (§14).")
    entry: EntryRulesOut | None = Field(None, description="The entry rules (§16); left out when the board has none.")
    league: LeagueOut | SkipJsonSchema[None] = Field(
        None, json_schema_extra=_no_default, description="A league's settings (§16); left out on other boards.")
    prizes: list[PrizeOut] | SkipJsonSchema[None] = Field(
        None, json_schema_extra=_no_default, description="The prize ranges (§16); left out when the board has none.")
    recurrence: RecurrenceOut | SkipJsonSchema[None] = Field(
        None, json_schema_extra=_no_default, description="A series only (docs/api.md §15): how its windows recur.")
    current: str | None = Field(None, description="A series only: the id of the current window's instance (null "
                                                  "until it exists).")
    series: str | SkipJsonSchema[None] = Field(None, json_schema_extra=_no_default,
                                               description="An instance only: its series' board id.")
    window: SeriesWindowOut | SkipJsonSchema[None] = Field(None, json_schema_extra=_no_default,
                                                           description="An instance only: its window.")


class RecurrenceOut(_Out):
    every: Literal["day", "week", "month"]
    timezone: str
    at: str = Field(pattern=AT_PATTERN)
    keep: int = Field(ge=1, le=MAX_KEEP)


class SeriesWindowOut(_Out):
    starts_at: Timestamp
    ends_at: Timestamp = Field(description="Where the next window starts; the instance's `closes_at`.")


class InstanceOut(_Out):
    board_id: str
    starts_at: Timestamp
    ends_at: Timestamp
    state: BoardState
    size: int = Field(description="Number of ranked (ACTIVE) players.")


class InstancesOut(_Out):
    instances: list[InstanceOut] = Field(description="Latest window first.")


class BoardList(_Out):
    boards: list[BoardOut]


class StateIn(BaseModel):
    state: BoardState = Field(description="Forward only: OPEN → FROZEN → FINALIZED → ARCHIVED.",
                              examples=["FROZEN"])


# ---- events ---------------------------------------------------------------------


class EventIn(BaseModel):
    """A score event. It may also carry ``"metadata"``: a JSON object of at most 1,024 bytes as compact
    JSON with sorted keys, part of the event's content (docs/api.md §13: integers within 64 bits, finite
    floats below 2^63 in magnitude, no lone surrogates). It is not listed among the properties because
    JSON Schema cannot state its size limit (a generated client would send objects the server refuses).
    On a board with subscores (docs/api.md §14) an event carries ``"subscores"``: exactly as many signed
    64-bit integers as the board declares (else the whole batch is 422); on other boards it is omitted,
    null or ``[]``. Not a property either: whether it is required depends on the board, which JSON Schema
    cannot say. It names its board with ``board_id``, or its boards with ``board_ids`` (docs/api.md §15),
    never both."""

    model_config = ConfigDict(json_schema_extra={"oneOf": [{"required": ["board_id"]}, {"required": ["board_ids"]}]})

    event_id: EventId
    board_id: BoardId | SkipJsonSchema[None] = Field(
        None, description="The board (or series) of the event.", json_schema_extra=_no_default)
    board_ids: Annotated[list[BoardId], Field(min_length=1, max_length=MAX_FANOUT_BOARDS)] | SkipJsonSchema[None] = Field(
        None, json_schema_extra=lambda s: _no_default(s, uniqueItems=True),
        description=f"Instead of `board_id`: 1-{MAX_FANOUT_BOARDS} distinct boards (series allowed) the event is "
                    "on, each deduplicating it under its one `event_id`; it counts once per board towards the "
                    "batch limit, and has one result per board.")
    player_id: PlayerId
    value: Int64 = Field(description="JSON integer (signed 64-bit). `fastest_time`: elapsed ms.")
    achieved_at: TimestampIn
    submitted_at: TimestampIn | None = Field(
        None, description="`fastest_time` tie-break; on `latest` boards, which of two events achieved at the same "
                          "moment is the more recent; default `achieved_at`.")


class EventBatchIn(BaseModel):
    events: list[EventIn] = Field(min_length=1, max_length=10_000,
                                  description="1-10,000 events (an event with `board_ids` counts once per board); "
                                              "rejected whole if any is invalid.")

    model_config = ConfigDict(json_schema_extra={"examples": [{"events": [
        {"event_id": "evt-101", "board_id": "arena-clash:solo:S7:global", "player_id": "p-dev",
         "value": 9700, "achieved_at": "2026-11-01T10:05:00Z", "submitted_at": None}]}]})


class EventResultOut(_Out):
    event_id: str
    board_id: str = Field(description="The board the result is on: the event's, or for an event sent to a series "
                                      "the instance of its window.")
    outcome: Outcome
    version: Version = Field(description="Board version after this event (0 for unknown boards).")


class EventsOut(_Out):
    results: list[EventResultOut]


# ---- reads ------------------------------------------------------------------------


class EntryOut(_Out):
    rank: int = Field(ge=1)
    tied_rank: int | None = Field(None, ge=1, description="With `?ties=competition`: the competition rank "
                                  "(1, 1, 3), one plus the number of ranked players with a strictly better "
                                  "primary value (and subscores, on a board with them).")
    player_id: str
    value: int
    achieved_at: Timestamp
    metadata: dict[str, Any] | None = Field(None, description="The metadata of the event that gave the row its "
                                            "value (§13); left out when there is none.")
    subscores: list[int] | None = Field(None, description="The row's subscores, on a board with subscores "
                                        "(§14); left out on other boards.")


class TopOut(_Out):
    version: Version
    entries: list[EntryOut]
    next_cursor: str | None = Field(description="Opaque token for the next page (pinned to `version`); "
                                    "null on the last page.")
    stale_ms: StaleMs = None


class PlayerOut(_Out):
    version: Version
    player_id: str
    rank: int | None = Field(description="Null when `status` is INVALIDATED.")
    value: int
    achieved_at: Timestamp
    status: RowStatus
    approximate: bool
    rank_error_bound: int | None = Field(None, description="With `approximate=true`: the true rank is within ±k.")
    tied_rank: int | None = Field(None, description="With `?ties=competition`: the competition rank "
                                  "(null when `rank` is null).")
    row_version: int = Field(0, description="Extension: grows by 1 on every change of this player's row "
                                            "(apply or correction); compare it to detect a concurrent change.")
    metadata: dict[str, Any] | None = Field(None, description="The metadata of the event that gave the row its "
                                            "value (§13); left out when there is none.")
    subscores: list[int] | None = Field(None, description="The row's subscores, on a board with subscores "
                                        "(§14); left out on other boards.")
    attempts: int | None = Field(None, description="On a board with `max_attempts` (§16): the player's admitted "
                                 "score events so far; left out on other boards.")
    stale_ms: StaleMs = None


class WindowOut(_Out):
    version: Version
    player_id: str | None = None
    entries: list[EntryOut]
    stale_ms: StaleMs = None


class CohortEntryOut(EntryOut):
    rank: int = Field(ge=1, description="The rank local to the cohort (1..k among its ranked members).")
    zone: Literal["promote", "demote"] | None = Field(
        description="`promote` for local ranks <= the league's `promote` below the top tier, else `demote` for "
                    "the last `demote` local ranks above tier 1, else null.")


class CohortOut(_Out):
    board_id: str = Field(description="The board that answered: the board read, or a series' current instance "
                                      "(docs/api.md §18).", examples=["arena-clash:league:weekly.20261207:global"])
    version: Version
    tier: int = Field(ge=1, description="The cohort's tier (1 the lowest).")
    cohort: str = Field(description="`<tier>-<n>`, n from 1 within the tier.", examples=["1-3"])
    members: int = Field(ge=1, description="Players placed in the cohort (ranked or not).")
    entries: list[CohortEntryOut] = Field(description="Its ranked members, best first.")


class AwardOut(_Out):
    award_id: str = Field(description="`<board_id>/<player_id>`.", examples=["arena-clash:cup:W49:global/p-ava"])
    player_id: str
    rank: int = Field(ge=1, description="The strict rank at FINALIZED (local to the cohort on a league).")
    cohort: str | None = Field(description="The player's cohort on a league board; null on other boards.")
    reward: dict[str, Any] = Field(description="The prize range's reward, as the board was given it.")
    delivery: Literal["pending", "delivered", "failed"] = Field(description="Its webhook delivery (§16).")
    attempts: int = Field(ge=0, description="Webhook deliveries tried so far.")


class AwardsOut(_Out):
    awards: list[AwardOut] = Field(description="In award order: rank; on a league by tier, then cohort number, "
                                               "then local rank.")
    next_cursor: str | None = Field(description="Token for the next page; null on the last page.")


class SubsetIn(BaseModel):
    player_ids: list[PlayerId] = Field(max_length=10_000, description="Up to 10,000 player ids.",
                                       examples=[["p-ben", "p-dev", "p-eli"]])


class ChangeOut(_Out):
    player_id: str
    value: int
    achieved_at: Timestamp
    status: RowStatus
    metadata: dict[str, Any] | None = Field(None, description="The metadata of the event that gave the row its "
                                            "value (§13); left out when there is none.")
    subscores: list[int] | None = Field(None, description="The row's subscores, on a board with subscores "
                                        "(§14); left out on other boards.")


class DeltaOut(_Out):
    version: Version
    changes: list[ChangeOut]


class ChangesOut(_Out):
    kind: Literal["deltas", "snapshot"]
    version: Version
    from_version: int | None = Field(None, description="`deltas` only: the version the replay starts after.")
    deltas: list[DeltaOut] | None = Field(None, description="`deltas` only: contiguous, in order.")
    entries: list[EntryOut] | None = Field(None, description="`snapshot` only: the whole board, ranked, "
                                           "at most `limit` rows per response.")
    next_cursor: str | None = Field(None, description="`snapshot` only: token for the next page (pinned to "
                                    "`version`, 410 VIEW_EXPIRED once gone); null on the last page.")


# ---- moderation ---------------------------------------------------------------------


class HeldOut(_Out):
    event_id: str
    player_id: str
    value: int
    achieved_at: Timestamp
    reason: Literal["HELD_FOR_CORRECTION", "HELD_FOR_REVIEW"]
    subscores: list[int] | None = Field(None, description="The held event's subscores, on a board with "
                                        "subscores (§14).")


class QuarantineOut(_Out):
    events: list[HeldOut]


class DecisionIn(BaseModel):
    decision: Literal["apply", "reject"]
    reason: str = Field("", max_length=2000)
    moderator: str | None = Field(None, max_length=256, description="Default: the key's name.")


class DecisionOut(_Out):
    event_id: str
    decision: Literal["apply", "reject"]
    outcome: Outcome | None = Field(description="The apply outcome; null for reject.")
    version: Version


class InvalidationIn(BaseModel):
    event_id: EventId
    reason: str = Field("", max_length=2000)
    moderator: str | None = Field(None, max_length=256, description="Default: the key's name.")


class InvalidationOut(_Out):
    correction_event_id: str
    player_id: str
    status: RowStatus
    value: int | None
    version: Version


class HistoryEntryOut(_Out):
    event_id: str
    kind: Literal["score", "invalidation", "decision"]
    value: int | None
    achieved_at: Timestamp | None
    outcome: str
    invalidated: bool = Field(description="Whether a later invalidation made this event invalid.")
    metadata: dict[str, Any] | None = Field(None, description="The event's metadata (§13) as it was sent, in "
                                            "canonical form; left out when it had none.")


class HistoryOut(_Out):
    player_id: str
    events: list[HistoryEntryOut]


class PlayerBoardDataOut(_Out):
    board_id: str
    row: PlayerOut | None = Field(description="The player view (§8); null when the player has no row here.")
    history: list[HistoryEntryOut] = Field(description="Every event of theirs here, in log order (§10).")
    held: list[HeldOut] = Field(description="Their events held in the quarantine (§10).")
    awards: list[AwardOut] = Field(description="Their awards (§16).")
    joined: int | None = Field(None, description="Their position in the order of joining (§16); left out when "
                                                 "they did not join.")
    cohort: str | None = Field(None, description="Their league cohort (§16); left out off leagues.")


class PlayerDataOut(_Out):
    player_id: str
    boards: list[PlayerBoardDataOut] = Field(description="Every board holding something about the player, by id "
                                                         "(a series' instances, not the series).")


class ErasureOut(_Out):
    erasure_id: str = Field(description="Ask `GET /v1/erasures/{erasure_id}` for its status.")
    player_id: str
    boards: list[str] = Field(description="The boards where the player had a row, a history or a held event.")


class ErasureStatusOut(_Out):
    erasure_id: str
    status: str = Field(description="`pending` until nothing on disk holds the player's ids, then `complete`.")
    requested_at: str = Field(description="RFC 3339 UTC.")
    completed_at: str | None = Field(description="RFC 3339 UTC; null while pending.")


class ChecksumOut(_Out):
    version: Version
    checksum: str


# ---- browser tokens (docs/api.md §12) -----------------------------------------------


class TokenIn(BaseModel):
    board_ids: list[BoardId] | None = Field(
        min_length=1, max_length=1000,
        description="The boards the token may read (1-1,000 ids), or null for every board. Required.")
    ttl_s: Annotated[int, Strict(), Field(ge=1, le=86_400)] = Field(
        900, description="Lifetime in seconds (1-86,400).")

    model_config = ConfigDict(json_schema_extra={"examples": [
        {"board_ids": ["arena-clash:solo:S7:global"], "ttl_s": 900}]})


class TokenOut(_Out):
    token: str = Field(description="Send as `Authorization: Bearer <token>` or `?access_token=<token>`.")
    expires_at: Timestamp
    board_ids: list[str] | None = Field(description="The boards it reads; null: every board.")


class Health(_Out):
    status: str = Field(examples=["ok"])


class Ready(_Out):
    ready: bool

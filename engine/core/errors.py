"""One error tree for everything a caller can get wrong (STYLE §7).

Every error carries its API code, the HTTP status that code maps to
(docs/api.md §3) and, where it helps, the field path of the bad input. The gateway
turns any :class:`FlowRankError` into the error body in a single handler.
Expected outcomes of applying events are *not* errors: see
:class:`engine.core.model.Outcome`.
"""

from __future__ import annotations


class FlowRankError(Exception):
    code = "INTERNAL"
    status = 500
    retryable = False

    def __init__(self, message: str, field: str | None = None, retry_after: float | None = None):
        super().__init__(message)
        self.message = message
        self.field = field
        self.retry_after = retry_after

    def to_body(self) -> dict:
        return {"error": {"code": self.code, "message": self.message, "field": self.field}}

    def __reduce__(self):  # survive pickling across Ray process boundaries
        return (_rebuild, (type(self), self.message, self.field, self.retry_after))


def _rebuild(cls, message, field, retry_after):
    return cls(message, field=field, retry_after=retry_after)


class Unauthenticated(FlowRankError):
    code, status = "UNAUTHENTICATED", 401


class Forbidden(FlowRankError):
    code, status = "FORBIDDEN", 403


class BoardNotFound(FlowRankError):
    code, status = "BOARD_NOT_FOUND", 404


class PlayerNotFound(FlowRankError):
    code, status = "PLAYER_NOT_FOUND", 404


class PlayerNotRanked(FlowRankError):
    code, status = "PLAYER_NOT_RANKED", 404


class EventNotFound(FlowRankError):
    code, status = "EVENT_NOT_FOUND", 404


class CohortNotFound(FlowRankError):
    code, status = "COHORT_NOT_FOUND", 404


class ErasureNotFound(FlowRankError):
    code, status = "ERASURE_NOT_FOUND", 404


class BoardExists(FlowRankError):
    code, status = "BOARD_EXISTS", 409


class InvalidTransition(FlowRankError):
    code, status = "INVALID_TRANSITION", 409


class AlreadyDecided(FlowRankError):
    code, status = "ALREADY_DECIDED", 409


class BoardFull(FlowRankError):
    code, status = "BOARD_FULL", 409


class BoardNotOpen(FlowRankError):
    code, status = "BOARD_NOT_OPEN", 409


class TotalOutOfRange(FlowRankError):
    """An invalidation refused: the player's cumulative total without that
    event would leave the 64-bit range (the refusal is audited in the log)."""

    code, status = "TOTAL_OUT_OF_RANGE", 409

    @classmethod
    def invalidating(cls, event_id: str, player_id: str) -> "TotalOutOfRange":
        return cls(
            f"Invalidating {event_id!r} would take {player_id!r}'s total outside the 64-bit range; "
            "invalidate the event that offsets it first.",
            "event_id",
        )


class ViewExpired(FlowRankError):
    code, status = "VIEW_EXPIRED", 410


class BoardArchived(FlowRankError):
    """A read an ARCHIVED board no longer answers (a player's event history:
    the archive keeps the final rows, not the events)."""

    code, status = "BOARD_ARCHIVED", 410


class BatchTooLarge(FlowRankError):
    code, status = "BATCH_TOO_LARGE", 413


class ValidationFailed(FlowRankError):
    code, status = "VALIDATION_FAILED", 422


class RateLimited(FlowRankError):
    code, status, retryable = "RATE_LIMITED", 429, True


class Overloaded(FlowRankError):
    """Back-pressure, a restarting shard or a storage fault: retry later."""

    code, status, retryable = "OVERLOADED", 503, True


class StorageUnavailable(Overloaded):
    """The event log cannot make writes durable right now (disk full, read-only)."""


class NotLeader(StorageUnavailable):
    """This node is not the active one of its log (docs/api.md §19): it may not append; ``leader`` is the
    active node's base URL when known (the ``X-FlowRank-Leader`` header)."""

    code = "NOT_LEADER"

    def __init__(self, message: str, field: str | None = None, retry_after: float | None = 1,
                 leader: str | None = None):
        super().__init__(message, field=field, retry_after=retry_after)
        self.leader = leader

    def __reduce__(self):
        return (_rebuild_not_leader, (type(self), self.message, self.field, self.retry_after, self.leader))


def _rebuild_not_leader(cls, message, field, retry_after, leader):
    return cls(message, field=field, retry_after=retry_after, leader=leader)


class AwardsPending(Overloaded):
    """A board with prizes became FINALIZED and its awards are not all logged
    yet: corrections (and ARCHIVED) wait for them, so that awards are the
    ranking at the FINALIZED record (docs/api.md §16). Retry shortly."""


class LogCorruption(FlowRankError):
    """A record before the log's tail fails its CRC or does not decode.

    Raised on open; the service refuses to start rather than skip data.
    """

    code = "LOG_CORRUPTION"


class UnsupportedFormat(FlowRankError):
    """A log segment, snapshot or record is in a format newer than this
    version reads (written by a newer FlowRank). Raised on open; the service
    refuses to start rather than misread it (engine.core.formats)."""

    code = "UNSUPPORTED_FORMAT"

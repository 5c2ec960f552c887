"""The engine's one API: :class:`EngineClient`, declared once.

Two implementations sit behind it: :class:`engine.runtime.local.LocalService`
(every partition in this process; for tests and embedded use) and the Ray
cluster client in :mod:`engine.cluster` (partitions in shard actors). Both
share the router logic of :mod:`engine.router.router`, so they answer identically.

Every method is ``async`` and raises only :class:`engine.core.errors.FlowRankError`
subclasses for anything a caller can cause. Reads reflect a consistent cut:
the returned ``version`` is the board version whose events every partition
has applied, and it is at least the version of every write acknowledged
before the read was issued.
"""

from __future__ import annotations

import inspect
from typing import Any, AsyncIterator, Callable, Protocol, Sequence

from engine.core.columns import BatchResult, ScoreBatch
from engine.core.export import Chunk
from engine.core.model import (
    AwardsPage,
    BoardInfo,
    BoardSpec,
    BoardState,
    BulkJoinResult,
    Changes,
    Checksum,
    CohortsPage,
    CohortView,
    DecisionResult,
    Delta,
    ErasureAccepted,
    ErasureStatus,
    EventResult,
    HeldEvent,
    HistoryEntry,
    InstanceInfo,
    Invalidation,
    InvalidationResult,
    JoinResult,
    Page,
    PlayerData,
    PlayerTier,
    PlayerView,
    QuarantineDecision,
    ScoreEvent,
)

# listener(board_id, deltas) runs on the caller's event loop after a batch
# commits, with the contiguous deltas it produced (possibly empty list never sent).
DeltaListener = Callable[[str, Sequence[Delta]], None]


class EngineClient(Protocol):
    async def create_board(self, spec: BoardSpec) -> BoardInfo:
        """201-style creation; raises BoardExists."""

    async def list_boards(self) -> list[BoardInfo]: ...

    async def board(self, board_id: str) -> BoardInfo:
        """Raises BoardNotFound."""

    async def instances(self, board_id: str) -> list[InstanceInfo]:
        """A series' instances, latest window first (docs/api.md §15); raises
        BoardNotFound (also when ``board_id`` is not a series)."""

    async def set_state(self, board_id: str, state: BoardState) -> BoardInfo:
        """Forward-only season move, anchored at the log position; raises InvalidTransition."""

    async def next_season(self, board_id: str, season: str, closes_at: int | None,
                          finalize_after_s: int | None = None) -> BoardInfo:
        """Create the board ``game:mode:<season>:scope`` with this board's policy,
        shards, review and timing settings (``finalize_after_s`` too unless
        given) and ``closes_at``; raises BoardNotFound, BoardExists, ValidationFailed."""

    async def join(self, board_id: str, player_id: str) -> JoinResult:
        """Join a competition (docs/api.md §16): the player's 0-based position
        (``created``: this call joined them); durable before it returns, no
        board version change. Raises BoardNotFound, BoardNotOpen, BoardFull."""

    async def joins(self, board_id: str, player_ids: Sequence[str]) -> BulkJoinResult:
        """Join up to 1,000 distinct players at once (docs/api.md §18; a series joins its current
        instance): per player, in order, the JoinResult or the BoardFull / BoardNotOpen that :meth:`join`
        would give, the new joins durable together before it returns. Raises BoardNotFound, and
        ValidationFailed (nothing joined) for no ids, too many or a repeated one."""

    async def submit(self, events: Sequence[ScoreEvent]) -> list[EventResult]:
        """Durably append then apply; one result per event, in order.

        Unknown boards give ``REJECTED_UNKNOWN_SEASON`` results, not errors.
        Raises Overloaded / StorageUnavailable when nothing could be made
        durable (then nothing was applied).
        """

    async def submit_columns(self, batch: ScoreBatch) -> BatchResult:
        """:meth:`submit` for a batch given as columns (the HTTP write path):
        per event, in submission order, its outcome code (engine.core.records.CODE)
        and board version."""

    async def top(self, board_id: str, offset: int, limit: int, at_version: int | None = None,
                  ties: bool = False) -> Page:
        """Entries ranked offset+1 .. offset+limit. With ``at_version`` the page
        comes from that pinned version or raises ViewExpired. With ``ties`` every
        entry also carries its competition rank (``tied_rank``), in every read below too."""

    async def player(self, board_id: str, player_id: str, ties: bool = False) -> PlayerView:
        """Exact rank; raises PlayerNotFound when the player has no row."""

    async def approximate_player(self, board_id: str, player_id: str) -> PlayerView:
        """Rank from per-shard statistics: ``approximate=True`` and an honest
        ``rank_error_bound`` (the exact rank is within ± the bound)."""

    async def around(self, board_id: str, player_id: str, radius: int, ties: bool = False) -> Page:
        """Ranks [r - radius, r + radius] clamped; raises PlayerNotRanked / PlayerNotFound."""

    async def ranked_subset(self, board_id: str, player_ids: Sequence[str], ties: bool = False) -> Page:
        """ACTIVE rows among ``player_ids`` ranked locally 1..k by the board comparator."""

    async def cohort(self, board_id: str, player_id: str | None = None, cohort: str | None = None,
                     ties: bool = False) -> CohortView:
        """A league cohort (docs/api.md §16), by id or as a player's: ranked
        locally with zones. Raises BoardNotFound, CohortNotFound, PlayerNotFound."""

    async def cohorts(self, board_id: str, tier: int | None = None, after: tuple[int, int] | None = None,
                      limit: int = 100) -> CohortsPage:
        """A league's cohorts (docs/api.md §18) by tier, then cohort number: at most ``limit`` of them
        after the cohort ``after`` (tier, number), only tier ``tier`` when given; a series answers from its
        current instance. Raises BoardNotFound, CohortNotFound (not a league)."""

    async def tier(self, board_id: str, player_id: str) -> PlayerTier:
        """The tier a player has on a league board, or would enter it at (docs/api.md §18); a series
        answers from its current instance. Raises BoardNotFound, CohortNotFound (not a league)."""

    async def awards(self, board_id: str, start: int = 0, limit: int = 100) -> AwardsPage:
        """A page of the board's awards from index ``start`` (docs/api.md §16). Raises BoardNotFound."""

    async def player_data(self, player_id: str) -> PlayerData:
        """Everything held about a player, board by board (docs/api.md §17): row, history, held events,
        awards. Raises PlayerNotFound when nothing is held."""

    async def erase_player(self, player_id: str) -> ErasureAccepted:
        """Erase a player (docs/api.md §17): durable and applied everywhere before it returns; forgetting on
        disk follows in the background. Raises PlayerNotFound when nothing is held."""

    async def erasure(self, erasure_id: str) -> ErasureStatus:
        """An erasure's status (docs/api.md §17). Raises ErasureNotFound."""

    async def changes(self, board_id: str, since_version: int | None, limit: int | None = None,
                      cursor: tuple[int, int] | None = None, deltas_only: bool = False,
                      ties: bool = False) -> Changes:
        """Contiguous deltas after ``since_version`` or one page (``limit`` rows,
        default and at most 10,000) of a snapshot of the whole ranked board.
        A snapshot page carries ``next_cursor`` (version, offset) while rows
        remain; pass it back as ``cursor`` for the next page of that same
        version (ViewExpired once it is gone). ``deltas_only``: never read a
        snapshot; answer an empty one when the deltas are gone."""

    def export(self, board_id: str, page_rows: int = 10_000, ties: bool = False) -> AsyncIterator[Chunk]:
        """Every ranked row at one pinned version, best first, as column chunks
        (:class:`engine.core.export.Chunk`) of at most ``page_rows`` rows (docs/api.md
        §13). The first chunk comes even for an empty board (its version names
        the cut); every chunk has that version. With ``ties`` chunks carry
        ``tied_rank``. Raises BoardNotFound when the first chunk is awaited.
        Memory does not grow with the board: the rows are pinned in spill files
        on the shards and merged a block at a time."""

    async def quarantine(self, board_id: str) -> list[HeldEvent]: ...

    async def decide(self, decision: QuarantineDecision) -> DecisionResult:
        """Raises EventNotFound (not held) or AlreadyDecided."""

    async def invalidate(self, invalidation: Invalidation) -> InvalidationResult:
        """Raises EventNotFound when the board never applied that event id."""

    async def history(self, board_id: str, player_id: str) -> list[HistoryEntry]: ...

    async def checksum(self, board_id: str) -> Checksum: ...

    def subscribe(self, listener: DeltaListener) -> Callable[[], None]:
        """Register a commit listener; returns a function that unregisters it."""

    def stats(self) -> dict:
        """Operational numbers for /metrics: queue depth, fsync latency samples,
        per-shard row counts, dead letters, ingest-to-rank lag samples, and the
        cumulative latency histograms (``histograms``: name → HistogramSnapshot)."""

    async def refresh_stats(self) -> None:
        """Make the next :meth:`stats` current (/metrics awaits it before a scrape)."""

    async def ready(self) -> bool:
        """True when writes can be accepted (recovered, log writable)."""

    async def close(self) -> None:
        """Stop accepting, drain in-flight batches, snapshot, release files."""


#: What an engine answers elsewhere (async methods of :class:`EngineClient`
#: but the engine's own lifecycle): a router-backed engine asks its router
#: (:class:`engine.router.router.Router` has one method of each name), a gateway's
#: remote engine asks the engine host. Derived from the Protocol, so a new
#: operation is declared there, implemented by the router and routed in the
#: gateway, and nothing else lists it.
FORWARDED: tuple[str, ...] = tuple(
    name for name, fn in vars(EngineClient).items()
    if inspect.iscoroutinefunction(fn) and name not in ("ready", "refresh_stats", "close"))


def forward(to: Callable[[Any, str], Callable]) -> Callable[[type], type]:
    """Class decorator: each :data:`FORWARDED` operation the class does not
    define itself becomes ``to(self, name)(*args, **kwargs)`` (the one
    forwarder every runtime uses; ``to`` says where the call goes)."""

    def wrap(cls: type) -> type:
        for name in FORWARDED:
            if any(name in vars(k) for k in cls.__mro__[:-1] if k is not EngineClient):
                continue

            def method(self, *args, _name=name, **kwargs):
                return to(self, _name)(*args, **kwargs)

            method.__name__ = method.__qualname__ = name
            method.__doc__ = getattr(EngineClient, name).__doc__
            setattr(cls, name, method)
        return cls

    return wrap

"""Season lifecycle as a table (STYLE §5, docs/api.md §5), the scheduled
close (docs/api.md §13) and the next season's spec.

>>> next_state(BoardState.OPEN, BoardState.FROZEN)
<BoardState.FROZEN: 'FROZEN'>
>>> accepts_scores(BoardState.FINALIZED)
False
>>> due(BoardState.OPEN, 1_000, 60, now_ms=1_000)
Due(transitions=(<BoardState.FROZEN: 'FROZEN'>,), wake_at=61000)

No clock here: the shell (:class:`engine.router.control.BoardControl`) passes ``now_ms``.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import NamedTuple

from engine.core.errors import InvalidTransition, ValidationFailed
from engine.core.model import MAX_FINALIZE_AFTER_S, BoardSpec, BoardState
from engine.core.windows import series_check
from engine.core.timefmt import MAX_MS, MIN_MS

TRANSITIONS: dict[BoardState, frozenset[BoardState]] = {
    BoardState.OPEN: frozenset({BoardState.FROZEN}),
    BoardState.FROZEN: frozenset({BoardState.FINALIZED}),
    BoardState.FINALIZED: frozenset({BoardState.ARCHIVED}),
    BoardState.ARCHIVED: frozenset(),
}


def next_state(current: BoardState, wanted: BoardState) -> BoardState:
    """``wanted`` if the table allows ``current -> wanted``; else InvalidTransition."""
    if wanted not in TRANSITIONS[current]:
        allowed = ", ".join(sorted(s.value for s in TRANSITIONS[current])) or "nothing"
        raise InvalidTransition(
            f"A {current.value} board cannot move to {wanted.value}; it may move to {allowed}.", "state"
        )
    return wanted


def accepts_scores(state: BoardState) -> bool:
    """Only OPEN boards apply score events; the others quarantine them."""
    return state is BoardState.OPEN


def accepts_corrections(state: BoardState) -> bool:
    """Quarantine decisions and invalidations may still change FROZEN and
    FINALIZED boards (as logged corrections); an ARCHIVED board is read-only."""
    return state is not BoardState.ARCHIVED


#: The forward order of the states (the table above is a chain).
ORDER: tuple[BoardState, ...] = (BoardState.OPEN, BoardState.FROZEN, BoardState.FINALIZED, BoardState.ARCHIVED)
_RANK = {s: i for i, s in enumerate(ORDER)}


class Due(NamedTuple):
    """What a board's schedule asks for at some instant: the transitions to
    make now, in order (each one step of the table), and the epoch ms at
    which the next one falls due (None: nothing more is scheduled)."""

    transitions: tuple[BoardState, ...]
    wake_at: int | None


NOTHING = Due((), None)


def due(state: BoardState, closes_at: int | None, finalize_after_s: int, now_ms: int) -> Due:
    """The scheduled transitions of a board in ``state`` at ``now_ms``.

    FROZEN is due from ``closes_at`` on, FINALIZED from ``closes_at +
    finalize_after_s`` seconds on (both inclusive); a board already at or
    past a state owes nothing for it (an admin moved it by hand), and the
    schedule never goes beyond FINALIZED. Both due at once come in order
    (a server down through both performs both). O(1).

    >>> due(BoardState.OPEN, 1_000, 0, now_ms=5_000).transitions
    (<BoardState.FROZEN: 'FROZEN'>, <BoardState.FINALIZED: 'FINALIZED'>)
    >>> due(BoardState.FROZEN, 1_000, 60, now_ms=5_000)
    Due(transitions=(), wake_at=61000)
    >>> due(BoardState.OPEN, None, 60, now_ms=5_000)
    Due(transitions=(), wake_at=None)
    """
    if closes_at is None:
        return NOTHING
    steps = ((BoardState.FROZEN, closes_at), (BoardState.FINALIZED, finalize_at(closes_at, finalize_after_s)))
    now: list[BoardState] = []
    for target, at in steps:
        if _RANK[state] >= _RANK[target]:
            continue
        if at > now_ms:
            return Due(tuple(now), at)
        now.append(target)
    return Due(tuple(now), None)


def finalize_at(closes_at: int, finalize_after_s: int) -> int:
    """Epoch ms at which a scheduled board finalizes."""
    return closes_at + finalize_after_s * 1000


def check_schedule(closes_at: object, finalize_after_s: object) -> None:
    """Raise ValidationFailed unless ``closes_at`` is None or an int and
    ``finalize_after_s`` an int in 0..MAX_FINALIZE_AFTER_S."""
    if closes_at is not None and (isinstance(closes_at, bool) or not isinstance(closes_at, int)
                                  or not MIN_MS <= closes_at <= MAX_MS):
        raise ValidationFailed("closes_at must be a timestamp (epoch ms within the years 0001-9999).", "closes_at")
    if isinstance(finalize_after_s, bool) or not isinstance(finalize_after_s, int) \
            or not 0 <= finalize_after_s <= MAX_FINALIZE_AFTER_S:
        raise ValidationFailed(f"finalize_after_s must be an integer in 0..{MAX_FINALIZE_AFTER_S}.",
                               "finalize_after_s")


#: One part of a board id ``game:mode:season:scope`` (docs/api.md §4).
ID_PART = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


def next_season(spec: BoardSpec, season: str, closes_at: int | None,
                finalize_after_s: int | None = None) -> BoardSpec:
    """The spec of the board that follows ``spec`` in ``season``: the id
    with its third part replaced, the same policy, shards, review and timing
    settings (``finalize_after_s`` too unless given, and a series'
    recurrence), and ``closes_at`` as given. Raises ValidationFailed for a
    season that is not a valid id part, or longer than a series' season may
    be (field ``season``), or a board id that is not ``game:mode:season:scope``.

    >>> from engine.core.model import Policy
    >>> next_season(BoardSpec("g:solo:S7:eu", Policy.CUMULATIVE, 3), "S8", None).board_id
    'g:solo:S8:eu'
    """
    if not isinstance(season, str) or ID_PART.fullmatch(season) is None:
        raise ValidationFailed("season must match [A-Za-z0-9][A-Za-z0-9_.-]{0,63} (it becomes the board id's "
                               "third part).", "season")
    parts = spec.board_id.split(":")
    if len(parts) != 4:
        raise ValidationFailed(f"Board {spec.board_id!r} is not game:mode:season:scope; it has no next season.",
                               "board_id")
    parts[2] = season
    if spec.recurrence is not None:  # a series' next season is a series: room for its instances' dates
        series_check(":".join(parts), "season")
    after = spec.finalize_after_s if finalize_after_s is None else finalize_after_s
    check_schedule(closes_at, after)
    # (an instance's next season is an ordinary board: the window belongs to the series)
    return replace(spec, board_id=":".join(parts), closes_at=closes_at, finalize_after_s=after, series=None, window=None)

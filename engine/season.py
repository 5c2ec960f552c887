"""Season lifecycle as a table (STYLE §5, docs/api.md §5).

>>> next_state(BoardState.OPEN, BoardState.FROZEN)
<BoardState.FROZEN: 'FROZEN'>
>>> accepts_scores(BoardState.FINALIZED)
False
"""

from __future__ import annotations

from engine.errors import InvalidTransition
from engine.model import BoardState

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

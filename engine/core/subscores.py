"""Subscores (docs/api.md §14): what a board may declare and what its events must carry.

A board declares 0-3 subscores, each ``"desc"`` (higher first) or ``"asc"``
(lower first), on the ``best_score``, ``fastest_time`` and ``latest``
policies (:data:`POLICIES_WITH_SUBSCORES`); ``[]``
is the same as none. Every event on such a board carries exactly that many
signed 64-bit integers; on a board without subscores an event carries none.
Both rules are checked before anything is logged: a batch with one bad event
is refused whole (422 naming ``events[i].subscores``). Pure: no clock, no I/O.

>>> check_directions(Policy.BEST_SCORE, ["desc", "asc"])
('desc', 'asc')
>>> check_directions(Policy.CUMULATIVE, [])
()
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from engine.core.columns import ScoreBatch
from engine.core.errors import ValidationFailed
from engine.core.model import MAX_SUBSCORES, SUBSCORE_DIRECTIONS, BoardSpec, Policy

#: The policies whose boards may declare subscores. The comparator of each is
#: (primary, subscores..., its tie keys): a new policy that keeps one best row
#: per player (``latest``) joins here and in the partition's apply kernel.
POLICIES_WITH_SUBSCORES = frozenset({Policy.BEST_SCORE, Policy.FASTEST_TIME, Policy.LATEST})


def check_directions(policy: Policy, raw: object, field: str = "subscores") -> tuple[str, ...]:
    """A board's declared subscores as a tuple of directions, or
    ValidationFailed: a list of at most MAX_SUBSCORES ``"desc"`` / ``"asc"``,
    non-empty only on a policy of :data:`POLICIES_WITH_SUBSCORES`."""
    if raw is None:
        return ()
    if not isinstance(raw, (list, tuple)):
        raise ValidationFailed('subscores must be a list of "desc" or "asc".', field)
    if len(raw) > MAX_SUBSCORES:
        raise ValidationFailed(f"A board has at most {MAX_SUBSCORES} subscores; this one has {len(raw)}.", field)
    for i, d in enumerate(raw):
        if d not in SUBSCORE_DIRECTIONS or not isinstance(d, str):
            raise ValidationFailed(f'Each subscore is "desc" or "asc"; item {i} is {d!r}.', f"{field}[{i}]")
    if raw and policy not in POLICIES_WITH_SUBSCORES:
        raise ValidationFailed(f"A {policy.value} board cannot have subscores.", field)
    return tuple(raw)


def check_batch(batch: ScoreBatch, spec_of: Callable[[str], BoardSpec | None]) -> None:
    """Raise ValidationFailed naming the first event (in submission order)
    whose subscores do not match its board's declaration (``spec_of``: the
    board's spec, None for an unknown board, whose events are answered
    REJECTED_UNKNOWN_SEASON, not refused). O(boards) unless a board is wrong."""
    first_bad: int | None = None
    want_of: dict[int, int] = {}
    for cols, positions in zip(batch.boards, batch.positions):
        spec = spec_of(cols.board_id)
        if spec is None:
            continue
        want = len(spec.subscores)
        bad = _bad_rows(cols.width, cols.nsubs, want, len(cols))
        if len(bad):
            pos = int(positions[bad[0]])
            if first_bad is None or pos < first_bad:
                first_bad, want_of[pos] = pos, want
    if first_bad is not None:
        want = want_of[first_bad]
        what = (f"exactly {want} subscores (a list of signed 64-bit integers)" if want
                else "no subscores (omit them, or send null or [])")
        raise ValidationFailed(f"Events on this board carry {what}.", f"events[{first_bad}].subscores")


def _bad_rows(width: int, counts: np.ndarray | None, want: int, n: int) -> np.ndarray:
    """Rows whose subscore count is not ``want``."""
    if counts is not None:
        return np.flatnonzero(counts != want)
    return np.arange(n) if width != want else np.zeros(0, np.int64)


def as_directions(values: Sequence[str]) -> str:
    """Directions as the CLI takes them: ``desc,asc``."""
    return ",".join(values)

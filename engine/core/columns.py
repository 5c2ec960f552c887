"""Score batches as columns: the shape every hot path exchanges.

A batch of score events for one board travels as one :class:`ScoreColumns`
record (ids as lists of str, numbers as int64 numpy arrays), never as one
Python object per event. :class:`BatchResult` is the answer: one outcome
code (``engine.core.records.CODE``) and one board version per event.

>>> from engine.core.model import ScoreEvent
>>> cols = ScoreColumns.from_events([ScoreEvent("b", "e1", "p1", 5, 1, 2)])
>>> cols.board_id, cols.event_ids, int(cols.values[0]), len(cols)
('b', ['e1'], 5, 1)
>>> cols.events()[0] == ScoreEvent("b", "e1", "p1", 5, 1, 2)
True
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

import numpy as np

from engine.core.errors import ValidationFailed
from engine.core.model import ScoreEvent


class ScoreColumns(NamedTuple):
    """Score events of one board, in arrival (log) order."""

    board_id: str
    event_ids: list[str]
    player_ids: list[str]
    values: np.ndarray  # int64
    achieved: np.ndarray  # int64, epoch ms
    submitted: np.ndarray  # int64, epoch ms
    #: metadata (docs/api.md §13) as one arena: event i's canonical compact JSON
    #: is ``meta[moffs[i]:moffs[i + 1]]`` (empty: none). Both None when no event
    #: of the batch carries metadata (the common case costs nothing).
    meta: np.ndarray | None = None  # uint8
    moffs: np.ndarray | None = None  # int64, len + 1
    #: subscores (docs/api.md §14): int64, one row per event, one column per
    #: subscore of the board. None on a board without subscores (no cost there).
    subs: np.ndarray | None = None
    #: only in a batch whose events carry different numbers of subscores (which
    #: no board accepts: :func:`engine.core.subscores.check_batch` refuses it): each
    #: event's count (uint8), ``subs`` then zero-padded to the largest
    nsubs: np.ndarray | None = None

    def __len__(self) -> int:  # type: ignore[override]
        return len(self.event_ids)

    @classmethod
    def from_events(cls, events: Sequence[ScoreEvent], board_id: str | None = None) -> "ScoreColumns":
        """Columns of ``events`` (all of one board). O(n), C-level loops."""
        n = len(events)
        if board_id is None:
            board_id = events[0].board_id if n else ""
        ids = [e[1] for e in events]
        pids = [e[2] for e in events]
        nums = np.fromiter((x for e in events for x in (e[3], e[4], e[5])), dtype=np.int64, count=3 * n)
        nums = nums.reshape(n, 3)
        # plain 6-tuples (benchmarks, tests) carry no metadata; a ScoreEvent always has the field
        meta, moffs = meta_columns([e[6] for e in events]) if n and len(events[0]) > 6 else (None, None)
        subs, nsubs = subscore_columns([e[7] for e in events]) if n and len(events[0]) > 7 else (None, None)
        return cls(board_id, ids, pids, np.ascontiguousarray(nums[:, 0]), np.ascontiguousarray(nums[:, 1]),
                   np.ascontiguousarray(nums[:, 2]), meta, moffs, subs, nsubs)

    def metadata(self) -> list[bytes]:
        """Each event's metadata bytes (b"" none). O(n)."""
        if self.moffs is None or self.meta is None:
            return [b""] * len(self.event_ids)
        raw, bounds = self.meta.tobytes(), self.moffs.tolist()
        return [raw[bounds[i]:bounds[i + 1]] for i in range(len(self.event_ids))]

    def subscores(self) -> list[tuple[int, ...]]:
        """Each event's subscores (() on a board without them). O(n)."""
        if self.subs is None:
            return [()] * len(self.event_ids)
        return [tuple(r) for r in self.subs.tolist()]

    @property
    def width(self) -> int:
        """How many subscores each event carries (0: none)."""
        return 0 if self.subs is None else int(self.subs.shape[1])

    def events(self) -> list[ScoreEvent]:
        """Back to one record per event (tests, cold paths)."""
        b = self.board_id
        return [ScoreEvent(b, e, p, v, a, s, m, c) for e, p, v, a, s, m, c in zip(
            self.event_ids, self.player_ids, self.values.tolist(), self.achieved.tolist(), self.submitted.tolist(),
            self.metadata(), self.subscores())]

    def take(self, rows: np.ndarray) -> "ScoreColumns":
        """The sub-batch of the given row numbers, in that order."""
        idx = rows.tolist()
        meta, moffs = None, None
        if self.moffs is not None and self.meta is not None:
            meta, moffs = _take_slices(self.meta, self.moffs, np.asarray(rows, np.int64))
        return ScoreColumns(self.board_id, [self.event_ids[i] for i in idx], [self.player_ids[i] for i in idx],
                            self.values[rows], self.achieved[rows], self.submitted[rows], meta, moffs,
                            None if self.subs is None else np.ascontiguousarray(self.subs[rows]),
                            None if self.nsubs is None else self.nsubs[rows])


class ScoreBatch(NamedTuple):
    """One score submission as columns: its event ids in submission order,
    and per board (in order of first appearance) that board's events as
    :class:`ScoreColumns` with their positions in the submission.

    >>> b = ScoreBatch.from_events([ScoreEvent("a", "e1", "p", 1, 1, 1), ScoreEvent("b", "e2", "p", 2, 1, 1),
    ...                             ScoreEvent("a", "e3", "q", 3, 1, 1)])
    >>> len(b), [c.board_id for c in b.boards], [p.tolist() for p in b.positions]
    (3, ['a', 'b'], [[0, 2], [1]])
    """

    event_ids: list[str]
    boards: list[ScoreColumns]
    positions: list[np.ndarray]  # int64, per board: each row's index in the submission
    #: For a submission whose events fan out to several boards (docs/api.md §15): per position, the index of
    #: its event in the request (int64). None: every position is its own request event (a plain batch).
    origin: np.ndarray | None = None

    def __len__(self) -> int:  # type: ignore[override]
        return len(self.event_ids)

    @classmethod
    def from_events(cls, events: Sequence[ScoreEvent]) -> "ScoreBatch":
        """Group ``events`` by board, keeping each board's rows in submission order. O(n)."""
        by_board: dict[str, list[int]] = {}
        for i, ev in enumerate(events):
            by_board.setdefault(ev[0], []).append(i)
        boards, positions = [], []
        for board_id, rows in by_board.items():
            boards.append(ScoreColumns.from_events([events[i] for i in rows], board_id))
            positions.append(np.array(rows, np.int64))
        return cls([ev[1] for ev in events], boards, positions)

    def per_board(self) -> dict[str, int]:
        """Events per board (queue accounting)."""
        out: dict[str, int] = {}
        for c in self.boards:
            out[c.board_id] = out.get(c.board_id, 0) + len(c)
        return out

    def request_index(self, position: int) -> int:
        """The index in the request of the event at ``position`` (what an error names)."""
        return position if self.origin is None else int(self.origin[position])

    def board_ids(self) -> list[str]:
        """The board each position was submitted to, in submission order (one numpy fill per board)."""
        out = np.empty(len(self.event_ids), object)
        for cols, pos in zip(self.boards, self.positions):
            out[pos] = cols.board_id
        return out.tolist()


class BatchResult(NamedTuple):
    """Per event of a batch: the outcome code and the board version after it,
    and, when some event's result is on another board than the one it was
    submitted to (a series' instance, docs/api.md §15), the board of every
    position (``board_ids``; None: each is its submitted board)."""

    codes: np.ndarray  # uint8, engine.core.records.CODE values
    versions: np.ndarray  # int64
    board_ids: list[str] | None = None


def concat_columns(board_id: str, parts: Sequence[ScoreColumns]) -> ScoreColumns:
    """The rows of ``parts`` one after another, as one board's columns. Numpy
    concatenation; metadata arenas joined only when some part has one."""
    if len(parts) == 1:
        return ScoreColumns(board_id, *parts[0][1:])  # (_replace would call the overridden __len__)
    meta = moffs = None
    if any(p.moffs is not None for p in parts):
        meta, moffs = meta_columns([m for p in parts for m in p.metadata()])
    return ScoreColumns(board_id, [e for p in parts for e in p.event_ids], [x for p in parts for x in p.player_ids],
                        np.concatenate([p.values for p in parts]), np.concatenate([p.achieved for p in parts]),
                        np.concatenate([p.submitted for p in parts]), meta, moffs)


def meta_columns(metas: Sequence[bytes]) -> tuple[np.ndarray | None, np.ndarray | None]:
    """One arena and offsets for per-event metadata bytes; (None, None) when
    every item is empty. O(n) at C level.

    >>> meta_columns([b"", b""])
    (None, None)
    >>> m, o = meta_columns([b"{}", b"", b'{"a":1}']); o.tolist(), m.tobytes()
    ([0, 2, 2, 9], b'{}{"a":1}')
    """
    arena = b"".join(metas)
    if not arena:
        return None, None
    moffs = np.zeros(len(metas) + 1, np.int64)
    np.cumsum(np.fromiter(map(len, metas), np.int64, len(metas)), out=moffs[1:])
    return np.frombuffer(arena, np.uint8).copy(), moffs


def subscore_columns(subscores: Sequence[Sequence[int]]) -> tuple[np.ndarray | None, np.ndarray | None]:
    """The events' subscores as one int64 matrix (a row per event), or None
    when none has any; and, only when the events carry different numbers of
    them (a batch some board refuses), each event's count, the matrix then
    zero-padded.

    >>> subscore_columns([(), ()])
    (None, None)
    >>> subscore_columns([(1, -2), (3, 4)])[0].tolist()
    [[1, -2], [3, 4]]
    >>> m, c = subscore_columns([(1,), ()]); m.tolist(), c.tolist()
    ([[1], [0]], [1, 0])
    """
    n = len(subscores)
    if not any(subscores):
        return None, None
    lens = list(map(len, subscores))
    k = max(lens)
    try:
        if min(lens) == k:
            return np.fromiter((x for s in subscores for x in s), np.int64, n * k).reshape(n, k), None
        out = np.zeros((n, k), np.int64)
        for i, s in enumerate(subscores):
            out[i, :len(s)] = s
    except (OverflowError, TypeError, ValueError):  # the HTTP edge checks each event; an embedded caller may not
        raise ValidationFailed("subscores must be signed 64-bit integers.", "subscores") from None
    return out, np.array(np.minimum(lens, 255), np.uint8)


def _take_slices(arena: np.ndarray, offs: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray | None, np.ndarray | None]:
    """The slices ``rows`` of an arena, as a new arena and offsets (None, None
    when they are all empty). Numpy only: O(rows + bytes).

    >>> m, o = _take_slices(np.frombuffer(b"ab" b"" b"cde", np.uint8), np.array([0, 2, 2, 5]), np.array([2, 0]))
    >>> m.tobytes(), o.tolist()
    (b'cdeab', [0, 3, 5])
    """
    starts = offs[rows]
    lens = offs[rows + 1] - starts
    total = int(lens.sum())
    if not total:
        return None, None
    out_offs = np.zeros(len(rows) + 1, np.int64)
    np.cumsum(lens, out=out_offs[1:])
    gather = np.repeat(starts - out_offs[:-1], lens) + np.arange(total, dtype=np.int64)
    return arena[gather], out_offs


def int64_column(a) -> np.ndarray:
    """``a`` as an int64 numpy array (no copy when it already is one)."""
    return a if isinstance(a, np.ndarray) and a.dtype == np.int64 else np.asarray(a, dtype=np.int64)

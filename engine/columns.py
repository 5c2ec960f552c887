"""Score batches as columns: the shape every hot path exchanges.

A batch of score events for one board travels as one :class:`ScoreColumns`
record (ids as lists of str, numbers as int64 numpy arrays), never as one
Python object per event. :class:`BatchResult` is the answer: one outcome
code (``engine.records.CODE``) and one board version per event.

>>> from engine.model import ScoreEvent
>>> cols = ScoreColumns.from_events([ScoreEvent("b", "e1", "p1", 5, 1, 2)])
>>> cols.board_id, cols.event_ids, int(cols.values[0]), len(cols)
('b', ['e1'], 5, 1)
>>> cols.events()[0] == ScoreEvent("b", "e1", "p1", 5, 1, 2)
True
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

import numpy as np

from engine.model import ScoreEvent


class ScoreColumns(NamedTuple):
    """Score events of one board, in arrival (log) order."""

    board_id: str
    event_ids: list[str]
    player_ids: list[str]
    values: np.ndarray  # int64
    achieved: np.ndarray  # int64, epoch ms
    submitted: np.ndarray  # int64, epoch ms

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
        return cls(board_id, ids, pids, np.ascontiguousarray(nums[:, 0]), np.ascontiguousarray(nums[:, 1]),
                   np.ascontiguousarray(nums[:, 2]))

    def events(self) -> list[ScoreEvent]:
        """Back to one record per event (tests, cold paths)."""
        b = self.board_id
        return [ScoreEvent(b, e, p, v, a, s) for e, p, v, a, s in zip(
            self.event_ids, self.player_ids, self.values.tolist(), self.achieved.tolist(), self.submitted.tolist())]

    def take(self, rows: np.ndarray) -> "ScoreColumns":
        """The sub-batch of the given row numbers, in that order."""
        idx = rows.tolist()
        return ScoreColumns(self.board_id, [self.event_ids[i] for i in idx], [self.player_ids[i] for i in idx],
                            self.values[rows], self.achieved[rows], self.submitted[rows])


class BatchResult(NamedTuple):
    """Per event of a batch: the outcome code and the board version after it."""

    codes: np.ndarray  # uint8, engine.records.CODE values
    versions: np.ndarray  # int64


def int64_column(a) -> np.ndarray:
    """``a`` as an int64 numpy array (no copy when it already is one)."""
    return a if isinstance(a, np.ndarray) and a.dtype == np.int64 else np.asarray(a, dtype=np.int64)

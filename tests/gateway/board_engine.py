"""A test-only EngineClient over in-process :class:`engine.board.Board` objects.

Used until ``engine.service.LocalService`` exists (then conftest prefers the
real one). It follows the protocol of ``engine/client.py``: async methods,
commit listeners called on the loop with the deltas each batch produced.
"""

from __future__ import annotations

from typing import Sequence

from engine.board import Board
from engine.errors import BoardExists, BoardNotFound
from engine.model import (
    BoardSpec,
    BoardState,
    Invalidation,
    Outcome,
    EventResult,
    QuarantineDecision,
    ScoreEvent,
)


class BoardEngine:
    default_shards = 1

    def __init__(self, delta_retention: int = 10_000):
        self.boards: dict[str, Board] = {}
        self.listeners: list = []
        self.delta_retention = delta_retention
        self.is_ready = True
        self.closed = False
        self.submitted = 0

    def _b(self, board_id: str) -> Board:
        b = self.boards.get(board_id)
        if b is None:
            raise BoardNotFound(f"No board {board_id!r}.", "board_id")
        return b

    def _emit(self, board: Board, before: int) -> None:
        if board.version == before:
            return
        deltas = board.changes_since(before).deltas
        for fn in list(self.listeners):
            fn(board.spec.board_id, deltas)

    async def create_board(self, spec: BoardSpec):
        if spec.board_id in self.boards:
            raise BoardExists(f"Board {spec.board_id!r} exists.", "board_id")
        self.boards[spec.board_id] = Board(spec, delta_retention=self.delta_retention)
        return self.boards[spec.board_id].info()

    async def list_boards(self):
        return [b.info() for b in self.boards.values()]

    async def board(self, board_id):
        return self._b(board_id).info()

    async def set_state(self, board_id, state: BoardState):
        return self._b(board_id).set_state(state)

    async def submit(self, events: Sequence[ScoreEvent]):
        out = []
        self.submitted += len(events)
        touched: dict[str, int] = {}
        for ev in events:
            b = self.boards.get(ev.board_id)
            if b is None:
                out.append(EventResult(ev.event_id, Outcome.REJECTED_UNKNOWN_SEASON, 0))
                continue
            touched.setdefault(ev.board_id, b.version)
            out.append(b.apply(ev))
        for board_id, before in touched.items():
            self._emit(self.boards[board_id], before)
        return out

    async def top(self, board_id, offset, limit, at_version=None):
        return self._b(board_id).top(offset, limit, at_version)

    async def player(self, board_id, player_id):
        return self._b(board_id).player(player_id)

    async def approximate_player(self, board_id, player_id):
        return self._b(board_id).approximate_player(player_id)

    async def around(self, board_id, player_id, radius):
        return self._b(board_id).around(player_id, radius)

    async def ranked_subset(self, board_id, player_ids):
        return self._b(board_id).ranked_subset(player_ids)

    async def changes(self, board_id, since_version):
        return self._b(board_id).changes_since(since_version)

    async def quarantine(self, board_id):
        return self._b(board_id).quarantine()

    async def decide(self, d: QuarantineDecision):
        b = self._b(d.board_id)
        before = b.version
        r = b.decide(d.event_id, d.decision)
        self._emit(b, before)
        return r

    async def invalidate(self, inv: Invalidation):
        b = self._b(inv.board_id)
        before = b.version
        r = b.invalidate(inv.event_id)
        self._emit(b, before)
        return r

    async def history(self, board_id, player_id):
        return self._b(board_id).history(player_id)

    async def checksum(self, board_id):
        return self._b(board_id).checksum()

    def subscribe(self, listener):
        self.listeners.append(listener)
        return lambda: self.listeners.remove(listener) if listener in self.listeners else None

    def stats(self):
        return {
            "ingest_queue_depth": 0,
            "log_fsync_seconds": [0.001, 0.002],
            "ingest_to_rank_lag_seconds": 0.0005,
            "shard_rows": {bid: {"0": b.info().size} for bid, b in self.boards.items()},
        }

    async def ready(self):
        return self.is_ready

    async def close(self):
        self.closed = True

"""``flowrank demo``: the Arena Clash board of the design documents, in-process.

Loads the five seed players, then prints the top, a rank, an around-window
and a friends view, straight from :class:`engine.core.board.Board` (no Ray, no HTTP).
"""

from __future__ import annotations

from engine.core.board import Board
from engine.core.model import BoardSpec, Policy, ScoreEvent
from engine.core.timefmt import format_timestamp, parse_timestamp

BOARD = "arena-clash:solo:S7:global"
SEED = [
    ("evt-ava-1", "p-ava", 9800, "2026-11-01T09:58:00Z"),
    ("evt-ben-1", "p-ben", 9500, "2026-11-01T10:01:00Z"),
    ("evt-chloe-1", "p-chloe", 9500, "2026-11-01T10:02:00Z"),
    ("evt-dev-1", "p-dev", 9100, "2026-11-01T10:03:00Z"),
    ("evt-eli-1", "p-eli", 8700, "2026-11-01T10:04:00Z"),
]


def build() -> Board:
    board = Board(BoardSpec(BOARD, Policy.BEST_SCORE))
    board.apply_batch([
        ScoreEvent(BOARD, eid, pid, value, parse_timestamp(ts), parse_timestamp(ts)) for eid, pid, value, ts in SEED
    ])
    return board


def main() -> int:
    board = build()
    print(f"{BOARD} (best_score), version {board.version}")
    print("\ntop 5 (ties: earlier achieved_at first, then lower player id):")
    for e in board.top(0, 5).entries:
        print(f"  {e.rank}. {e.player_id:<8} {e.value:>6}  {format_timestamp(e.achieved_at)}")
    v = board.player("p-chloe")
    print(f"\nrank of p-chloe: {v.rank} (value {v.value})")
    print("\naround p-chloe, radius 1:")
    for e in board.around("p-chloe", 1).entries:
        print(f"  {e.rank}. {e.player_id}")
    print("\nfriends of p-ava (p-ben, p-dev, p-eli), ranked locally:")
    for e in board.ranked_subset(["p-ben", "p-dev", "p-eli"]).entries:
        print(f"  {e.rank}. {e.player_id:<8} {e.value:>6}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

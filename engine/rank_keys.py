"""The router's guesses of players' rank keys, in a table of fixed size.

An exact-rank or around read sends, in the same round as the read of the
player's own row, the counts (or windows) for the key the player had when
last read; the row read then confirms the guess, and a wrong or missing guess
costs a second round, never a wrong answer (docs/http.md, "The hot path").
So the table may forget players and even confuse them: it is direct-mapped
by a 64-bit hash of (board, player), three int64 columns sized once at
creation. No Python object per player, and its memory does not grow as more
players are read (an ``OrderedDict`` LRU took ~430 B per player and filled
for the whole of the soak run, docs/performance.md).

>>> keys = RankKeyCache(4)
>>> keys.put("b", "ann", [10, 5, "ann"]); keys.get("b", "ann"), keys.get("b", "ben")
([10, 5, 'ann'], None)
>>> keys.forget("b", "ann"); keys.get("b", "ann") is None
True
"""

from __future__ import annotations

import numpy as np
import xxhash

_INT64 = (-(1 << 63), (1 << 63) - 1)


class RankKeyCache:
    """``slots`` (rounded up to a power of two) guesses; a put evicts whatever
    held its slot."""

    def __init__(self, slots: int) -> None:
        size = 1 << max(0, (max(1, slots) - 1).bit_length())
        self.mask = size - 1
        self.tags = np.zeros(size, np.uint64)  # hash | 1 of the (board, player) held; 0 empty
        self.primary = np.zeros(size, np.int64)
        self.secondary = np.zeros(size, np.int64)

    def _where(self, board_id: str, player_id: str) -> tuple[int, int]:
        h = xxhash.xxh3_64_intdigest(board_id.encode() + b"\0" + player_id.encode("utf-8", "surrogatepass")) | 1
        return h & self.mask, h

    def get(self, board_id: str, player_id: str) -> list | None:
        """The last key remembered for the player (``[primary, secondary,
        player_id]``, as the shards compare keys), or None."""
        slot, tag = self._where(board_id, player_id)
        if int(self.tags[slot]) != tag:
            return None
        return [int(self.primary[slot]), int(self.secondary[slot]), player_id]

    def put(self, board_id: str, player_id: str, key: list | None) -> None:
        """Remember ``key`` (None: forget); a key that is not two int64 and
        this player's id is not kept."""
        if key is None or len(key) != 3:  # a board with subscores: longer keys are not kept (a second round)
            self.forget(board_id, player_id)
            return
        a, b, pid = key
        slot, tag = self._where(board_id, player_id)
        if pid != player_id or not (_INT64[0] <= a <= _INT64[1] and _INT64[0] <= b <= _INT64[1]):
            if int(self.tags[slot]) == tag:
                self.tags[slot] = 0
            return
        self.tags[slot], self.primary[slot], self.secondary[slot] = tag, a, b

    def forget(self, board_id: str, player_id: str) -> None:
        slot, tag = self._where(board_id, player_id)
        if int(self.tags[slot]) == tag:
            self.tags[slot] = 0

    @property
    def nbytes(self) -> int:
        return self.tags.nbytes + self.primary.nbytes + self.secondary.nbytes

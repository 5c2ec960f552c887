"""The router's guesses of players' rank keys, in a table of fixed size.

An exact-rank or around read sends, in the same round as the read of the
player's own row, the counts (or windows) for the key the player had when
last read; the row read then confirms the guess, and a wrong or missing guess
costs a second round, never a wrong answer (docs/http.md, "The hot path").
So the table may forget players and even confuse them: it is direct-mapped
by a 64-bit hash of (board, player) (XXH3-128 of the player id seeded by the
board, low 64 bits), three int64 columns sized once at creation. Writes fill
it too (:meth:`RankKeyCache.put_many`, from every acknowledged change's new
key), so a player's first rank read after a write takes one round. No Python object per player, and its memory does not grow as more
players are read (an ``OrderedDict`` LRU took ~430 B per player and filled
for the whole of the soak run, docs/performance.md).

>>> keys = RankKeyCache(4)
>>> keys.put("b", "ann", [10, 5, "ann"]); keys.get("b", "ann"), keys.get("b", "ben")
([10, 5, 'ann'], None)
>>> keys.forget("b", "ann"); keys.get("b", "ann") is None
True
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import xxhash

from engine.core.players import encode_ids
from engine.core.xxh3 import MAX_SHORT, xxh3_128_many

_INT64 = (-(1 << 63), (1 << 63) - 1)


def _board_seed(board_id: str) -> int:
    return xxhash.xxh3_64_intdigest(board_id.encode("utf-8", "surrogatepass"))


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
        raw = player_id.encode("utf-8", "surrogatepass")
        h = (xxhash.xxh3_128_intdigest(raw, _board_seed(board_id)) & 0xFFFFFFFFFFFFFFFF) | 1
        return h & self.mask, h

    def put_many(self, board_id: str, player_ids: Sequence[str], primary: np.ndarray, secondary: np.ndarray) -> None:
        """``put`` of many players' keys ``[primary[i], secondary[i], player_ids[i]]``
        in a few numpy passes (the ids hashed in one numba pass): where a
        player or a slot comes more than once, the last one stays. The
        caller leaves out keys that are not two int64. O(k)."""
        k = len(player_ids)
        if not k:
            return
        buf, offs = encode_ids(player_ids)
        seed = _board_seed(board_id)
        lo, _, long = xxh3_128_many(buf, offs, seed)
        if long:
            for x in np.flatnonzero(np.diff(offs) > MAX_SHORT).tolist():
                lo[x] = xxhash.xxh3_128_intdigest(buf[offs[x]:offs[x + 1]].tobytes(), seed) & 0xFFFFFFFFFFFFFFFF
        tags = lo | np.uint64(1)
        slots = (tags & np.uint64(self.mask)).astype(np.int64)
        last = k - 1 - np.unique(slots[::-1], return_index=True)[1]  # the last put to each slot
        fits = np.asarray(primary)[last], np.asarray(secondary)[last]
        self.tags[slots[last]] = tags[last]
        self.primary[slots[last]], self.secondary[slots[last]] = fits

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

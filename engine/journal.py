"""A partition's event journal as columns: every event it saw, in order.

One row per event that reached the partition (applied, guard-rejected,
decided before apply, invalidation and decision records): the player's
index, kind, value, timestamps, outcome code and the event id's bytes in
one arena. ``owner`` is an open-addressing table (int64 slots, at most
half full) from an event id to the journal row of the event the
comparator saw, which answers invalidations and redeliveries older than
the board's dedup window. About ``40 + len(event id)`` bytes per event,
against ~320 for the per-event Python tuples and dicts it replaces.

It still grows with events; issue 10 item 4 moves it to an on-disk index
of the log.
"""

from __future__ import annotations

import numba
import numpy as np

from engine.players import decode_id, hash_bytes, same_bytes

KIND_SCORE, KIND_INVALIDATION, KIND_DECISION = 0, 1, 2
KIND_NAMES = ("score", "invalidation", "decision")
# journal-only outcome codes (records.CODE covers Outcome, below 100)
INVALIDATED, ALREADY_INVALIDATED, REJECTED = 101, 102, 103
AUDIT_NAMES = {INVALIDATED: "INVALIDATED", ALREADY_INVALIDATED: "ALREADY_INVALIDATED", REJECTED: "REJECTED"}


@numba.njit(cache=True)
def owner_find(slots, j_eoffs, j_earena, buf, s0, s1):
    """Journal row of the owned event whose id is ``buf[s0:s1]``, or -1."""
    mask = len(slots) - 1
    pos = np.int64(hash_bytes(buf, s0, s1) & np.uint64(mask))
    while True:
        r = slots[pos]
        if r < 0:
            return -1
        if same_bytes(j_earena, j_eoffs[r], j_eoffs[r + 1], buf, s0, s1):
            return r
        pos = (pos + 1) & mask


@numba.njit(cache=True)
def owner_add(slots, j_eoffs, j_earena, r):
    mask = len(slots) - 1
    pos = np.int64(hash_bytes(j_earena, j_eoffs[r], j_eoffs[r + 1]) & np.uint64(mask))
    while slots[pos] >= 0:
        pos = (pos + 1) & mask
    slots[pos] = r


@numba.njit(cache=True)
def _rehash_owned(slots, j_eoffs, j_earena, owned_rows):
    slots[:] = -1
    for r in owned_rows:
        owner_add(slots, j_eoffs, j_earena, r)


class Journal:
    """Columns of a partition's events; see the module docstring."""

    def __init__(self) -> None:
        cap = 64
        self.n = 0
        self.owned = 0
        self.pid = np.zeros(cap, np.int32)
        self.kind = np.zeros(cap, np.uint8)
        self.out = np.zeros(cap, np.uint8)
        self.inv = np.zeros(cap, np.uint8)  # 1: this event was invalidated
        self.val = np.zeros(cap, np.int64)
        self.ach = np.zeros(cap, np.int64)
        self.sub = np.zeros(cap, np.int64)
        self.eoffs = np.zeros(cap + 1, np.int64)
        self.earena = np.zeros(1024, np.uint8)
        self.slots = np.full(128, -1, np.int64)

    def __len__(self) -> int:
        return self.n

    def reserve(self, k: int, nbytes: int) -> None:
        """Room for ``k`` more rows (all possibly owned) with ``nbytes`` of ids."""
        n = self.n
        if n + k > len(self.pid):
            size = len(self.pid)
            while n + k > size:
                size *= 2
            for name in ("pid", "kind", "out", "inv", "val", "ach", "sub"):
                setattr(self, name, _resized(getattr(self, name), size))
            self.eoffs = _resized(self.eoffs, size + 1)
        if self.eoffs[n] + nbytes > len(self.earena):
            size = len(self.earena)
            while self.eoffs[n] + nbytes > size:
                size *= 2
            self.earena = _resized(self.earena, size)
        if 2 * (self.owned + k) > len(self.slots):
            size = len(self.slots)
            while 2 * (self.owned + k) > size:
                size *= 2
            rows = self.owned_rows()
            self.slots = np.empty(size, np.int64)
            _rehash_owned(self.slots, self.eoffs, self.earena, rows)

    def owned_rows(self) -> np.ndarray:
        return self.slots[self.slots >= 0]

    def find(self, buf: np.ndarray, boffs: np.ndarray) -> int:
        return int(owner_find(self.slots, self.eoffs, self.earena, buf, boffs[0], boffs[1]))

    def event_id(self, r: int) -> str:
        return decode_id(self.earena[self.eoffs[r]:self.eoffs[r + 1]].tobytes())

    def rows_of(self, player: int) -> np.ndarray:
        """Journal rows of one player, in order. O(events) vectorised."""
        return np.flatnonzero(self.pid[: self.n] == player)

    def nbytes(self) -> int:
        n = self.n
        return 36 * n + 8 * (n + 1) + int(self.eoffs[n]) + self.slots.nbytes

    def to_state(self) -> dict:
        n = self.n
        cols = {name: getattr(self, name)[:n].tobytes() for name in ("pid", "kind", "out", "inv", "val", "ach", "sub")}
        cols["eoffs"] = self.eoffs[: n + 1].tobytes()
        cols["earena"] = self.earena[: self.eoffs[n]].tobytes()
        cols["owner"] = self.slots.tobytes()  # positions depend only on the id bytes and the size
        cols["owned"] = self.owned
        return cols

    @classmethod
    def from_state(cls, state: dict) -> "Journal":
        j = cls()
        eoffs = np.frombuffer(state["eoffs"], np.int64)
        n = len(eoffs) - 1
        j.reserve(n, len(state["earena"]))
        for name, dtype in (("pid", np.int32), ("kind", np.uint8), ("out", np.uint8), ("inv", np.uint8),
                            ("val", np.int64), ("ach", np.int64), ("sub", np.int64)):
            getattr(j, name)[:n] = np.frombuffer(state[name], dtype)
        j.eoffs[: n + 1] = eoffs
        j.earena[: eoffs[n]] = np.frombuffer(state["earena"], np.uint8)
        j.n = n
        if "owner" in state:
            j.slots = np.frombuffer(state["owner"], np.int64).copy()
            j.owned = state["owned"]
        return j

    def rebuild_owner(self, owned_mask: np.ndarray) -> None:
        rows = np.flatnonzero(owned_mask[: self.n]).astype(np.int64)
        self.owned = len(rows)
        size = 128
        while 2 * self.owned > size:
            size *= 2
        self.slots = np.empty(size, np.int64)
        _rehash_owned(self.slots, self.eoffs, self.earena, rows)


def _resized(a: np.ndarray, size: int) -> np.ndarray:
    out = np.zeros(size, a.dtype)
    out[: min(len(a), size)] = a[:size]
    return out

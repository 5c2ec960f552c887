"""Interned player ids of one board: every player id becomes a dense int32.

A :class:`PlayerTable` holds each id once, as UTF-8 bytes in one arena
(``arena[offs[i]:offs[i + 1]]`` is player ``i``), found through an
open-addressing table of int32 slots kept at most half full. About
``len(id) + 16`` bytes per player and no Python object per player.

UTF-8 byte order is code-point order (surrogates passed through keep it),
so comparing the stored bytes settles exact player-id ties the way the API's
comparator orders ids (:func:`id_less`).

A player can be *scrubbed* (forgotten, issue 28): :meth:`PlayerTable.scrub`
overwrites the id's bytes with as many zero bytes (every offset stays valid)
and takes the index out of the slot table, so it is unreachable: ``lookup``
of the old id answers -1 and ``intern`` gives it a new index. The index
itself stays allocated (columns keyed by it keep their shape) and is listed in
``gone`` so a rehash (growth, :meth:`PlayerTable.from_state`) leaves it out.

>>> t = PlayerTable()
>>> t.intern(["p-ava", "p-ben", "p-ava"]).tolist()
[0, 1, 0]
>>> t.lookup(["p-ben", "nobody"]).tolist(), t.id_of(1), len(t)
([1, -1], 'p-ben', 2)
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

import numba
import numpy as np

_FNV_OFFSET = np.uint64(0xCBF29CE484222325)
_FNV_PRIME = np.uint64(0x100000001B3)


@numba.njit(cache=True, inline="always")
def hash_bytes(buf, start, end):
    """FNV-1a over ``buf[start:end]``, finished with murmur3's fmix64."""
    h = np.uint64(0xCBF29CE484222325)
    for k in range(start, end):
        h = (h ^ np.uint64(buf[k])) * np.uint64(0x100000001B3)
    h ^= h >> np.uint64(33)
    h *= np.uint64(0xFF51AFD7ED558CCD)
    h ^= h >> np.uint64(33)
    h *= np.uint64(0xC4CEB9FE1A85EC53)
    h ^= h >> np.uint64(33)
    return h


@numba.njit(cache=True, inline="always")
def same_bytes(a, a0, a1, b, b0, b1):
    if a1 - a0 != b1 - b0:
        return False
    for k in range(a1 - a0):
        if a[a0 + k] != b[b0 + k]:
            return False
    return True


@numba.njit(cache=True, inline="always")
def id_less(arena, offs, i, j):
    """Player ``i``'s id sorts strictly before player ``j``'s (code-point order)."""
    a0, a1, b0, b1 = offs[i], offs[i + 1], offs[j], offs[j + 1]
    la, lb = a1 - a0, b1 - b0
    m = la if la < lb else lb
    for k in range(m):
        x, y = arena[a0 + k], arena[b0 + k]
        if x != y:
            return x < y
    return la < lb


@numba.njit(cache=True, nogil=True)  # nogil: a rank mirror is built on a worker thread (engine.core.rank_mirror)
def _intern(buf, boffs, arena, offs, n, slots, create, out):
    """Find (or add, when ``create``) each id of ``buf``; returns the new count.
    The caller has made room for every id to be new.

    In stages over the whole batch: hash every id, read every id's first
    slot, then the offsets of the players found there, then compare bytes.
    Each stage's loads are independent of each other, so the CPU overlaps
    their cache misses (one table of a million players is mostly out of
    cache) instead of waiting for each id's chain of misses in turn. An id
    not settled by its first slot (new, or its slot taken by another id)
    takes the plain probe afterwards, in batch order, so new players get
    their indexes in order of first appearance."""
    mask = len(slots) - 1
    k = len(boffs) - 1
    pos = np.empty(k, np.int64)
    cand = np.empty(k, np.int32)
    for i in range(k):
        pos[i] = np.int64(hash_bytes(buf, boffs[i], boffs[i + 1]) & np.uint64(mask))
    for i in range(k):
        cand[i] = slots[pos[i]]
    c0 = np.empty(k, np.int64)
    c1 = np.empty(k, np.int64)
    for i in range(k):
        c = cand[i]
        if c >= 0:
            c0[i], c1[i] = offs[c], offs[c + 1]
        else:
            c0[i], c1[i] = 0, -1
    for i in range(k):
        if c1[i] >= 0 and same_bytes(arena, c0[i], c1[i], buf, boffs[i], boffs[i + 1]):
            out[i] = cand[i]
        else:
            out[i] = -2  # not settled by its first slot
    used = offs[n]
    for i in range(k):
        if out[i] != -2:
            continue
        s0, s1 = boffs[i], boffs[i + 1]
        p = pos[i]
        while True:
            cur = slots[p]
            if cur < 0:
                if create:
                    for q in range(s1 - s0):
                        arena[used + q] = buf[s0 + q]
                    used += s1 - s0
                    offs[n + 1] = used
                    slots[p] = n
                    out[i] = n
                    n += 1
                else:
                    out[i] = -1
                break
            if same_bytes(arena, offs[cur], offs[cur + 1], buf, s0, s1):
                out[i] = cur
                break
            p = (p + 1) & mask
    return n


@numba.njit(cache=True)
def _rehash(arena, offs, n, slots, gone):
    """Link players ``0 .. n-1`` but the scrubbed ones (``gone``, sorted)."""
    mask = len(slots) - 1
    slots[:] = -1
    g = 0
    for i in range(n):
        while g < len(gone) and gone[g] < i:
            g += 1
        if g < len(gone) and gone[g] == i:
            continue
        pos = np.int64(hash_bytes(arena, offs[i], offs[i + 1]) & np.uint64(mask))
        while slots[pos] >= 0:
            pos = (pos + 1) & mask
        slots[pos] = i


@numba.njit(cache=True)
def _unlink(arena, offs, slots, idx):
    """Take players ``idx`` out of the slot table, found by their current
    bytes (a player not linked, one scrubbed before, is skipped). Deletion by
    backward shift: each later entry of the probe run moves into the hole
    unless its home slot lies cyclically after the hole, so every other id's
    probe still reaches it and no tombstone is left for ``_intern`` to skip.
    Returns how many were unlinked. O(probe run) per player."""
    mask = np.int64(len(slots) - 1)
    done = 0
    for i in idx:
        p = np.int64(hash_bytes(arena, offs[i], offs[i + 1]) & np.uint64(mask))
        while slots[p] >= 0 and slots[p] != i:
            p = (p + 1) & mask
        if slots[p] < 0:
            continue
        hole, q = p, p
        while True:
            q = (q + 1) & mask
            c = slots[q]
            if c < 0:
                break
            home = np.int64(hash_bytes(arena, offs[c], offs[c + 1]) & np.uint64(mask))
            if ((q - home) & mask) >= ((q - hole) & mask):  # home at or before the hole: it may move back
                slots[hole] = c
                hole = q
        slots[hole] = -1
        done += 1
    return done


@numba.njit(cache=True)
def _zero(arena, offs, idx):
    for i in idx:
        arena[offs[i]:offs[i + 1]] = 0


@numba.njit(cache=True)
def _gather(arena, starts, lens, bounds, out):
    # a byte loop, not a slice assignment: numba's generic setitem took 2.7 s to compile, this
    # 0.3 s, and ids are a few dozen bytes (as fast: benchmarks in docs/performance.md, "Stop 32")
    for k in range(len(starts)):
        s, b = starts[k], bounds[k]
        for j in range(lens[k]):
            out[b + j] = arena[s + j]


def gather(arena: np.ndarray, offs: np.ndarray, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Items ``idx`` of a byte arena with offsets, as a new arena and its offsets. O(bytes)."""
    starts = offs[idx]
    lens = offs[idx + 1] - starts
    bounds = np.zeros(len(idx) + 1, np.int64)
    np.cumsum(lens, out=bounds[1:])
    out = np.empty(int(bounds[-1]), np.uint8)
    if len(idx):
        _gather(arena, starts, lens, bounds, out)
    return out, bounds


def encode_ids(ids: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """UTF-8 bytes of many ids in one buffer plus their int64 offsets."""
    n = len(ids)
    if n == 1:  # one id (a read): no join, no scan (a lone surrogate kept, as below)
        one = ids[0].encode("utf-8", "surrogatepass")
        return np.frombuffer(bytearray(one), dtype=np.uint8), np.array([0, len(one)], dtype=np.int64)
    joined = "\x00".join(ids)  # one pass over the ids' str objects (cold in cache on the write path)
    if joined.isascii():  # one byte per character
        raw = np.frombuffer(joined.encode("ascii"), dtype=np.uint8)
        seps = np.flatnonzero(raw == 0)
        if len(seps) == max(0, n - 1):  # no id holds a NUL: the separators give the lengths
            boffs = np.zeros(n + 1, dtype=np.int64)
            if n:
                boffs[1:-1] = seps - np.arange(n - 1)
                boffs[-1] = len(raw) - (n - 1)
            return (raw[raw != 0] if n > 1 else raw.copy()), boffs
        boffs = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.fromiter(map(len, ids), dtype=np.int64, count=n), out=boffs[1:])
        return np.frombuffer(bytearray("".join(ids).encode("ascii")), dtype=np.uint8), boffs
    try:
        enc = [s.encode() for s in ids]
    except UnicodeEncodeError:  # a lone surrogate: keep it, it still orders by code point
        enc = [s.encode("utf-8", "surrogatepass") for s in ids]
    n = len(enc)
    boffs = np.zeros(n + 1, dtype=np.int64)
    if n:
        np.cumsum(np.fromiter(map(len, enc), dtype=np.int64, count=n), out=boffs[1:])
    # a writable buffer: numba specialises readonly arrays separately
    buf = np.frombuffer(bytearray(b"".join(enc)), dtype=np.uint8)
    return buf, boffs


class BatchIds(NamedTuple):
    """A batch's player and event ids as UTF-8 arenas with offsets
    (:func:`encode_ids`), encoded once for every kernel that reads them
    (content fingerprints, dedup words, interning, the journal)."""

    players: np.ndarray  # uint8
    player_offs: np.ndarray  # int64, len + 1
    events: np.ndarray  # uint8
    event_offs: np.ndarray  # int64, len + 1

    @classmethod
    def of(cls, player_ids: Sequence[str], event_ids: Sequence[str]) -> "BatchIds":
        return cls(*encode_ids(player_ids), *encode_ids(event_ids))


def ids_of(buf: np.ndarray, offs: np.ndarray) -> list[str]:
    """The ids held as one UTF-8 buffer with offsets, decoded (one str each)."""
    raw = np.asarray(buf, np.uint8).tobytes()
    b = np.asarray(offs, np.int64).tolist()
    try:
        return [raw[b[k]:b[k + 1]].decode() for k in range(len(b) - 1)]
    except UnicodeDecodeError:  # a lone surrogate
        return [decode_id(raw[b[k]:b[k + 1]]) for k in range(len(b) - 1)]


def decode_id(raw: bytes) -> str:
    return raw.decode("utf-8", "surrogatepass")


class PlayerTable:
    """Player id <-> dense int32 index, for one board partition."""

    def __init__(self) -> None:
        self.n = 0
        self.arena = np.zeros(1024, dtype=np.uint8)
        self.offs = np.zeros(65, dtype=np.int64)
        self.slots = np.full(128, -1, dtype=np.int32)
        self.gone = np.zeros(0, dtype=np.int64)  # scrubbed players, sorted

    def __len__(self) -> int:
        return self.n

    def reserve(self, k: int, nbytes: int) -> None:
        """Room for ``k`` new players of ``nbytes`` in all, made now (a caller that knows how many are
        coming grows the table once, not at every doubling)."""
        self._reserve(k, nbytes)

    def _reserve(self, k: int, nbytes: int) -> None:
        """Room for ``k`` new players of ``nbytes`` (slot table at most half full)."""
        self.reserve_scratch(k, nbytes)
        n = self.n
        if 2 * (n + k) > len(self.slots):
            size = len(self.slots)
            while 2 * (n + k) > size:
                size *= 2
            self.slots = np.empty(size, dtype=np.int32)
            _rehash(self.arena, self.offs, n, self.slots, self.gone)

    def reserve_scratch(self, k: int, nbytes: int) -> None:
        """Room for ``k`` ids of ``nbytes`` after the players, not interned
        (query keys compare by bytes through indexes ``n .. n + k - 1``)."""
        n = self.n
        need = int(self.offs[n]) + nbytes
        if need > len(self.arena):
            self.arena = _grown(self.arena, need)
        if n + k + 1 > len(self.offs):
            self.offs = _grown(self.offs, n + k + 1)

    def intern_encoded(self, buf: np.ndarray, boffs: np.ndarray, create: bool = True) -> np.ndarray:
        out = np.empty(len(boffs) - 1, dtype=np.int32)
        if create:
            self._reserve(len(out), len(buf))
        self.n = int(_intern(buf, boffs, self.arena, self.offs, self.n, self.slots, create, out))
        return out

    def intern(self, ids: Sequence[str]) -> np.ndarray:
        """Indexes of ``ids``, adding the unknown ones. O(total bytes)."""
        return self.intern_encoded(*encode_ids(ids))

    def lookup(self, ids: Sequence[str]) -> np.ndarray:
        """Indexes of ``ids``; -1 for an id the table has never seen."""
        return self.intern_encoded(*encode_ids(ids), create=False)

    def scrub(self, idx: np.ndarray) -> None:
        """Forget players ``idx``: their id bytes become as many zero bytes
        and their indexes leave the slot table, so ``lookup`` of the old ids
        answers -1 and ``intern`` of one gives a new index; ``id_of`` of a
        scrubbed index answers as many NUL characters. Idempotent (an index
        scrubbed before is skipped). Callers take the player out of anything
        ordered by id bytes (the rank index) first: their bytes change.
        O(their bytes + probe runs)."""
        idx = np.unique(np.asarray(idx, dtype=np.int64))
        if len(idx) and (idx[0] < 0 or idx[-1] >= self.n):
            raise ValueError(f"players {idx[0]}..{idx[-1]}: the table holds {self.n}")
        idx = np.setdiff1d(idx, self.gone, assume_unique=True)
        if not len(idx):
            return
        _unlink(self.arena, self.offs, self.slots, idx)
        _zero(self.arena, self.offs, idx)
        self.gone = np.union1d(self.gone, idx)

    def id_of(self, i: int) -> str:
        return decode_id(self.arena[self.offs[i]:self.offs[i + 1]].tobytes())

    def names(self, idx: np.ndarray) -> "InternedNames":
        """The ids of players ``idx`` as a sequence that decodes them only when read."""
        return InternedNames(self, idx)

    def bytes_of(self, idx) -> tuple[np.ndarray, np.ndarray]:
        """The UTF-8 bytes of many players' ids in one buffer plus their int64
        offsets (``len(idx) + 1``): one gather, no Python object per id."""
        idx = np.asarray(idx, dtype=np.int64)
        return gather(self.arena, self.offs, idx)

    def ids_of(self, idx) -> list[str]:
        """Ids of many players: one gather of their bytes, then one decode each."""
        idx = np.asarray(idx, dtype=np.int64)
        if not len(idx):
            return []
        return ids_of(*gather(self.arena, self.offs, idx))

    def nbytes(self) -> int:
        """Bytes in use (arena and offsets as filled, the whole slot table)."""
        return int(self.offs[self.n]) + 8 * (self.n + 1) + self.slots.nbytes + self.gone.nbytes

    # --------------------------------------------------------------- snapshots

    def to_state(self) -> dict:
        """``gone`` (int64 bytes) only once a player was scrubbed: a table that
        never was has the state it always had."""
        n = self.n
        state = {"arena": self.arena[: self.offs[n]].tobytes(), "offs": self.offs[: n + 1].tobytes()}
        if len(self.gone):
            state["gone"] = self.gone.astype("<i8").tobytes()
        return state

    @classmethod
    def from_state(cls, state: dict) -> "PlayerTable":
        t = cls()
        offs = np.frombuffer(state["offs"], dtype=np.int64).copy()
        arena = np.frombuffer(state["arena"], dtype=np.uint8).copy()
        t.n = len(offs) - 1
        t.offs = _grown(offs, len(offs) + 64)
        t.arena = _grown(arena, len(arena) + 1024)
        t.gone = np.frombuffer(state.get("gone", b""), dtype="<i8").astype(np.int64)
        size = 128
        while 2 * t.n > size:
            size *= 2
        t.slots = np.empty(size, dtype=np.int32)
        _rehash(t.arena, t.offs, t.n, t.slots, t.gone)
        return t

    def _check(self) -> None:
        """O(n): every live (not scrubbed) player sits in exactly one slot and
        is found again from its id; scrubbed players sit in none and hold
        only zero bytes."""
        n = self.n
        assert 2 * n <= len(self.slots)
        assert np.all(np.diff(self.offs[: n + 1]) >= 0)
        gone = self.gone
        assert (np.diff(gone) > 0).all() and (not len(gone) or (gone[0] >= 0 and gone[-1] < n))
        live = np.setdiff1d(np.arange(n, dtype=np.int64), gone)
        seen = np.sort(self.slots[self.slots >= 0])
        assert seen.tolist() == live.tolist(), "every live player sits in exactly one slot, a scrubbed one in none"
        ids = self.ids_of(live)
        assert len(set(ids)) == len(live)
        assert self.lookup(ids).tolist() == live.tolist()
        raw, _ = self.bytes_of(gone)
        assert not raw.any(), "a scrubbed id holds zero bytes only"


def _grown(a: np.ndarray, need: int) -> np.ndarray:
    size = max(len(a), 1)
    while size < need:
        size += size // 4 + 64  # 1.25x
    out = np.zeros(size, dtype=a.dtype)
    out[: len(a)] = a
    return out


class InternedNames:
    """Player ids held as indexes into a :class:`PlayerTable`, decoded when
    read: what a ring of changes keeps per changed row (4 bytes, and no
    touch of each id's ``str`` object on the write path, where a batch's ids
    are cold in cache)."""

    __slots__ = ("table", "idx")

    def __init__(self, table: PlayerTable, idx: np.ndarray) -> None:
        self.table, self.idx = table, idx

    def __len__(self) -> int:
        return len(self.idx)

    def __getitem__(self, at: slice) -> list[str]:
        id_of = self.table.id_of
        return [id_of(i) for i in self.idx[at].tolist()]

    def __iter__(self):
        return iter(self[:])

"""Per-board event-id deduplication with a content fingerprint (docs/api.md §7).

The table remembers the most recent ``retention`` event ids of a board,
each with a fingerprint of its content, so a redelivery is told apart from
a reused id carrying different content. Ids older than the retention are
forgotten; the partition's history and the monotonic guards are the
fallback for those (see :mod:`engine.core.partition`).

Nothing per id is a Python object. An id is kept as a 96-bit fingerprint of
its bytes, keyed by the board (xxh3-128 seeded with the xxh3-64 of the board
id, low 96 bits), next to a 32-bit fold of the 64-bit content fingerprint
:func:`fingerprint`. Two numpy arrays hold them:

* a FIFO ring of ``(id0, id1, id2, content)`` uint32 entries, 16 B each, in
  insertion order (the oldest id is evicted first);
* an int32 open-addressing table of ring positions, linear probing, twice
  as many slots as the ring has entries (load ≤ 0.5), 8 B per entry. Removal
  shifts the probe run back (no tombstones), so lookups stay short however
  long the table lives.

That is 24 B per remembered id once the ring is full (plus a constant),
against ≈ 96 B for the ``dict`` this replaced. Both arrays start empty and
grow by doubling up to the retention, so a board with ten events holds a
few hundred bytes, not 5,000,000 slots. At the retention the oldest id
makes room for each new one, so the table never grows past it.

What the fingerprints cost in exactness: a new id is taken for a remembered
one only on a 96-bit collision (≤ retention / 2**96 per check, ≈ 6e-23 at
5,000,000); a reused id with other content passes for a redelivery with
probability 2**-32 per conflict.

Fingerprints use xxh3 over canonical bytes, never Python's salted
``hash()``, so they survive snapshots and process restarts. A batch's ids
are hashed in one numba pass over their UTF-8 arena (:mod:`engine.core.xxh3`,
byte-identical to the ``xxhash`` package).

:attr:`DedupTable.evicted` counts the ids the retention has evicted since
the board began (kept in snapshots). While it is 0 the table holds every id
the board ever admitted, so a NEW id was never seen and the journal's search
for redeliveries older than the window can be skipped. Ids are only ever
added after their record is durable (:meth:`engine.router.registry.BoardRegistry.apply`),
so nothing is ever taken back out but by the retention. The probe and
insert kernels are compiled with numba (``cache=True``: compiled
once per machine, then loaded from ``__pycache__``).
"""

from __future__ import annotations

from enum import Enum
from typing import NamedTuple, Sequence

import numba
import numpy as np
import xxhash

from engine.core.columns import int64_column as _i64
from engine.core.players import encode_ids, hash_bytes
from engine.core.xxh3 import MAX_SHORT, xxh3_128_many

_xxh64 = xxhash.xxh3_64_intdigest
_xxh128 = xxhash.xxh3_128_intdigest
_M32 = 0xFFFFFFFF
_M64 = (1 << 64) - 1
_MIN_CAPACITY = 64
_NO_ENT = np.zeros((0, 4), np.uint32)  # an empty table for check_many's unused layers
_NO_SLOTS = np.zeros(0, np.int32)
STATE_VERSION = 1


@numba.njit(cache=True)
def _mix(h, x):
    h ^= x
    h *= np.uint64(0x9E3779B97F4A7C15)
    h ^= h >> np.uint64(29)
    h *= np.uint64(0xBF58476D1CE4E5B9)
    h ^= h >> np.uint64(32)
    return h


@numba.njit(cache=True)
def _content_kernel(pbuf, poffs, vals, achs, subs, out):
    for i in range(len(vals)):
        h = hash_bytes(pbuf, poffs[i], poffs[i + 1])
        h = _mix(h, np.uint64(vals[i]))
        h = _mix(h, np.uint64(achs[i]))
        out[i] = _mix(h, np.uint64(subs[i]))


@numba.njit(cache=True)
def _meta_kernel(mbuf, moffs, out):
    """Mix each non-empty metadata slice into its event's fingerprint (an
    event without metadata keeps the fingerprint it always had)."""
    for i in range(len(out)):
        if moffs[i + 1] > moffs[i]:
            out[i] = _mix(out[i], hash_bytes(mbuf, moffs[i], moffs[i + 1]))


@numba.njit(cache=True)
def _subs_kernel(subs, out):
    """Mix each event's subscores into its fingerprint, after a marker that
    no event without subscores mixes in (so those keep the fingerprint they
    always had, and subscores never collide with metadata by construction)."""
    for i in range(len(out)):
        h = _mix(out[i], np.uint64(0x5355425343)) ^ np.uint64(subs.shape[1])
        for c in range(subs.shape[1]):
            h = _mix(h, np.uint64(subs[i, c]))
        out[i] = h


def fingerprints(cols, player_bytes: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
    """The 64-bit content fingerprint of every event of a batch of columns:
    the player id's UTF-8 bytes, the three int64s and the metadata bytes
    (when there are any), in one numba pass (two with metadata).
    ``player_bytes``: ``encode_ids(cols.player_ids)`` when the caller has it."""
    pbuf, poffs = encode_ids(cols.player_ids) if player_bytes is None else player_bytes
    out = np.empty(len(cols.player_ids), np.uint64)
    _content_kernel(pbuf, poffs, _i64(cols.values), _i64(cols.achieved), _i64(cols.submitted), out)
    if getattr(cols, "moffs", None) is not None:
        _meta_kernel(cols.meta, cols.moffs, out)
    subs = getattr(cols, "subs", None)
    if subs is not None:
        _subs_kernel(np.ascontiguousarray(subs, np.int64), out)
    return out


def fingerprint(player_id: str, value: int, achieved_at: int, submitted_at: int, metadata: bytes = b"",
                subscores: tuple[int, ...] = ()) -> int:
    """Stable 64-bit fingerprint of one event's content (as :func:`fingerprints`);
    subscores (docs/api.md §14) count only when there are some."""
    pbuf, poffs = encode_ids([player_id])
    out = np.empty(1, np.uint64)
    _content_kernel(pbuf, poffs, np.array([value], np.int64), np.array([achieved_at], np.int64),
                    np.array([submitted_at], np.int64), out)
    if metadata:
        _meta_kernel(np.frombuffer(metadata, np.uint8), np.array([0, len(metadata)], np.int64), out)
    if subscores:
        _subs_kernel(np.array([subscores], np.int64), out)
    return int(out[0])


class Seen(Enum):
    NEW = 0
    DUPLICATE = 1
    CONFLICT = 2


_SEEN = (Seen.NEW, Seen.DUPLICATE, Seen.CONFLICT)


def _utf8(text: str) -> bytes:
    try:
        return text.encode()
    except UnicodeEncodeError:  # a lone surrogate
        return text.encode("utf-8", "surrogatepass")


def board_seed(board_id: str) -> int:
    """The xxh3-128 seed that keys a board's id fingerprints."""
    return _xxh64(_utf8(board_id))


def id_fingerprint(board_id: str, event_id: str) -> int:
    """The 96-bit identity fingerprint of ``event_id`` on ``board_id``."""
    return _xxh128(_utf8(event_id), board_seed(board_id)) & ((1 << 96) - 1)


def content_fingerprint32(fp: int) -> int:
    """The 32 bits of a :func:`fingerprint` that the table keeps (xor fold)."""
    return (fp ^ (fp >> 32)) & _M32


# ------------------------------------------------------------------ kernels
#
# ent:   (capacity, 4) uint32 ring, row = id0, id1, id2, content
# slots: (2 * capacity,) int32, a ring position or -1
# meta:  int64 [head, n]: ring position of the oldest entry, live entries
# Live entries are the n positions from head on, wrapping at capacity.
# Home slot of an id: id0 scaled onto the table (multiply-shift, any size).


@numba.njit(cache=True)
def _home(w0, size):
    return (np.int64(w0) * size) >> 32


@numba.njit(cache=True)
def _find(ent, slots, w0, w1, w2):
    """(slot, ring position) of the id, or (first empty slot, -1)."""
    size = slots.size
    if size == 0:
        return -1, -1
    i = _home(w0, size)
    while True:
        p = slots[i]
        if p < 0:
            return i, -1
        if ent[p, 0] == w0 and ent[p, 1] == w1 and ent[p, 2] == w2:
            return i, p
        i += 1
        if i == size:
            i = 0


@numba.njit(cache=True)
def _slot_of(ent, slots, p):
    """The slot that holds ring position ``p`` (it must be linked), or -1."""
    size = slots.size
    i = _home(ent[p, 0], size)
    while True:
        q = slots[i]
        if q == p:
            return i
        if q < 0:
            return -1
        i += 1
        if i == size:
            i = 0


@numba.njit(cache=True)
def _unlink(ent, slots, p):
    """Drop ring position ``p`` from the slot table, shifting its probe run
    back so that no lookup ever crosses a hole. False if it was not there."""
    size = slots.size
    i = _slot_of(ent, slots, p)
    if i < 0:
        return False
    j = i
    while True:
        j += 1
        if j == size:
            j = 0
        q = slots[j]
        if q < 0:
            break
        # q may fill the hole at i unless its home lies cyclically in (i, j]
        from_home = j - _home(ent[q, 0], size)
        if from_home < 0:
            from_home += size
        gap = j - i
        if gap < 0:
            gap += size
        if from_home >= gap:
            slots[i] = q
            i = j
    slots[i] = -1
    return True


@numba.njit(cache=True)
def _evict_oldest(ent, slots, meta):
    head = meta[0]
    if not _unlink(ent, slots, head):
        return False
    head += 1
    if head == ent.shape[0]:
        head = 0
    meta[0] = head
    meta[1] -= 1
    meta[2] += 1
    return True


@numba.njit(cache=True)
def _put(ent, slots, meta, w0, w1, w2, c, limit):
    """Set the id's content (a known id keeps its place in the ring), then
    evict the oldest id once if more than ``limit`` are held: ``dict``
    assignment followed by one ``del`` of the first key.

    1 = updated, 0 = inserted, -1 = the ring is full (grow, then retry),
    -2 = the table is corrupt.
    """
    i, p = _find(ent, slots, w0, w1, w2)
    n = meta[1]
    if p >= 0:
        ent[p, 3] = c
        if n > limit and not _evict_oldest(ent, slots, meta):
            return -2
        return 1
    if n >= limit:
        # inserting would exceed the limit by one: evicting the oldest
        # first ends in the same state (the new id is not the oldest) and
        # never needs a bigger ring
        if not _evict_oldest(ent, slots, meta):
            return -2
        n -= 1
        i, p = _find(ent, slots, w0, w1, w2)
    elif n == ent.shape[0]:
        return -1
    tail = meta[0] + n
    if tail >= ent.shape[0]:
        tail -= ent.shape[0]
    ent[tail, 0] = w0
    ent[tail, 1] = w1
    ent[tail, 2] = w2
    ent[tail, 3] = c
    slots[i] = tail
    meta[1] = n + 1
    return 0


@numba.njit(cache=True)
def _put_many(ent, slots, meta, ids, cs, limit, start):
    """``_put`` each row from ``start`` on; returns where it stopped (len =
    done), or -1 - row when the table is corrupt."""
    for t in range(start, ids.shape[0]):
        r = _put(ent, slots, meta, ids[t, 0], ids[t, 1], ids[t, 2], cs[t], limit)
        if r == -1:
            return t
        if r == -2:
            return -1 - t
    return ids.shape[0]


@numba.njit(cache=True)
def _check_many(ent, slots, ent2, slots2, ent3, slots3, ids, cs, out):
    """Seen value of each row as if each NEW row were added before the next
    (later copies of a new id in the batch are judged against the first).
    An id is looked up in the first table, then the second, then the third
    (``DedupTable.check_many(also=...)``: ids held elsewhere, e.g. the
    quarantine or a cycle's earlier batches); empty tables are skipped."""
    k = ids.shape[0]
    batch = np.full(2 * k, -1, np.int32)
    size = batch.size
    for t in range(k):
        w0 = ids[t, 0]
        w1 = ids[t, 1]
        w2 = ids[t, 2]
        _, p = _find(ent, slots, w0, w1, w2)
        if p >= 0:
            out[t] = 1 if ent[p, 3] == cs[t] else 2
            continue
        _, p = _find(ent2, slots2, w0, w1, w2)
        if p >= 0:
            out[t] = 1 if ent2[p, 3] == cs[t] else 2
            continue
        _, p = _find(ent3, slots3, w0, w1, w2)
        if p >= 0:
            out[t] = 1 if ent3[p, 3] == cs[t] else 2
            continue
        j = _home(w0, size)
        while True:
            q = batch[j]
            if q < 0:
                batch[j] = t
                out[t] = 0
                break
            if ids[q, 0] == w0 and ids[q, 1] == w1 and ids[q, 2] == w2:
                out[t] = 1 if cs[q] == cs[t] else 2
                break
            j += 1
            if j == size:
                j = 0


@numba.njit(cache=True, nogil=True)
def _link_all(ent, slots, n):
    """Link ring positions 0..n-1 into an empty slot table; the position of
    the first repeated id, or -1. Releases the GIL: a growth built ahead
    (:func:`build_grown`) links on a worker thread while the owner goes on."""
    for p in range(n):
        i, q = _find(ent, slots, ent[p, 0], ent[p, 1], ent[p, 2])
        if q >= 0:
            return p
        slots[i] = p
    return -1


@numba.njit(cache=True)
def _verify(ent, slots, meta):
    """0, or the number of the first broken invariant."""
    cap = ent.shape[0]
    head = meta[0]
    n = meta[1]
    if slots.size != 2 * cap:
        return 1
    if n < 0 or n > cap or head < 0 or (cap > 0 and head >= cap) or (cap == 0 and head != 0):
        return 2
    linked = 0
    for i in range(slots.size):
        p = slots[i]
        if p < 0:
            if p != -1:
                return 3
            continue
        linked += 1
        off = p - head
        if off < 0:
            off += cap
        if p >= cap or off >= n:
            return 4  # a slot points at a dead ring position
    if linked != n:
        return 5
    for off in range(n):
        p = head + off
        if p >= cap:
            p -= cap
        # found from its home with no hole in between, and no other entry
        # carries the same id (it would be found first)
        _, q = _find(ent, slots, ent[p, 0], ent[p, 1], ent[p, 2])
        if q != p:
            return 6
    return 0


# -------------------------------------------------------------------- table


class GrowPlan(NamedTuple):
    """A growth to build ahead: the ring's first ``n`` rows of ``entries`` (oldest
    first, head 0) in a table of ``capacity``, planned at generation ``gen``."""

    entries: np.ndarray
    n: int
    capacity: int
    gen: int


def build_grown(plan: GrowPlan) -> tuple[np.ndarray, np.ndarray] | None:
    """``(ring, slots)`` of ``plan.capacity`` holding ``plan.entries[:plan.n]`` linked
    in order; None if an id repeats. Pure and thread-safe: numpy's copies and the
    link kernel release the GIL, so a worker thread builds it while the table's
    owner goes on (:meth:`DedupTable.finish_grow`). O(n)."""
    n = plan.n
    ent = np.zeros((plan.capacity, 4), np.uint32)
    ent[:n] = plan.entries[:n]
    slots = np.full(2 * plan.capacity, -1, np.int32)
    if _link_all(ent, slots, n) >= 0:
        return None
    return ent, slots


class DedupTable:
    """Bounded map event id -> content fingerprint, evicting the oldest ids
    first; behaves as a ``dict`` in insertion order (a known id keeps its
    place when its content is set again).

    ``check``, ``remember`` and ``__contains__`` are O(1) expected (one probe
    run at load ≤ 0.5); growing the ring is O(n), amortised O(1). Memory:
    24 B per remembered id at a full ring, see the module docstring.

    >>> t = DedupTable(2, board_id="b")
    >>> fp = fingerprint("p", 1, 2, 2)
    >>> t.check("e1", fp)
    <Seen.NEW: 0>
    >>> t.remember("e1", fp); t.remember("e2", fp); t.remember("e3", fp)
    >>> ("e1" in t, len(t), t.check("e3", fingerprint("p", 9, 2, 2)))
    (False, 2, <Seen.CONFLICT: 2>)
    """

    __slots__ = ("retention", "board_id", "_seed", "_ent", "_slots", "_meta", "_gen")

    def __init__(self, retention: int, board_id: str = ""):
        if retention < 1:
            raise ValueError("dedup retention must be at least 1")
        self.retention = retention
        self.board_id = board_id
        self._seed = board_seed(board_id)
        self._ent = np.zeros((0, 4), np.uint32)
        self._slots = np.zeros(0, np.int32)
        self._meta = np.zeros(3, np.int64)  # ring head, ids held, ids evicted by the retention ever
        self._gen = 0  # moves whenever the ring is rebuilt or an id rewritten: a growth built before is stale

    # ------------------------------------------------------------ one id

    def _words(self, event_id: str) -> tuple[int, int, int]:
        try:
            data = event_id.encode()
        except UnicodeEncodeError:  # a lone surrogate
            data = event_id.encode("utf-8", "surrogatepass")
        d = _xxh128(data, self._seed)
        return d & 0xFFFFFFFF, (d >> 32) & 0xFFFFFFFF, (d >> 64) & 0xFFFFFFFF

    def check(self, event_id: str, fp: int) -> Seen:
        """NEW for an unknown id, DUPLICATE when it was remembered with the
        same content fingerprint ``fp`` (from :func:`fingerprint`), else
        CONFLICT. ``check_many`` of one id. O(1) expected; changes nothing."""
        return Seen(int(self.check_many([event_id], [fp])[0]))

    def remember(self, event_id: str, fp: int) -> None:
        """Remember the id, then evict the oldest one if more than
        ``retention`` are held. O(1) amortised."""
        self._put(event_id, fp, self.retention)

    def _put(self, event_id: str, fp: int, limit: int) -> None:
        w0, w1, w2 = self._words(event_id)
        c = (fp ^ (fp >> 32)) & 0xFFFFFFFF
        while True:
            r = _put(self._ent, self._slots, self._meta, w0, w1, w2, c, limit)
            if r >= 0:
                return
            if r == -2:
                raise AssertionError("dedup table is corrupt")
            self._grow()

    def __len__(self) -> int:
        return int(self._meta[1])

    def __contains__(self, event_id: str) -> bool:
        w0, w1, w2 = self._words(event_id)
        return bool(_find(self._ent, self._slots, w0, w1, w2)[1] >= 0)

    # ------------------------------------------------------------ batches

    def words_of(self, buf: np.ndarray, offs: np.ndarray) -> np.ndarray:
        """``words_many`` of ids given as one UTF-8 arena and offsets
        (:func:`engine.core.players.encode_ids`): xxh3-128 in one numba pass
        (:mod:`engine.core.xxh3`), ``xxhash`` for any id over 240 bytes."""
        lo, hi, long = xxh3_128_many(buf, offs, self._seed)
        if long:
            lens = np.diff(offs)
            for x in np.flatnonzero(lens > MAX_SHORT).tolist():
                d = _xxh128(buf[offs[x]:offs[x + 1]].tobytes(), self._seed)
                lo[x], hi[x] = d & _M64, d >> 64
        out = np.empty((len(lo), 3), np.uint32)
        out[:, 0] = lo & np.uint64(_M32)
        out[:, 1] = lo >> np.uint64(32)
        out[:, 2] = hi & np.uint64(_M32)
        return out

    @staticmethod
    def _fold_many(fps, k: int) -> np.ndarray:
        a = np.asarray(fps, dtype=np.uint64).reshape(-1)
        if a.size != k:
            raise ValueError(f"{k} event ids but {a.size} fingerprints")
        return ((a ^ (a >> np.uint64(32))) & np.uint64(_M32)).astype(np.uint32)

    def words_many(self, event_ids: Sequence[str], event_bytes: tuple[np.ndarray, np.ndarray] | None = None
                   ) -> np.ndarray:
        """(k, 3) uint32 identity fingerprints of many ids, the same words as
        ``_words``, to pass to ``check_many`` and ``remember_words`` so a batch is
        hashed once. ``event_bytes``: ``encode_ids(event_ids)``, when the caller has it."""
        return self.words_of(*(encode_ids(event_ids) if event_bytes is None else event_bytes))

    def check_many(self, event_ids: Sequence[str], fps, words: np.ndarray | None = None,
                   also: Sequence["DedupTable"] = ()) -> np.ndarray:
        """``check`` of each id as if every NEW one were added before the
        next: a repeated id in the batch is DUPLICATE (same content as its
        first copy) or CONFLICT. An id this table does not hold is looked up
        in the tables ``also`` (at most two, in order). Returns an int8 array
        of ``Seen`` values; changes nothing. O(k) expected."""
        k = len(event_ids) if words is None else len(words)
        cs = self._fold_many(fps, k)
        out = np.zeros(k, np.int8)
        if k:
            if len(also) > 2:
                raise ValueError("check_many looks in at most two other tables")
            rest = [(t._ent, t._slots) for t in also] + [(_NO_ENT, _NO_SLOTS)] * (2 - len(also))
            _check_many(self._ent, self._slots, *rest[0], *rest[1],
                        self.words_many(event_ids) if words is None else words, cs, out)
        return out

    def rekey(self, old: np.ndarray, new: np.ndarray) -> int:
        """Give remembered ids new identity words in place (rows of ``old`` -> rows of ``new``, (k, 3)
        uint32), keeping their ring position and content: an erasure (docs/api.md §17) turns an erased
        event's words into its keyed hash, so the ring evicts in the same order as before and the id
        itself is no longer in the table. Words not held are skipped. Returns how many were held. O(k)."""
        n = 0
        self._gen += 1
        for a, b in zip(np.asarray(old, np.uint32), np.asarray(new, np.uint32)):
            _, p = _find(self._ent, self._slots, a[0], a[1], a[2])
            if p < 0:
                continue
            _unlink(self._ent, self._slots, p)
            self._ent[p, :3] = b
            i, q = _find(self._ent, self._slots, b[0], b[1], b[2])
            if q < 0:
                self._slots[i] = p
            n += 1
        return n

    def remember_many(self, event_ids: Sequence[str], fps) -> None:
        """``remember`` each id in order. O(k) amortised."""
        self._put_words(self.words_many(event_ids), fps, self.retention)

    def remember_words(self, words: np.ndarray, fps) -> None:
        """``remember_many`` of ids given only by their identity words (rows of ``words_many``)."""
        self._put_words(words, fps, self.retention)

    def _put_words(self, words: np.ndarray, fps, limit: int) -> None:
        k = len(words)
        cs = self._fold_many(fps, k)
        if not k:
            return
        ids = np.ascontiguousarray(words)
        done = 0
        while True:
            done = _put_many(self._ent, self._slots, self._meta, ids, cs, limit, done)
            if done == k:
                return
            if done < 0:
                raise AssertionError("dedup table is corrupt")
            self._grow()

    # ------------------------------------------------------------ storage

    @property
    def capacity(self) -> int:
        """Entries the ring holds before it grows."""
        return int(self._ent.shape[0])

    @property
    def nbytes(self) -> int:
        """Bytes of the arrays (what a remembered id costs, over ``len``)."""
        return int(self._ent.nbytes + self._slots.nbytes + self._meta.nbytes)

    def _entries(self) -> np.ndarray:
        """The live ring entries, oldest first (a copy)."""
        head, n = int(self._meta[0]), int(self._meta[1])
        cap = self.capacity
        if head + n <= cap:
            return self._ent[head:head + n].copy()
        return np.concatenate([self._ent[head:], self._ent[:head + n - cap]])

    def _grow(self) -> None:
        cap, r = self.capacity, self.retention
        self._reshape(min(max(2 * cap, _MIN_CAPACITY), max(r, cap + 1)))

    def _reshape(self, capacity: int) -> None:
        self._load(self._entries(), capacity)

    def _load(self, entries: np.ndarray, capacity: int) -> None:
        n = len(entries)
        assert n <= capacity
        built = build_grown(GrowPlan(entries, n, capacity, self._gen))
        if built is None:
            raise ValueError("dedup state repeats an event id")
        self._ent, self._slots = built
        self._meta[0], self._meta[1] = 0, n
        self._gen += 1

    # ------------------------------------------------------ growth built ahead
    #
    # Growing is O(n): at 1M ids a new ring and slot table (48 MB) and a relink
    # of every id, ~0.4 s on the 2-core VM, inside the apply that filled the
    # ring, where every read and write of the process waited (issue 29 item 2).
    # Below the retention the ring only appends (nothing is evicted, head is 0),
    # so a bigger table can be built from a prefix of it on another thread
    # (:func:`build_grown`) while ids go on being added; :meth:`finish_grow`
    # then copies that prefix again (a known id's content may have been set
    # since) and puts the ids added meanwhile, O(those ids + a memory copy).
    # The result is the table an inline growth gives: same ring, same slots.

    #: A growth is planned once the ring is this full (3/4: at 13k ids/s a 1M ring
    #: leaves ~20 s for a build of ~0.4 s before it would grow inline).
    GROW_AHEAD_AT = 0.75

    def grow_plan(self) -> "GrowPlan | None":
        """What to build ahead (:func:`build_grown`, any thread) when the ring is at
        least :attr:`GROW_AHEAD_AT` full and below the retention; else None. O(1)."""
        cap, n = self.capacity, len(self)
        if cap >= self.retention or n < max(1, int(cap * self.GROW_AHEAD_AT)) or int(self._meta[0]) != 0:
            return None
        return GrowPlan(self._ent, n, min(max(2 * cap, _MIN_CAPACITY), max(self.retention, cap + 1)), self._gen)

    def finish_grow(self, plan: "GrowPlan", built: "tuple[np.ndarray, np.ndarray] | None") -> bool:
        """Swap in a table built from ``plan`` with the ids added since it was planned;
        False (nothing changed) when it is stale: the ring was rebuilt or an id rewritten
        meanwhile, or the build failed. O(ids added since + n) memory copies."""
        if built is None or plan.gen != self._gen or plan.entries is not self._ent or int(self._meta[0]) != 0:
            return False
        ent, slots = built
        n0, n = plan.n, len(self)
        ent[:n0] = self._ent[:n0]  # contents set again since the plan
        meta = np.array([0, n0, self._meta[2]], np.int64)
        tail = np.ascontiguousarray(self._ent[n0:n, :3])
        if n > n0 and _put_many(ent, slots, meta, tail, np.ascontiguousarray(self._ent[n0:n, 3]),
                                self.retention, 0) != n - n0:
            return False
        if int(meta[1]) != n:
            return False
        self._ent, self._slots = ent, slots
        self._gen += 1
        return True

    @property
    def evicted(self) -> int:
        """Ids the retention has evicted since the board began (restored from
        snapshots; a snapshot that did not record it counts as 1). While it
        is 0 the table holds every id the board ever admitted, so an id not
        found here was never seen: callers may skip older fallbacks."""
        return int(self._meta[2])

    def to_state(self) -> dict:
        """``{"v": 1, "entries": bytes, "evicted": int}``: the ring's live
        ``(id0, id1, id2, content)`` uint32 rows, little-endian, oldest
        first, and :attr:`evicted`. O(n)."""
        return {"v": STATE_VERSION, "entries": self._entries().astype("<u4").tobytes(), "evicted": self.evicted}

    @classmethod
    def from_state(cls, retention: int, state: dict | list, board_id: str = "") -> "DedupTable":
        """Rebuild from ``to_state``, keeping the newest ``retention`` ids.
        Also reads the flat ``[id, fp, id, fp, ...]`` list that the dict
        window wrote before this table (hashed here with ``board_id``)."""
        t = cls(retention, board_id)
        if isinstance(state, list):
            ids = state[0::2]
            entries = np.empty((len(ids), 4), np.uint32)
            if ids:
                entries[:, :3] = t.words_many(ids)
                entries[:, 3] = cls._fold_many(state[1::2], len(ids))
        else:
            if state.get("v") != STATE_VERSION:
                raise ValueError(f"unknown dedup state version {state.get('v')!r}")
            entries = np.frombuffer(state["entries"], dtype="<u4").reshape(-1, 4)
        evicted = 1 if isinstance(state, list) else int(state.get("evicted", 1))  # unrecorded: assume some
        t._meta[2] = evicted + max(0, len(entries) - retention)
        entries = entries[-retention:]
        if len(entries):
            t._load(entries, len(entries))
        return t

    def _check(self) -> None:
        """Every invariant, O(capacity): shapes, head and count in range,
        each slot names a live entry and each live entry is linked exactly
        once, found from its home slot with no hole in the probe run, and
        no id twice, and never more than the retention."""
        code = _verify(self._ent, self._slots, self._meta)
        assert code == 0, f"dedup table invariant {code} broken"
        assert self._ent.dtype == np.uint32 and self._slots.dtype == np.int32
        assert len(self) <= self.retention
        assert self._ent.flags.c_contiguous and self._ent.flags.writeable


DedupWindow = DedupTable  # the name before the table was array-backed

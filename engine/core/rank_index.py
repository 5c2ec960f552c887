"""The rank index: exact fixed-width keys in sorted blocks (numba).

A key is ``(primary, tie, player)``: two int64 and the player's int32 index
in the board's :class:`~engine.core.players.PlayerTable`. Keys order by primary,
then tie, then the player id's UTF-8 bytes (code-point order): the API §6
comparator with no float anywhere. On a board with subscores (docs/api.md
§14) keys with equal primaries compare the players' subscores before the
tie: like the id bytes, they are read through the player index, from the
matrix ``S`` (a row per player, a column per subscore, raw int64 values)
in the directions ``D`` (1 ascending, -1 descending: compared as is, never
negated, so INT64_MIN and INT64_MAX need no care). The caller keeps ``S``
equal to the keys the index holds (:meth:`engine.core.partition.Partition._move`
puts a moving row's old subscores back while its old key is removed). A
board without subscores passes None for both: numba compiles that
signature without the branch, the same code as before subscores existed. The policy maps a row to its key
(:func:`engine.core.partition.index_key`); the index only orders keys.

Storage is a list of blocks of at most ``CAP`` keys each (the idea of
``sortedcontainers.SortedList``, with packed arrays instead of Python
objects): ``P``, ``T`` (int64) and ``ID`` (int32) hold block ``b`` at
``[b * CAP, b * CAP + cnt[b])``, sorted; ``order`` lists the blocks in key
order, and ``LP``, ``LT``, ``LI`` each block's last key in that order.
Finding a key is a binary search over those last keys (about 20 bytes per
block, so the search stays in cache) and then inside one block: O(log n).
Inserting shifts at most ``CAP`` keys; a full block first hands a quarter or
more of its keys to a neighbour with room and splits in two only when its
neighbours are nearly full too, and a block drained below ``MERGE_BELOW``
keys joins a neighbour, so blocks stay about four fifths full however the
keys churn (a million players' keys: 82 %, ~25 bytes per key with the
arrays' growth headroom; plain halving left 44 % and ~45 bytes). ``prefix``
(keys before each block) is rebuilt lazily, once per batch of writes, so a
rank is O(log n) too. Batched counts search inside their blocks in lockstep,
so the cache misses of different queries overlap.
"""

from __future__ import annotations

import numba
import numpy as np

from engine.core.players import id_less

CAP = 128
#: What a partition without subscores holds for the rows' subscores (``S``: one
#: row per player, one column per subscore) and their directions (``D``: 1
#: ascending, -1 descending): no column. It passes None to the index instead,
#: so numba compiles the comparison without the subscores branch at all (an
#: empty array there cost plain boards ~45 % of the index's speed).
NO_SUBS = np.zeros((0, 0), np.int64)
NO_DIRS = np.zeros(0, np.int64)
#: A block left with fewer keys than this after a removal joins a neighbour
#: if the two then hold at most MERGE_INTO keys, else takes keys from it
#: until both hold about half their sum (a B-tree's underflow rule). Without
#: it, the blocks that players' improving scores drain sit near a third full
#: (a board's keys keep moving up) and the index grows with events.
MERGE_BELOW = CAP // 2
MERGE_INTO = CAP * 7 // 8
#: A full block hands keys to a neighbour (instead of splitting) when that
#: neighbour has room for at least twice this many.
ROOM_MIN = 8


# The small helpers are inlined by LLVM (``forceinline``), not by numba's IR inliner
# (``inline="always"``): the same speed (insert, count and churn at 1M keys, with and without
# subscores), and the index's kernels compile ~2.8 s faster on a cold start (docs/performance.md,
# "Stop 32"). Compiled on its own for ``S`` None, ``key_less`` still loses the subscores branch.
@numba.njit(cache=True, forceinline=True)
def key_less(p1, t1, i1, p2, t2, i2, arena, offs, S, D):
    if p1 != p2:
        return p1 < p2
    if S is not None:  # subscores: a board without them passes None (compiled away)
        for c in range(len(D)):
            a, b = S[i1, c], S[i2, c]
            if a != b:
                return a < b if D[c] > 0 else a > b
    if t1 != t2:
        return t1 < t2
    if i1 == i2:
        return False
    return id_less(arena, offs, i1, i2)


@numba.njit(cache=True)
def _find_block(LP, LT, LI, nb, p, t, i, arena, offs, S, D):
    """The first logical block whose last key is >= the key (nb - 1 if none).
    A binary search over the blocks' last keys kept in logical order (about
    20 bytes per block of 128 keys, so it stays in cache), not through
    ``order`` into the blocks."""
    lo, hi = 0, nb
    while lo < hi:
        mid = (lo + hi) >> 1
        if key_less(LP[mid], LT[mid], LI[mid], p, t, i, arena, offs, S, D):
            lo = mid + 1
        else:
            hi = mid
    return lo if lo < nb else nb - 1


@numba.njit(cache=True)
def _pos_in_block(P, T, ID, b, c, p, t, i, arena, offs, S, D):
    lo, hi = 0, c
    base = b * CAP
    while lo < hi:
        mid = (lo + hi) >> 1
        k = base + mid
        if key_less(P[k], T[k], ID[k], p, t, i, arena, offs, S, D):
            lo = mid + 1
        else:
            hi = mid
    return lo


@numba.njit(cache=True, forceinline=True)
def _move_keys(P, T, ID, dst, src, k):
    """Keys ``src .. src + k - 1`` to ``dst .. dst + k - 1``; the ranges may
    overlap (the copy runs in the safe direction, as memmove)."""
    if dst < src:
        for q in range(k):
            P[dst + q], T[dst + q], ID[dst + q] = P[src + q], T[src + q], ID[src + q]
    else:
        for q in range(k - 1, -1, -1):
            P[dst + q], T[dst + q], ID[dst + q] = P[src + q], T[src + q], ID[src + q]


@numba.njit(cache=True, forceinline=True)
def _set_last(LP, LT, LI, j, P, T, ID, k):
    """Logical block ``j`` now ends with the key at ``k``."""
    LP[j], LT[j], LI[j] = P[k], T[k], ID[k]


@numba.njit(cache=True, nogil=True)  # nogil: a rank mirror is built on a worker thread (engine.core.rank_mirror)
def _insert_many(P, T, ID, cnt, order, LP, LT, LI, meta, free, ap, at, ai, start, arena, offs, S, D):
    """Insert keys ``start..`` in turn; returns the index of the first key not
    inserted (len when all were): the caller grows the arrays and resumes."""
    for x in range(start, len(ap)):
        p, t, i = ap[x], at[x], ai[x]
        nb = meta[0]
        if nb == 0:
            if meta[1] == 0:
                return x
            meta[1] -= 1
            b = free[meta[1]]
            order[0] = b
            cnt[b] = 0
            meta[0] = nb = 1
        j = _find_block(LP, LT, LI, nb, p, t, i, arena, offs, S, D)
        b = order[j]
        if cnt[b] == CAP:
            j = _make_room(P, T, ID, cnt, order, LP, LT, LI, nb, j, p, t, i, arena, offs, S, D)
            b = order[j]
        if cnt[b] == CAP:  # split: the upper half moves to a new block after it
            if meta[1] == 0:
                return x
            meta[1] -= 1
            nbk = free[meta[1]]
            half = CAP // 2
            _move_keys(P, T, ID, nbk * CAP, b * CAP + half, CAP - half)
            cnt[b], cnt[nbk] = half, CAP - half
            for q in range(nb, j + 1, -1):
                order[q] = order[q - 1]
                LP[q], LT[q], LI[q] = LP[q - 1], LT[q - 1], LI[q - 1]
            order[j + 1] = nbk
            LP[j + 1], LT[j + 1], LI[j + 1] = LP[j], LT[j], LI[j]  # the new block ends where b ended
            meta[0] = nb = nb + 1
            last = b * CAP + half - 1
            _set_last(LP, LT, LI, j, P, T, ID, last)
            if key_less(P[last], T[last], ID[last], p, t, i, arena, offs, S, D):
                b = nbk
                j += 1
        c = cnt[b]
        pos = _pos_in_block(P, T, ID, b, c, p, t, i, arena, offs, S, D)
        base = b * CAP
        _move_keys(P, T, ID, base + pos + 1, base + pos, c - pos)
        P[base + pos], T[base + pos], ID[base + pos] = p, t, i
        if pos == c:
            LP[j], LT[j], LI[j] = p, t, i
        cnt[b] = c + 1
        meta[2] += 1
    return len(ap)


@numba.njit(cache=True)
def _make_room(P, T, ID, cnt, order, LP, LT, LI, nb, j, p, t, i, arena, offs, S, D):
    """Block ``order[j]`` is full: move a quarter or more of its keys to a
    neighbour with room (the next one first), B*-tree style, so blocks split
    only when their neighbours are nearly full too; that keeps blocks about
    four fifths full where plain halving leaves them near half. Returns the
    logical block the key (p, t, i) now belongs in (still full: none had room)."""
    b = order[j]
    if j + 1 < nb:
        nx = order[j + 1]
        m = cnt[nx]
        h = (CAP - m) // 2
        if h >= ROOM_MIN:
            nbase, src = nx * CAP, b * CAP + CAP - h
            _move_keys(P, T, ID, nbase + h, nbase, m)
            _move_keys(P, T, ID, nbase, src, h)
            cnt[nx], cnt[b] = m + h, CAP - h
            last = src - 1
            _set_last(LP, LT, LI, j, P, T, ID, last)
            return j + 1 if key_less(P[last], T[last], ID[last], p, t, i, arena, offs, S, D) else j
    if j > 0:
        pv = order[j - 1]
        m = cnt[pv]
        h = (CAP - m) // 2
        if h >= ROOM_MIN:
            pbase, base = pv * CAP, b * CAP
            _move_keys(P, T, ID, pbase + m, base, h)
            _move_keys(P, T, ID, base, base + h, CAP - h)
            cnt[pv], cnt[b] = m + h, CAP - h
            last = pbase + m + h - 1
            _set_last(LP, LT, LI, j - 1, P, T, ID, last)
            return j - 1 if key_less(p, t, i, P[last], T[last], ID[last], arena, offs, S, D) else j
    return j


@numba.njit(cache=True)
def _remove_many(P, T, ID, cnt, order, LP, LT, LI, meta, free, rp, rt, ri, arena, offs, S, D):
    """Remove keys that are present; returns how many were missing (a bug)."""
    missing = 0
    for x in range(len(rp)):
        p, t, i = rp[x], rt[x], ri[x]
        nb = meta[0]
        if nb == 0:
            missing += 1
            continue
        j = _find_block(LP, LT, LI, nb, p, t, i, arena, offs, S, D)
        b = order[j]
        c = cnt[b]
        pos = _pos_in_block(P, T, ID, b, c, p, t, i, arena, offs, S, D)
        base = b * CAP
        k = base + pos
        if pos >= c or P[k] != p or T[k] != t or ID[k] != i:
            missing += 1
            continue
        _move_keys(P, T, ID, k, k + 1, base + c - 1 - k)
        cnt[b] = c - 1
        meta[2] -= 1
        if c > 1 and pos == c - 1:  # it was the block's last key
            _set_last(LP, LT, LI, j, P, T, ID, k - 1)
        r = c - 1
        if r == 0:  # the block is empty: drop it from the order
            _drop_block(order, LP, LT, LI, meta, free, j, b)
        elif r < MERGE_BELOW:  # under half full: join a neighbour, or even out with it
            _rebalance(P, T, ID, cnt, order, LP, LT, LI, meta, free, j, b, r)
    return missing


@numba.njit(cache=True)
def _rebalance(P, T, ID, cnt, order, LP, LT, LI, meta, free, j, b, r):
    """Block ``b`` (logical ``j``) holds ``r`` keys, under half: merge it with
    its next (else previous) neighbour when the two fit in MERGE_INTO keys,
    else move keys over from that neighbour so both hold about half their
    sum. So every block but a lone one stays at least ~44 % full, however
    the keys churn (scores that keep improving drain the blocks they leave)."""
    nb = meta[0]
    base = b * CAP
    if j + 1 < nb:
        nx = order[j + 1]
        m, nbase = cnt[nx], nx * CAP
        if r + m <= MERGE_INTO:
            _move_keys(P, T, ID, base + r, nbase, m)
            cnt[b] = r + m
            LP[j], LT[j], LI[j] = LP[j + 1], LT[j + 1], LI[j + 1]
            _drop_block(order, LP, LT, LI, meta, free, j + 1, nx)
            return
        h = (m - r) // 2
        if h > 0:  # the next block's first h keys move to b's end
            _move_keys(P, T, ID, base + r, nbase, h)
            _move_keys(P, T, ID, nbase, nbase + h, m - h)
            cnt[b], cnt[nx] = r + h, m - h
            _set_last(LP, LT, LI, j, P, T, ID, base + r + h - 1)
        return
    if j > 0:
        pv = order[j - 1]
        m, pbase = cnt[pv], pv * CAP
        if r + m <= MERGE_INTO:
            _move_keys(P, T, ID, pbase + m, base, r)
            cnt[pv] = m + r
            LP[j - 1], LT[j - 1], LI[j - 1] = LP[j], LT[j], LI[j]
            _drop_block(order, LP, LT, LI, meta, free, j, b)
            return
        h = (m - r) // 2
        if h > 0:  # the previous block's last h keys move to b's front
            _move_keys(P, T, ID, base + h, base, r)
            _move_keys(P, T, ID, base, pbase + m - h, h)
            cnt[b], cnt[pv] = r + h, m - h
            _set_last(LP, LT, LI, j - 1, P, T, ID, pbase + m - h - 1)


@numba.njit(cache=True, forceinline=True)
def _drop_block(order, LP, LT, LI, meta, free, j, b):
    """Take block ``b`` (at logical position ``j``) out of the order and back to the free stack."""
    nb = meta[0]
    for q in range(j, nb - 1):
        order[q] = order[q + 1]
        LP[q], LT[q], LI[q] = LP[q + 1], LT[q + 1], LI[q + 1]
    meta[0] = nb - 1
    free[meta[1]] = b
    meta[1] += 1


@numba.njit(cache=True)
def _prefix(cnt, order, nb, prefix):
    s = 0
    for j in range(nb):
        prefix[j] = s
        s += cnt[order[j]]
    prefix[nb] = s


@numba.njit(cache=True)
def _count_less_many(P, T, ID, cnt, order, LP, LT, LI, nb, prefix, qp, qt, qi, arena, offs, S, D, out):
    """For each query key, how many keys sort strictly before it.

    The block of every query first (the blocks' last keys stay in cache),
    then the searches inside the blocks in lockstep, one halving step for
    every query per round: the steps of different queries are independent
    loads, so their cache misses overlap instead of queueing."""
    k = len(qp)
    if nb == 0:
        for x in range(k):
            out[x] = 0
        return
    base = np.empty(k, np.int64)
    lo = np.zeros(k, np.int64)
    hi = np.empty(k, np.int64)
    for x in range(k):
        j = _find_block(LP, LT, LI, nb, qp[x], qt[x], qi[x], arena, offs, S, D)
        b = order[j]
        base[x] = b * CAP
        hi[x] = cnt[b]
        out[x] = prefix[j]
    for _ in range(8):  # CAP = 128: at most 8 halvings settle any block
        for x in range(k):
            a, z = lo[x], hi[x]
            if a < z:
                mid = (a + z) >> 1
                q = base[x] + mid
                less = key_less(P[q], T[q], ID[q], qp[x], qt[x], qi[x], arena, offs, S, D)
                lo[x] = mid + 1 if less else a
                hi[x] = z if less else mid
    for x in range(k):
        out[x] += lo[x]


@numba.njit(cache=True)
def _slice(P, T, ID, cnt, order, nb, prefix, start, stop, op, ot, oi):
    """Keys at sorted positions start..stop-1 into op/ot/oi."""
    if start >= stop:
        return
    lo, hi = 0, nb
    while lo < hi:  # the last block whose prefix <= start
        mid = (lo + hi) >> 1
        if prefix[mid + 1] <= start:
            lo = mid + 1
        else:
            hi = mid
    j = lo
    w = 0
    pos = start - prefix[j]
    while w < stop - start and j < nb:
        b = order[j]
        base = b * CAP
        while pos < cnt[b] and w < stop - start:
            op[w], ot[w], oi[w] = P[base + pos], T[base + pos], ID[base + pos]
            w += 1
            pos += 1
        j += 1
        pos = 0


@numba.njit(cache=True)
def _check_kernel(P, T, ID, cnt, order, LP, LT, LI, nb, arena, offs, S, D):
    total = 0
    first = True
    lp, lt, li = 0, 0, 0
    for j in range(nb):
        b = order[j]
        if cnt[b] < 1 or cnt[b] > CAP:
            return -1
        last = b * CAP + cnt[b] - 1
        if LP[j] != P[last] or LT[j] != T[last] or LI[j] != ID[last]:
            return -3
        for k in range(b * CAP, b * CAP + cnt[b]):
            if not first and not key_less(lp, lt, li, P[k], T[k], ID[k], arena, offs, S, D):
                return -2
            lp, lt, li = P[k], T[k], ID[k]
            first = False
            total += 1
    return total


class RankIndex:
    """Sorted exact keys of the ranked rows of one partition."""

    def __init__(self, blocks: int = 4) -> None:
        self.P = np.zeros(blocks * CAP, dtype=np.int64)
        self.T = np.zeros(blocks * CAP, dtype=np.int64)
        self.ID = np.zeros(blocks * CAP, dtype=np.int32)
        self.cnt = np.zeros(blocks, dtype=np.int32)
        self.order = np.zeros(blocks, dtype=np.int32)
        # the last key of each block, in logical (key) order: what a search walks
        self.LP = np.zeros(blocks, dtype=np.int64)
        self.LT = np.zeros(blocks, dtype=np.int64)
        self.LI = np.zeros(blocks, dtype=np.int32)
        self.free = np.arange(blocks - 1, -1, -1, dtype=np.int32)  # a stack: block 0 is taken first
        self.meta = np.array([0, blocks, 0], dtype=np.int64)  # blocks in order, free blocks, keys
        self.prefix = np.zeros(blocks + 1, dtype=np.int64)
        self._fresh = True  # prefix matches the blocks

    def __len__(self) -> int:
        return int(self.meta[2])

    def _grow(self, blocks: int = 0) -> None:
        old = len(self.cnt)
        new = max(old + old // 8 + 4, blocks)  # 1.125x: at most an eighth of the blocks allocated ahead
        for name in ("P", "T", "ID"):
            a = getattr(self, name)
            b = np.zeros(new * CAP, dtype=a.dtype)
            b[: len(a)] = a
            setattr(self, name, b)
        cnt = np.zeros(new, dtype=np.int32)
        cnt[:old] = self.cnt
        order = np.zeros(new, dtype=np.int32)
        order[:old] = self.order
        for name in ("LP", "LT", "LI"):
            a = getattr(self, name)
            b = np.zeros(new, dtype=a.dtype)
            b[:old] = a
            setattr(self, name, b)
        free = np.zeros(new, dtype=np.int32)
        nfree = int(self.meta[1])
        free[:nfree] = self.free[:nfree]
        free[nfree:nfree + new - old] = np.arange(new - 1, old - 1, -1, dtype=np.int32)
        self.cnt, self.order, self.free = cnt, order, free
        self.meta[1] = nfree + new - old
        self.prefix = np.zeros(new + 1, dtype=np.int64)

    # ------------------------------------------------------------------ writes

    def reserve(self, keys: int) -> None:
        """Room for ``keys`` keys in all, made now (a bulk build grows once, not
        by an eighth at a time)."""
        need = -(-keys * 5 // (CAP * 4)) + 4  # blocks about four fifths full, as inserts leave them
        if need > len(self.cnt):
            self._grow(need)

    def insert_many(self, p: np.ndarray, t: np.ndarray, i: np.ndarray, arena: np.ndarray, offs: np.ndarray,
                    S: np.ndarray | None = None, D: np.ndarray | None = None) -> None:
        self._fresh = False
        done = 0
        while True:
            done = _insert_many(self.P, self.T, self.ID, self.cnt, self.order, self.LP, self.LT, self.LI,
                                self.meta, self.free,
                                p, t, i, done, arena, offs, S, D)
            if done == len(p):
                return
            self._grow()

    def remove_many(self, p: np.ndarray, t: np.ndarray, i: np.ndarray, arena: np.ndarray, offs: np.ndarray,
                    S: np.ndarray | None = None, D: np.ndarray | None = None) -> None:
        self._fresh = False
        missing = _remove_many(self.P, self.T, self.ID, self.cnt, self.order, self.LP, self.LT, self.LI,
                               self.meta, self.free,
                               p, t, i, arena, offs, S, D)
        if missing:
            raise AssertionError(f"rank index: {missing} keys to remove were not in the index")

    # ------------------------------------------------------------------- reads

    def _prefix(self) -> np.ndarray:
        if not self._fresh:
            _prefix(self.cnt, self.order, int(self.meta[0]), self.prefix)
            self._fresh = True
        return self.prefix

    def count_less_many(self, p, t, i, arena, offs, S: np.ndarray | None = None, D: np.ndarray | None = None) -> np.ndarray:
        """How many keys sort strictly before each query key. O(k log n)."""
        prefix = self._prefix()
        out = np.empty(len(p), dtype=np.int64)
        _count_less_many(self.P, self.T, self.ID, self.cnt, self.order, self.LP, self.LT, self.LI,
                         int(self.meta[0]), prefix,
                         p, t, i, arena, offs, S, D, out)
        return out

    def count_less(self, p: int, t: int, i: int, arena, offs, S: np.ndarray | None = None, D: np.ndarray | None = None) -> int:
        return int(self.count_less_many(np.array([p], np.int64), np.array([t], np.int64),
                                        np.array([i], np.int32), arena, offs, S, D)[0])

    def slice(self, start: int, stop: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The keys at sorted positions ``start .. stop - 1`` (clamped). O(log n + k)."""
        n = len(self)
        start, stop = max(0, min(start, n)), max(0, min(stop, n))
        k = max(0, stop - start)
        op, ot, oi = np.empty(k, np.int64), np.empty(k, np.int64), np.empty(k, np.int32)
        if k:
            _slice(self.P, self.T, self.ID, self.cnt, self.order, int(self.meta[0]), self._prefix(),
                   start, stop, op, ot, oi)
        return op, ot, oi

    def nbytes(self) -> int:
        blocks = 3 * self.cnt.nbytes + self.LP.nbytes + self.LT.nbytes + self.LI.nbytes + self.prefix.nbytes
        return self.P.nbytes + self.T.nbytes + self.ID.nbytes + blocks

    def _check(self, arena, offs, S: np.ndarray | None = None, D: np.ndarray | None = None) -> None:
        total = _check_kernel(self.P, self.T, self.ID, self.cnt, self.order, self.LP, self.LT, self.LI,
                              int(self.meta[0]), arena, offs, S, D)
        assert total >= 0, f"rank index out of order or with a bad block ({total})"
        assert total == len(self)
        nb, nfree = int(self.meta[0]), int(self.meta[1])
        assert nb + nfree == len(self.cnt)
        used = set(self.order[:nb].tolist())
        assert len(used) == nb and not used & set(self.free[:nfree].tolist())

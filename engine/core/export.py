"""Export of a board at one pinned version, as columns (docs/api.md §13, export).

An export never copies the board into the router. In one consistent cut every
partition writes its ranked rows, already in rank order, as :class:`Block` s
of columns to a spill file on its shard (:mod:`engine.log.spill` does the
file I/O); the router then merges the partitions' block streams with
:class:`Merge`, a block at a time, and hands out :class:`Chunk` s (ranks,
values, timestamps, ids and metadata as columns) that the gateway renders.
Memory held: a block per partition plus the chunk being merged, whatever the
board's size.

This module is pure (no files, no clock): block encoding, the k-way merge,
competition ranks over a stream. Order is the board comparator's exact key,
``(primary, tie, player id bytes)`` as the rank index holds it (primary
``~value`` on descending boards), never a float. On a board with subscores
(docs/api.md §14) a block also has ``sub``, one int64 column per subscore in
ascending key order (``~s`` for a descending one, ``s`` for an ascending
one: exact at both ends of int64, and its own inverse), compared after the
primary and before the tie; other boards' blocks have ``sub`` None.

>>> a = Block.of([-10, -7], [1, 1], [9, 6], [1, 1], ["ann", "cy"])
>>> b = Block.of([-10, -8], [1, 0], [9, 7], [1, 0], ["bo", "dee"])
>>> m = Merge([2, 2])
>>> for s in m.wants():
...     m.feed(s, (a, b)[s])
>>> m.take().player_ids()
['ann', 'bo', 'dee', 'cy']
"""

from __future__ import annotations

import bisect
import struct
from typing import NamedTuple, Sequence

import numpy as np

from engine.core.model import RankedEntry
from engine.core.players import decode_id, encode_ids, gather

_HEAD = struct.Struct("<QQQQ")  # rows, id bytes, metadata bytes, subscore columns
_I8 = np.dtype("<i8")


class Block(NamedTuple):
    """Rows in rank order, as columns. ``primary`` and ``tie`` are the rank
    index's exact key (with the player id's UTF-8 bytes as the last part);
    ids and metadata are byte arenas with int64 offsets (``rows + 1``, from 0);
    a row without metadata has an empty slice."""

    primary: np.ndarray
    tie: np.ndarray
    value: np.ndarray
    achieved: np.ndarray
    id_bytes: np.ndarray
    id_offsets: np.ndarray
    meta_bytes: np.ndarray
    meta_offsets: np.ndarray
    sub: np.ndarray | None = None  # subscores boards: (rows, k) int64 in key order (see the module doc)

    @property
    def rows(self) -> int:
        return len(self.value)

    def _sub(self, rows) -> np.ndarray | None:
        return None if self.sub is None else self.sub[rows]

    @classmethod
    def of(cls, primary, tie, value, achieved, player_ids: Sequence[str],
           metadata: Sequence[bytes | None] | None = None) -> "Block":
        """From Python lists (tests, doctests)."""
        ids, offs = encode_ids(list(player_ids))
        mb, mo = _arena(list(metadata) if metadata is not None else [None] * len(player_ids))
        i64 = lambda c: np.asarray(c, np.int64)  # noqa: E731
        return cls(i64(primary), i64(tie), i64(value), i64(achieved), ids, offs, mb, mo)

    @classmethod
    def empty(cls) -> "Block":
        z = np.zeros(0, np.int64)
        return cls(z, z, z, z, np.zeros(0, np.uint8), np.zeros(1, np.int64), np.zeros(0, np.uint8),
                   np.zeros(1, np.int64))

    def raw_id(self, i: int) -> bytes:
        return self.id_bytes[self.id_offsets[i]:self.id_offsets[i + 1]].tobytes()

    def player_ids(self) -> list[str]:
        raw = self.id_bytes.tobytes()
        o = self.id_offsets.tolist()
        return [decode_id(raw[a:b]) for a, b in zip(o, o[1:])]

    def metadata(self) -> list[bytes | None]:
        raw = self.meta_bytes.tobytes()
        o = self.meta_offsets.tolist()
        return [raw[a:b] or None for a, b in zip(o, o[1:])]

    def slice(self, start: int, stop: int) -> "Block":
        """Rows ``start .. stop - 1`` (views of the columns, offsets rebased)."""
        io, mo = self.id_offsets[start:stop + 1], self.meta_offsets[start:stop + 1]
        return Block(self.primary[start:stop], self.tie[start:stop], self.value[start:stop],
                     self.achieved[start:stop], self.id_bytes[io[0]:io[-1]], io - io[0],
                     self.meta_bytes[mo[0]:mo[-1]], mo - mo[0], self._sub(slice(start, stop)))

    def take(self, idx: np.ndarray) -> "Block":
        """Rows ``idx`` in that order (a gather of every column)."""
        ib, io = gather(self.id_bytes, self.id_offsets, idx)
        if self.meta_offsets[-1]:
            mb, mo = gather(self.meta_bytes, self.meta_offsets, idx)
        else:
            mb, mo = self.meta_bytes[:0], np.zeros(len(idx) + 1, np.int64)
        return Block(self.primary[idx], self.tie[idx], self.value[idx], self.achieved[idx], ib, io, mb, mo,
                     self._sub(idx))

    def encode(self) -> bytes:
        """The block as bytes (little-endian, every array at a multiple of 8)."""
        n = self.rows
        k = 0 if self.sub is None else int(self.sub.shape[1])
        parts = [_HEAD.pack(n, len(self.id_bytes), len(self.meta_bytes), k)]
        for col in (self.primary, self.tie, self.value, self.achieved, self.id_offsets, self.meta_offsets):
            parts.append(np.ascontiguousarray(col, _I8).tobytes())
        if k:
            parts.append(np.ascontiguousarray(self.sub, _I8).tobytes())
        for raw in (self.id_bytes, self.meta_bytes):
            parts += [np.ascontiguousarray(raw, np.uint8).tobytes(), b"\0" * (-len(raw) % 8)]
        return b"".join(parts)

    @classmethod
    def decode(cls, buf) -> "Block":
        """A block from :meth:`encode` 's bytes (numpy views of ``buf``, no copy)."""
        n, nid, nmeta, k = _HEAD.unpack_from(buf, 0)
        at = _HEAD.size
        cols = []
        for count in (n, n, n, n, n + 1, n + 1):
            cols.append(np.frombuffer(buf, _I8, count, at))
            at += 8 * count
        sub = None
        if k:
            sub = np.frombuffer(buf, _I8, n * k, at).reshape(n, k)
            at += 8 * n * k
        ids = np.frombuffer(buf, np.uint8, nid, at)
        at += nid + (-nid % 8)
        metas = np.frombuffer(buf, np.uint8, nmeta, at)
        p, t, v, a, io, mo = cols
        return cls(p, t, v, a, ids, io, metas, mo, sub)


def _arena(items: Sequence[bytes | None]) -> tuple[np.ndarray, np.ndarray]:
    offs = np.zeros(len(items) + 1, np.int64)
    if items:
        np.cumsum(np.fromiter((len(m or b"") for m in items), np.int64, count=len(items)), out=offs[1:])
    return np.frombuffer(bytearray(b"".join(m or b"" for m in items)), np.uint8), offs


def metadata_arena(items: Sequence[bytes | None]) -> tuple[np.ndarray, np.ndarray]:
    """Metadata bytes per row (None: none) as one arena with offsets."""
    return _arena(items)


def concat(blocks: Sequence[Block]) -> Block:
    """The rows of ``blocks`` one after the other."""
    if len(blocks) == 1:
        return blocks[0]
    if not blocks:
        return Block.empty()

    def arena(k_bytes: int, k_offs: int) -> tuple[np.ndarray, np.ndarray]:
        shifted, base = [np.zeros(1, np.int64)], 0
        for b in blocks:
            shifted.append(b[k_offs][1:] + base)
            base += len(b[k_bytes])
        return np.concatenate([b[k_bytes] for b in blocks]), np.concatenate(shifted)

    ib, io = arena(4, 5)
    mb, mo = arena(6, 7)
    cat = lambda k: np.concatenate([b[k] for b in blocks])  # noqa: E731
    sub = None if blocks[0].sub is None else np.concatenate([b.sub for b in blocks])  # type: ignore[misc]
    return Block(cat(0), cat(1), cat(2), cat(3), ib, io, mb, mo, sub)


# ------------------------------------------------------------------- merge


class Merge:
    """A k-way merge of block streams, each in rank order (sans I/O).

    ``Merge(rows)``: source ``s`` holds ``rows[s]`` rows in all. The caller
    feeds every source that :meth:`wants` a block its next one, then
    :meth:`take` s the rows every source has made safe: all buffered rows whose
    key is at most the smallest *last buffered* key among the sources that have
    more to come (no row still unread can sort before them), in rank order.
    Each take moves at least one whole buffered block, so memory is a block
    per source. Equal ``(primary, tie)`` across sources are ordered by player
    id bytes, exactly as the rank index orders them. O(rows log k) numpy work
    plus a Python sort of each run of equal ``(primary, tie)`` that spans sources.
    """

    def __init__(self, rows: Sequence[int]) -> None:
        self.total = [int(r) for r in rows]
        self.k = len(self.total)
        self.read = [0] * self.k  # rows fed so far per source
        self.buf: list[Block | None] = [None] * self.k
        self.pos = [0] * self.k

    def _left(self, s: int) -> int:
        b = self.buf[s]
        return 0 if b is None else b.rows - self.pos[s]

    def wants(self) -> list[int]:
        """Sources with no buffered row left and rows still to come."""
        return [s for s in range(self.k) if self._left(s) == 0 and self.read[s] < self.total[s]]

    def feed(self, s: int, block: Block) -> None:
        if block.rows == 0 or self.read[s] + block.rows > self.total[s]:
            raise ValueError(f"source {s}: a block of {block.rows} rows after {self.read[s]} of {self.total[s]}")
        self.buf[s], self.pos[s] = block, 0
        self.read[s] += block.rows

    @property
    def done(self) -> bool:
        return all(self.read[s] == self.total[s] and self._left(s) == 0 for s in range(self.k))

    def take(self) -> Block | None:
        """The next safe rows in rank order, or None when every row is out."""
        if self.wants():
            raise RuntimeError("feed the sources that want a block first")
        live = [s for s in range(self.k) if self._left(s)]
        if not live:
            return None
        bound = None  # (source, row): the smallest last buffered key of a source with more to come
        for s in live:
            if self.read[s] < self.total[s]:
                b = self.buf[s]
                assert b is not None
                if bound is None or _less(b, b.rows - 1, self.buf[bound[0]], bound[1]):
                    bound = (s, b.rows - 1)
        segs, srcs = [], []
        for s in live:
            b = self.buf[s]
            assert b is not None
            start = self.pos[s]
            stop = b.rows if bound is None else _count_le(b, start, self.buf[bound[0]], bound[1])
            if stop > start:
                segs.append(b.slice(start, stop))
                srcs.append(s)
                self.pos[s] = stop
        if len(segs) == 1:
            return segs[0]
        return _merge(segs)


def _less(a: Block, i: int, b: Block, j: int) -> bool:
    """Row ``i`` of ``a`` sorts strictly before row ``j`` of ``b``."""
    pa, pb = int(a.primary[i]), int(b.primary[j])
    if pa != pb:
        return pa < pb
    if a.sub is not None and b.sub is not None:
        sa, sb = a.sub[i].tolist(), b.sub[j].tolist()
        if sa != sb:
            return sa < sb
    ta, tb = int(a.tie[i]), int(b.tie[j])
    if ta != tb:
        return ta < tb
    return a.raw_id(i) < b.raw_id(j)


def _count_le(b: Block, start: int, bb: Block, j: int) -> int:
    """The end of the rows of ``b`` from ``start`` whose key is at most row ``j`` of ``bb``. O(log n)."""
    p, t = bb.primary[j], bb.tie[j]
    prim = b.primary[start:]
    lo = start + int(np.searchsorted(prim, p, "left"))
    hi = start + int(np.searchsorted(prim, p, "right"))
    if lo == hi:
        return lo
    if b.sub is not None and bb.sub is not None:  # narrow by each subscore column in turn
        for c, x in enumerate(bb.sub[j].tolist()):
            col = b.sub[lo:hi, c]
            lo, hi = lo + int(np.searchsorted(col, x, "left")), lo + int(np.searchsorted(col, x, "right"))
            if lo == hi:
                return lo
    ties = b.tie[lo:hi]
    lo2 = lo + int(np.searchsorted(ties, t, "left"))
    hi2 = lo + int(np.searchsorted(ties, t, "right"))
    if lo2 == hi2:
        return lo2
    key = bb.raw_id(j)
    return lo2 + bisect.bisect_right([b.raw_id(i) for i in range(lo2, hi2)], key)


def _merge(segs: Sequence[Block]) -> Block:
    """Sorted segments (one per source) as one block in rank order."""
    allrows = concat(segs)
    src = np.concatenate([np.full(s.rows, k, np.int32) for k, s in enumerate(segs)])
    subs = [] if allrows.sub is None else [allrows.sub[:, c] for c in range(allrows.sub.shape[1])]
    # stable: a source's own order kept within equal keys
    order = np.lexsort((allrows.tie, *reversed(subs), allrows.primary))
    p, t = allrows.primary[order], allrows.tie[order]
    same = (p[1:] == p[:-1]) & (t[1:] == t[:-1])
    for col in subs:
        c = col[order]
        same &= c[1:] == c[:-1]
    if same.any():
        starts = np.flatnonzero(same & ~np.concatenate(([False], same[:-1])))
        for s in starts.tolist():
            e = s + 1
            while e < len(same) and same[e]:
                e += 1
            run = order[s:e + 1]
            if len(set(src[run].tolist())) > 1:  # a run from one source is in id order already
                order[s:e + 1] = sorted(run.tolist(), key=allrows.raw_id)
    return allrows.take(order)


# ------------------------------------------------------------------ chunks


class Chunk(NamedTuple):
    """Ranked rows of an export: ranks ``first_rank ..`` at ``version``.
    ``tied_rank``: competition ranks (``?ties=competition``), else None."""

    version: int
    first_rank: int
    rows: Block
    tied_rank: np.ndarray | None = None
    subscores: np.ndarray | None = None  # subscores boards: the rows' subscores as sent, (rows, k) int64

    def __len__(self) -> int:  # type: ignore[override]  # rows, not fields
        return self.rows.rows

    def entries(self) -> list[RankedEntry]:
        """The rows as ranking entries (tests, small consumers)."""
        tied = self.tied_rank.tolist() if self.tied_rank is not None else [None] * len(self)
        subs = [tuple(s) for s in self.subscores.tolist()] if self.subscores is not None else [None] * len(self)
        return [RankedEntry(self.first_rank + k, pid, v, a, tr, m, s) for k, (pid, v, a, tr, m, s) in enumerate(zip(
            self.rows.player_ids(), self.rows.value.tolist(), self.rows.achieved.tolist(), tied,
            self.rows.metadata(), subs))]


def key_subscores(subscores: np.ndarray, directions) -> np.ndarray:
    """Rows' subscores (rows, k) as a block's ``sub`` key columns: ``~s`` for
    a descending subscore, ``s`` for an ascending one (exact, no overflow)."""
    out = np.array(subscores, np.int64, copy=True).reshape(len(subscores), len(directions))
    for c, d in enumerate(directions):
        if d != "asc":
            np.invert(out[:, c], out=out[:, c])
    return out


def raw_subscores(sub: np.ndarray | None, directions) -> np.ndarray | None:
    """The inverse of :func:`key_subscores` (``~`` is its own inverse); None
    stays None (a board without subscores)."""
    return None if sub is None else key_subscores(sub, directions)


class TiedRanks:
    """Competition ranks (1, 1, 3) over a stream of rows in rank order: one
    plus the number of rows whose primary value is strictly better. Rows of
    equal value are adjacent in rank order, so a row's tied rank is the rank
    of the first row of its run of equal values. ``first_tied``: the tied rank
    of the first row (an export from rank 1 starts at 1)."""

    def __init__(self, first_tied: int = 1) -> None:
        self.prev_value: tuple | None = None
        self.prev_tied = first_tied

    def of(self, first_rank: int, value: np.ndarray, sub: np.ndarray | None = None) -> np.ndarray:
        """``sub``: on a board with subscores, the rows' subscore columns (in
        any fixed encoding): rows tie only when value and subscores are equal."""
        n = len(value)
        if not n:
            return np.zeros(0, np.int64)
        ranks = np.arange(first_rank, first_rank + n, dtype=np.int64)
        starts = np.ones(n, bool)
        starts[1:] = value[1:] != value[:-1]
        if sub is not None and sub.shape[1]:
            starts[1:] |= (sub[1:] != sub[:-1]).any(axis=1)

        def key(i: int) -> tuple:
            return (int(value[i]), *([] if sub is None else sub[i].tolist()))
        if self.prev_value is None:
            head = self.prev_tied
        else:
            starts[0] = key(0) != self.prev_value
            head = int(first_rank) if starts[0] else self.prev_tied
        marks = np.where(starts, ranks, 0)
        marks[0] = head
        out = np.maximum.accumulate(marks)
        self.prev_value, self.prev_tied = key(n - 1), int(out[-1])
        return out

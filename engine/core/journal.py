"""A partition's event journal: every event it saw, on disk, with a bounded tail in memory.

One journal row per event that reached the partition (applied, guard-rejected,
decided before apply, invalidation and decision records): the player's index,
kind, value, timestamps, outcome code, the event id and ``prev``, the row of
the same player's previous event. It answers three questions, none of which
may cost memory per event (issue 10 item 4):

* **the events of one player** (invalidation recompute, the history route):
  the partition keeps each player's newest row (``heads``, 8 bytes per
  player) and the rows chain backwards through ``prev``; O(that player's
  events), one 48-byte read each from disk;
* **the row of an event id** (invalidation, ``owns_event``) and
* **was this id applied here before** (redeliveries older than the board's
  dedup window): an index from the 64-bit hash of an id to the row of the
  event that owned it (the one the comparator saw), verified on the id bytes.

Each row also keeps its event's metadata (docs/api.md §13: canonical compact
JSON, empty for none), so a redelivery is compared on it and an invalidation
restores the metadata of the event that gives the row its value. On disk it
is the ``meta`` file (the bytes) and the ``moffs`` file (per row from
``meta_from`` on, the int64 end of its metadata in ``meta``): 8 bytes per
row, on disk only. A journal begun by a FlowRank without metadata (a
format-2 snapshot) starts its ``moffs`` at the row it had then
(``meta_from``); its older rows carry none.

Layout. The newest rows (at most ``tail_rows``, plus one batch) are columns
in memory, with an open-addressing table over the ids they own, exactly as a
batch kernel wants them. Between batches a full tail is *flushed*: its rows
go to the store's ``rows`` file (fixed 48-byte records, :data:`ROW`), their
ids to the ``ids`` file, and the (hash, row) pairs of the ids it owns become
one sorted *run*. Runs merge by size (each run at least twice the size of
the next one), so a board keeps O(log(events / tail_rows)) of them, and a
batch looks all of its ids up in each run with one kernel call, which an
in-memory fence (every 64th hash) narrows to one block of the run per id.
A merge may also be built away from the journal (:meth:`Journal.plan_merge`,
:func:`build_merge` on another thread, :meth:`Journal.finish_merge`): the
two runs stay, and serve lookups, until the merged one is swapped in.

Memory: the tail (bounded), the heads (per player), the ids of invalidated
events (per invalidation) and one merge block. The runs are mapped files,
but a batch's lookups hold their pages only while they run
(:meth:`Run.drop_pages`): the pages stay in the kernel's page cache, not in
the process. A merge streams its two runs into
the new one a block at a time. What grows with events is on disk, where the store
puts it: ``FileStore`` (:mod:`engine.log.journal_files`: files in a
directory, fsync'd at each snapshot, never rewritten in place but by a
scrub, so truncating them to a snapshot's sizes restores them) or
:class:`MemoryStore` (the same bytes in memory, for tests and the in-memory
service). This module does no I/O of its own: the store is handed in.

Scrubbing (issue 28, forgetting a player): :meth:`Journal.scrub` overwrites
the event ids and metadata of given rows with as many zero bytes, in the
tail and in place in the files (every offset stays valid, and so does every
record and ``prev`` chain), and removes the rows from the owner table and
the runs (a run holding any is written again, under a new sequence number,
without them; a stored row also loses its ``OWNED`` bit, so a rebuild of the
runs leaves it out). A scrub is the one edit in place, and it is not undone
by truncating the files: a journal reopened from a snapshot older than the
scrub has the scrubbed bytes of its stored rows zeroed and its stale runs
rebuilt, while its tail (from the snapshot) still holds them until the
scrub is applied again (it is idempotent: rows are found in runs by number).

A snapshot (:meth:`Journal.to_state`) holds the tail, the sizes of the
files, the runs, and the store's identity; :meth:`Journal.from_state` truncates
the files to those sizes and raises :class:`JournalLost` when they are not
there (another machine, a wiped directory): the shard then rebuilds the whole
partition from the log.
"""

from __future__ import annotations

import mmap
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, NamedTuple, Protocol

import numba
import numpy as np

from engine.core.players import decode_id, hash_bytes, same_bytes

KIND_SCORE, KIND_INVALIDATION, KIND_DECISION = 0, 1, 2
KIND_NAMES = ("score", "invalidation", "decision")
# journal-only outcome codes (records.CODE covers Outcome, below 100)
INVALIDATED, ALREADY_INVALIDATED, REJECTED = 101, 102, 103
AUDIT_NAMES = {INVALIDATED: "INVALIDATED", ALREADY_INVALIDATED: "ALREADY_INVALIDATED", REJECTED: "REJECTED"}

TAIL_ROWS = 1 << 18  # rows kept in memory before a flush (about 17 MB at 12-byte ids)
OWNED = 0x80  # on disk: bit of ``kind`` set on a row that owns its event id
ROW = np.dtype([("pid", "<i4"), ("kind", "u1"), ("out", "u1"), ("elen", "<u2"), ("val", "<i8"),
                ("ach", "<i8"), ("sub", "<i8"), ("prev", "<i8"), ("eoff", "<i8")])
assert ROW.itemsize == 48


@dataclass(frozen=True)
class JournalPlace:
    """Where a shard keeps its partitions' journals: ``root`` (one
    subdirectory per partition; None: in memory) and the tail size."""

    root: str | None = None
    tail_rows: int = TAIL_ROWS


class JournalColumns(NamedTuple):
    """Consecutive journal rows as columns (what an archive keeps of a
    partition's history, docs/storage.md "Archives"): per row the player's
    index, kind, outcome code, value, achieved_at, submitted_at, whether a
    later invalidation made its event invalid, and its event id and metadata
    (b"" none) as byte arenas with int64 offsets (``rows + 1``, from 0). A
    scrubbed row (:meth:`Journal.scrub`) has as many zero bytes as its id
    and metadata had: its offsets are the ones it always had."""

    pid: np.ndarray
    kind: np.ndarray
    out: np.ndarray
    val: np.ndarray
    ach: np.ndarray
    sub: np.ndarray
    earena: np.ndarray
    eoffs: np.ndarray
    marena: np.ndarray
    moffs: np.ndarray
    invalid: np.ndarray

    @property
    def n(self) -> int:
        """How many rows."""
        return len(self.pid)

    @classmethod
    def empty(cls) -> "JournalColumns":
        z8, zi = np.zeros(0, np.uint8), np.zeros(0, np.int64)
        return cls(np.zeros(0, np.int32), z8, z8, zi, zi, zi, z8, np.zeros(1, np.int64), z8, np.zeros(1, np.int64),
                   np.zeros(0, np.bool_))

    @classmethod
    def concat(cls, parts: "list[JournalColumns]") -> "JournalColumns":
        """Rows of many chunks, in order (arenas joined, offsets shifted)."""
        if not parts:
            return cls.empty()
        if len(parts) == 1:
            return parts[0]

        def offsets(name: str) -> np.ndarray:
            out, base = [np.zeros(1, np.int64)], 0
            for p in parts:
                o = getattr(p, name)
                out.append(o[1:] + base)
                base += int(o[-1])
            return np.concatenate(out)
        return cls(*(np.concatenate([getattr(p, f) for p in parts]) if f not in ("eoffs", "moffs") else offsets(f)
                     for f in cls._fields))

    def to_wire(self) -> list[bytes]:
        """Little-endian bytes, one per column (what a shard sends the router)."""
        return [np.ascontiguousarray(c, WIRE_DTYPES[f]).tobytes() for f, c in zip(self._fields, self)]

    @classmethod
    def from_wire(cls, wire: list[bytes]) -> "JournalColumns":
        return cls(*(np.frombuffer(b, WIRE_DTYPES[f]) for f, b in zip(cls._fields, wire)))


WIRE_DTYPES = {"pid": "<i4", "kind": "u1", "out": "u1", "val": "<i8", "ach": "<i8", "sub": "<i8", "earena": "u1",
               "eoffs": "<i8", "marena": "u1", "moffs": "<i8", "invalid": "?"}


class JournalLost(Exception):
    """The journal files a snapshot names are gone or shorter than it says."""


# ----------------------------------------------------------------- kernels


@numba.njit(cache=True)
def owner_find(slots, j_eoffs, j_earena, buf, s0, s1, h):
    """Tail row of the owned event whose id is ``buf[s0:s1]`` (whose
    ``hash_bytes`` is ``h``), or -1."""
    mask = len(slots) - 1
    pos = np.int64(h & np.uint64(mask))
    while True:
        r = slots[pos]
        if r < 0:
            return -1
        if same_bytes(j_earena, j_eoffs[r], j_eoffs[r + 1], buf, s0, s1):
            return r
        pos = (pos + 1) & mask


@numba.njit(cache=True)
def owner_add(slots, r, h):
    """Link tail row ``r``, whose id hashes (``hash_bytes``) to ``h``."""
    mask = len(slots) - 1
    pos = np.int64(h & np.uint64(mask))
    while slots[pos] >= 0:
        pos = (pos + 1) & mask
    slots[pos] = r


@numba.njit(cache=True)
def _rehash_owned(slots, j_eoffs, j_earena, owned_rows):
    slots[:] = -1
    for r in owned_rows:
        owner_add(slots, r, hash_bytes(j_earena, j_eoffs[r], j_eoffs[r + 1]))


@numba.njit(cache=True)
def hash_ids(buf, offs, sel):
    """64-bit hashes of the ids ``sel`` of a buffer (as the owner table hashes them)."""
    out = np.empty(len(sel), np.uint64)
    for k in range(len(sel)):
        i = sel[k]
        out[k] = hash_bytes(buf, offs[i], offs[i + 1])
    return out


@numba.njit(cache=True)
def copy_ranges(dst, dst_at, src, src_at, lens):
    """``dst[dst_at[k]:+lens[k]] = src[src_at[k]:+lens[k]]`` for every k."""
    for k in range(len(lens)):
        d, s = dst_at[k], src_at[k]
        for q in range(lens[k]):
            dst[d + q] = src[s + q]


@numba.njit(cache=True)
def zero_ranges(buf, starts, lens):
    """Zero ``buf[starts[k]:+lens[k]]`` for every k; returns the bytes zeroed."""
    done = 0
    for k in range(len(lens)):
        buf[starts[k]:starts[k] + lens[k]] = 0
        done += lens[k]
    return done


def gather_ranges(buf: np.ndarray, starts: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """The ranges ``buf[starts[k]:+lens[k]]``, one after another, as a new array."""
    at = np.zeros(len(lens), np.int64)
    np.cumsum(lens[:-1], out=at[1:])
    out = np.empty(int(lens.sum()), np.uint8)
    copy_ranges(out, at, buf, starts, lens)
    return out


def scatter_ranges(buf: np.ndarray, starts: np.ndarray, lens: np.ndarray, src: np.ndarray) -> None:
    """Write ``src``'s consecutive slices of ``lens`` at ``starts`` of ``buf``."""
    at = np.zeros(len(lens), np.int64)
    np.cumsum(lens[:-1], out=at[1:])
    copy_ranges(buf, starts, src, at, lens)


@numba.njit(cache=True)
def chain_prev(pid, heads, base, prev):
    """``prev`` of rows ``base..base+len(pid)`` and the heads after them."""
    for k in range(len(pid)):
        p = pid[k]
        prev[k] = heads[p]
        heads[p] = base + k


# ------------------------------------------------------------------ stores


class MemoryBlob:
    """An append-only byte file, in memory (edited in place only by a scrub)."""

    def __init__(self, data: bytes = b"") -> None:
        self.data = bytearray(data)

    @property
    def size(self) -> int:
        return len(self.data)

    def append(self, b: bytes) -> None:
        self.data += b

    def read(self, off: int, n: int) -> bytes:
        return bytes(self.data[off:off + n])

    def gather(self, starts: np.ndarray, lens: np.ndarray) -> np.ndarray:
        """Many ranges at once, one after another (:func:`gather_ranges`)."""
        view = np.frombuffer(self.data, np.uint8)  # released before the bytearray may grow again
        try:
            return gather_ranges(view, _i64(starts), _i64(lens))
        finally:
            del view

    def scatter(self, starts: np.ndarray, lens: np.ndarray, src: np.ndarray) -> None:
        """Overwrite many ranges in place (:func:`scatter_ranges`)."""
        view = np.frombuffer(self.data, np.uint8)
        try:
            scatter_ranges(view, _i64(starts), _i64(lens), np.ascontiguousarray(src, np.uint8))
        finally:
            del view

    def zero(self, starts: np.ndarray, lens: np.ndarray) -> int:
        """Overwrite many ranges with zero bytes in place; returns how many bytes."""
        view = np.frombuffer(self.data, np.uint8)
        try:
            return int(zero_ranges(view, _i64(starts), _i64(lens)))
        finally:
            del view

    def sync(self) -> None:
        pass



FENCE = 64  # a run keeps every FENCE-th hash in memory (0.125 bytes per owned id)
MERGE_BLOCK = 1 << 18  # entries per block of a run merge (4 MiB of buffers, whatever the runs' size)


@numba.njit(cache=True)
def probe_run(hashes, fence, queries):
    """For each query hash, the first position of it in the sorted ``hashes``,
    or -1. The in-memory ``fence`` (every FENCE-th hash) narrows each search
    to one block, so a lookup reads one block of the run, not a whole binary
    search's path through it (fewer cache misses; fewer pages mapped)."""
    out = np.full(len(queries), -1, np.int64)
    n = len(hashes)
    for k in range(len(queries)):
        q = queries[k]
        b = np.searchsorted(fence, q, side="left")  # fence[b-1] < q <= fence[b]
        lo = 0 if b == 0 else (b - 1) * FENCE
        hi = min(n, b * FENCE + 1)
        while lo < hi:  # first position with hashes[pos] >= q, within the block
            mid = (lo + hi) // 2
            if hashes[mid] < q:
                lo = mid + 1
            else:
                hi = mid
        if lo < n and hashes[lo] == q:
            out[k] = lo
    return out


@numba.njit(cache=True, nogil=True)
def merge_block(ah, ar, bh, br, i, j, out_h, out_r):
    """Merge the sorted runs ``(ah, ar)`` from ``i`` and ``(bh, br)`` from
    ``j`` into ``out_h``/``out_r`` until they are full or both runs are done;
    equal hashes take ``a``'s first (the order a stable sort of ``a`` then
    ``b`` gives). Returns the new ``i``, ``j`` and the entries written."""
    k, na, nb, cap = 0, len(ah), len(bh), len(out_h)
    while k < cap and (i < na or j < nb):
        if j >= nb or (i < na and ah[i] <= bh[j]):
            out_h[k] = ah[i]
            out_r[k] = ar[i]
            i += 1
        else:
            out_h[k] = bh[j]
            out_r[k] = br[j]
            j += 1
        k += 1
    return i, j, k


class Run:
    """Sorted (hash, row) pairs of the ids one or more flushed tails own,
    and their fence (every FENCE-th hash, in memory)."""

    def __init__(self, seq: int, hashes: np.ndarray, rows: np.ndarray, fence: np.ndarray | None = None,
                 mapping: mmap.mmap | None = None) -> None:
        """``fence``: taken from ``hashes`` when not given (a run just written
        passes the one of its in-memory hashes, so building it maps no page
        of the file). ``mapping``: the file mapping ``hashes`` and ``rows``
        view, when they are one (see :meth:`drop_pages`)."""
        self.seq, self.hashes, self.rows = seq, hashes, rows
        self.fence = np.ascontiguousarray(hashes[::FENCE], np.uint64) if fence is None else fence
        self.mapping = mapping

    def __len__(self) -> int:
        return len(self.hashes)

    def drop_pages(self) -> None:
        """Unmap the pages of a mapped run from the process (``MADV_DONTNEED``):
        they stay in the page cache, and the next read of one maps it again
        with a minor fault. No-op in memory.

        Without it every page of every run would end up mapped, and the
        process's RSS would grow with events: one read maps a whole folio of
        the page cache (up to 2 MiB on ext4 with large folios). Dropping the
        pages after each batch's lookups cost +0.4 us per lookup on a
        160 MB run (2 cores, Linux 6.18)."""
        if self.mapping is not None:
            self.mapping.madvise(mmap.MADV_DONTNEED)


class MergePlan(NamedTuple):
    """A run merge to build away from the journal (:meth:`Journal.plan_merge`)."""

    a: Run
    b: Run
    seq: int
    store: "Store"


def build_merge(plan: MergePlan) -> Run:
    """The merged run of ``plan`` written under its sequence number: only the
    two runs (never changed once written) and a new file are touched, so it
    may run on another thread while the journal goes on (numba's merge kernel
    releases the interpreter lock). O(the two runs), memory one block."""
    return plan.store.write_run_blocks(plan.seq, len(plan.a) + len(plan.b), merged_blocks(plan.a, plan.b))


def merged_blocks(a: Run, b: Run, size: int = MERGE_BLOCK) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """The merge of runs ``a`` (older) and ``b`` as blocks of at most ``size``
    entries (``size`` a multiple of FENCE). Each block is a view of one
    reused buffer, valid until the next is asked for: memory O(size), not
    O(the runs), and the runs' pages are dropped as the merge goes."""
    out_h, out_r = np.empty(size, np.uint64), np.empty(size, np.int64)
    i = j = 0
    while i < len(a) or j < len(b):
        i, j, k = merge_block(a.hashes, a.rows, b.hashes, b.rows, i, j, out_h, out_r)
        yield out_h[:k], out_r[:k]
        a.drop_pages()
        b.drop_pages()


def kept_blocks(run: Run, drop: np.ndarray, size: int = MERGE_BLOCK) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """The entries of ``run`` whose row is not in ``drop`` (sorted), in order,
    as blocks of ``size`` entries (a multiple of FENCE; the last may be
    shorter), each a view of one reused buffer valid until the next is asked
    for (as :func:`merged_blocks`). One pass over the run; memory O(size)."""
    out_h, out_r = np.empty(size, np.uint64), np.empty(size, np.int64)
    k = 0
    for a in range(0, len(run), size):
        rows = np.asarray(run.rows[a:a + size], np.int64)
        keep = ~_members(rows, drop)
        h, r = np.asarray(run.hashes[a:a + size], np.uint64)[keep], rows[keep]
        at = 0
        while at < len(h):
            m = min(size - k, len(h) - at)
            out_h[k:k + m], out_r[k:k + m] = h[at:at + m], r[at:at + m]
            k, at = k + m, at + m
            if k == size:
                yield out_h, out_r
                k = 0
        run.drop_pages()
    if k:
        yield out_h[:k], out_r[:k]


def _members(values: np.ndarray, sorted_set: np.ndarray) -> np.ndarray:
    """Which ``values`` are in ``sorted_set`` (sorted, distinct). O(n log k)."""
    if not len(sorted_set):
        return np.zeros(len(values), np.bool_)
    at = np.minimum(np.searchsorted(sorted_set, values), len(sorted_set) - 1)
    return sorted_set[at] == values


def run_holds(run: Run, rows: np.ndarray, size: int = MERGE_BLOCK) -> int:
    """How many entries of ``run`` point at ``rows`` (sorted, distinct): one
    pass over the run's rows, a block at a time."""
    hits = 0
    for a in range(0, len(run), size):
        hits += int(_members(np.asarray(run.rows[a:a + size], np.int64), rows).sum())
    run.drop_pages()
    return hits


class MemoryStore:
    """Journal files in memory: what :class:`FileStore` writes, as bytes."""

    def __init__(self, state: dict | None = None) -> None:
        state = state or {}
        self.rows = MemoryBlob(state.get("rows", b""))
        self.ids = MemoryBlob(state.get("ids", b""))
        self.meta = MemoryBlob(state.get("meta", b""))
        self.moffs = MemoryBlob(state.get("moffs", b""))
        self._runs: dict[int, tuple[bytes, bytes]] = {int(s): (h, r) for s, h, r in state.get("runs", [])}

    def write_run(self, seq: int, hashes: np.ndarray, rows: np.ndarray) -> Run:
        return self.write_run_blocks(seq, len(hashes), [(hashes, rows)])

    def write_run_blocks(self, seq: int, n: int, blocks: Iterable[tuple[np.ndarray, np.ndarray]]) -> Run:
        hs, rs = [], []
        for h, r in blocks:  # each block's buffer may be reused: copy it now
            hs.append(h.astype("<u8").tobytes())
            rs.append(r.astype("<i8").tobytes())
        if sum(map(len, hs)) != 8 * n:
            raise ValueError(f"run {seq}: {sum(map(len, hs)) // 8} entries written, {n} announced")
        self._runs[seq] = (b"".join(hs), b"".join(rs))
        return self.load_run(seq, n)

    def load_run(self, seq: int, n: int) -> Run:
        h, r = self._runs[seq]
        return Run(seq, np.frombuffer(h, "<u8"), np.frombuffer(r, "<i8"))

    def delete_run(self, seq: int) -> None:
        self._runs.pop(seq, None)

    def sync(self, runs: list[Run]) -> None:
        pass

    def to_state(self, runs: list[Run], sync: bool = True) -> dict:
        return {"memory": True, "rows": bytes(self.rows.data), "ids": bytes(self.ids.data),
                "meta": bytes(self.meta.data), "moffs": bytes(self.moffs.data),
                "runs": [[r.seq, *self._runs[r.seq]] for r in runs]}

    def sync_later(self, runs: list[Run]) -> Callable[[], None]:
        return _nothing

    def close(self) -> None:
        pass


class Blob(Protocol):
    """One of a store's byte files: appended to at the end, read anywhere,
    and edited in place only by a scrub (gather, scatter, zero), then synced."""

    @property
    def size(self) -> int: ...
    def append(self, b: bytes) -> None: ...
    def read(self, off: int, n: int) -> bytes: ...
    def gather(self, starts: np.ndarray, lens: np.ndarray) -> np.ndarray: ...
    def scatter(self, starts: np.ndarray, lens: np.ndarray, src: np.ndarray) -> None: ...
    def zero(self, starts: np.ndarray, lens: np.ndarray) -> int: ...
    def sync(self) -> None: ...


class Store(Protocol):
    """Where a journal's rows, ids and runs live (MemoryStore here; the
    file-backed one is engine.log.journal_files.FileStore)."""

    rows: Blob
    ids: Blob
    meta: Blob
    moffs: Blob

    def write_run(self, seq: int, hashes: np.ndarray, rows: np.ndarray) -> Run: ...
    def write_run_blocks(self, seq: int, n: int, blocks: Iterable[tuple[np.ndarray, np.ndarray]]) -> Run: ...
    def load_run(self, seq: int, n: int) -> Run: ...
    def delete_run(self, seq: int) -> None: ...
    def sync(self, runs: list[Run]) -> None: ...
    def to_state(self, runs: list[Run], sync: bool = True) -> dict: ...
    def sync_later(self, runs: list[Run]) -> Callable[[], None]: ...
    def close(self) -> None: ...


class StorePlace(Protocol):
    """Where one partition's journal store lives: a fresh (empty) store, or
    the store a snapshot left (from the ``"store"`` part of its state; raises
    JournalLost when it is not there as the snapshot left it)."""

    def fresh(self) -> Store: ...
    def reopen(self, state: dict) -> Store: ...


# ----------------------------------------------------------------- journal


class Journal:
    """See the module docstring. Row numbers are global: rows ``< base`` are
    in the store, rows ``base .. base + n`` are the tail (local index ``r - base``)."""

    def __init__(self, store: Store | None = None, tail_rows: int = TAIL_ROWS) -> None:
        self.store: Store = MemoryStore() if store is None else store
        self.tail_rows = tail_rows
        self.scrub_pending = np.zeros(0, np.int64)  # stored rows scrubbed with runs=False: run entries still to go
        self.base = 0
        self.n = 0
        self.owned = 0
        cap = 64
        self.pid = np.zeros(cap, np.int32)
        self.kind = np.zeros(cap, np.uint8)
        self.out = np.zeros(cap, np.uint8)
        self.val = np.zeros(cap, np.int64)
        self.ach = np.zeros(cap, np.int64)
        self.sub = np.zeros(cap, np.int64)
        self.prev = np.zeros(cap, np.int64)
        self.eoffs = np.zeros(cap + 1, np.int64)
        self.earena = np.zeros(1024, np.uint8)
        self.moffs = np.zeros(cap + 1, np.int64)  # tail metadata: row t's is marena[moffs[t]:moffs[t + 1]]
        self.marena = np.zeros(64, np.uint8)
        self.meta_from = 0  # first row with an entry in the store's moffs file
        self.slots = np.full(128, -1, np.int64)
        self.heads = np.full(64, -1, np.int64)  # per player: newest row, -1 none
        self.invalid: set[int] = set()  # rows of invalidated events
        self.runs: list[Run] = []
        self.next_seq = 0
        # None: merges run inline; else the hook a flush calls when a merge is due (_merge_runs)
        self.merges_elsewhere: Callable[["Journal"], None] | None = None

    def __len__(self) -> int:
        return self.base + self.n

    # ------------------------------------------------------------ writing

    def ensure_players(self, n: int) -> None:
        if n > len(self.heads):
            size = len(self.heads)
            while n > size:
                size += size // 4 + 64
            self.heads = np.concatenate([self.heads, np.full(size - len(self.heads), -1, np.int64)])

    def reserve(self, k: int, nbytes: int, mbytes: int = 0) -> None:
        """Room for ``k`` more tail rows (all possibly owned) with ``nbytes``
        of ids and ``mbytes`` of metadata; flushes a full tail first (between
        batches only)."""
        if self.n and self.n + k > self.tail_rows:
            self.flush()
        n = self.n
        if n + k > len(self.pid):
            size = len(self.pid)
            while n + k > size:
                size *= 2
            for name in ("pid", "kind", "out", "val", "ach", "sub", "prev"):
                setattr(self, name, _resized(getattr(self, name), size))
            self.eoffs = _resized(self.eoffs, size + 1)
            self.moffs = _resized(self.moffs, size + 1)
        if self.moffs[n] + mbytes > len(self.marena):
            size = len(self.marena)
            while self.moffs[n] + mbytes > size:
                size *= 2
            self.marena = _resized(self.marena, size)
        if self.eoffs[n] + nbytes > len(self.earena):
            size = len(self.earena)
            while self.eoffs[n] + nbytes > size:
                size *= 2
            self.earena = _resized(self.earena, size)
        if 2 * (self.owned + k) > len(self.slots):
            size = len(self.slots)
            while 2 * (self.owned + k) > size:
                size *= 2
            rows = self.owned_tail_rows()
            self.slots = np.empty(size, np.int64)
            _rehash_owned(self.slots, self.eoffs, self.earena, rows)

    def append_one(self, p: int, eid: str, kind: int, v: int, a: int, s: int, code: int) -> int:
        """Journal one row (an audit record, no metadata); returns its row number."""
        raw = eid.encode("utf-8", "surrogatepass")
        self.reserve(1, len(raw))
        n = self.n
        self.moffs[n + 1] = self.moffs[n]
        self.pid[n], self.kind[n], self.val[n], self.ach[n], self.sub[n], self.out[n] = p, kind, v, a, s, code
        self.prev[n] = self.heads[p]
        self.heads[p] = self.base + n
        e0 = int(self.eoffs[n])
        self.earena[e0:e0 + len(raw)] = np.frombuffer(raw, np.uint8)
        self.eoffs[n + 1] = e0 + len(raw)
        self.n = n + 1
        return self.base + n

    def owned_tail_rows(self) -> np.ndarray:
        return self.slots[self.slots >= 0]

    def flush(self) -> None:
        """Move the tail to the store: rows, ids and one run of its owned ids."""
        n = self.n
        if n == 0:
            return
        owned = np.sort(self.owned_tail_rows())
        rec = np.zeros(n, ROW)
        rec["pid"], rec["out"] = self.pid[:n], self.out[:n]
        kind = self.kind[:n].copy()
        kind[owned] |= OWNED
        rec["kind"] = kind
        rec["val"], rec["ach"], rec["sub"], rec["prev"] = self.val[:n], self.ach[:n], self.sub[:n], self.prev[:n]
        rec["elen"] = np.diff(self.eoffs[: n + 1])
        rec["eoff"] = self.store.ids.size + self.eoffs[:n]
        self.store.ids.append(self.earena[: self.eoffs[n]].tobytes())
        self.store.moffs.append((self.store.meta.size + self.moffs[1: n + 1]).astype("<i8").tobytes())
        self.store.meta.append(self.marena[: self.moffs[n]].tobytes())
        self.store.rows.append(rec.tobytes())
        hashes = hash_ids(self.earena, self.eoffs, owned)
        order = np.argsort(hashes)  # ids are distinct: equal hashes are collisions, in any order
        self.runs.append(self.store.write_run(self.next_seq, hashes[order], self.base + owned[order]))
        self.next_seq += 1
        self.base += n
        self.n = 0
        self.owned = 0
        self.eoffs[0] = 0
        self.moffs[0] = 0
        self.slots.fill(-1)  # the next tail fills as this one did: keep the size, skip the doublings
        self._merge_runs()

    def _merge_runs(self) -> None:
        """Keep each run at least twice the size of the next (newer) one:
        merge the newest pair that is not, until none is. After a flush only
        the newest pair can be (a scrub shrinks runs anywhere).

        With ``merges_elsewhere`` set (a shard actor, issue 29 item 2) it merges
        nothing: it calls that hook with this journal instead, and the caller runs :meth:`plan_merge`,
        :func:`build_merge` (on another thread) and :meth:`finish_merge`, one pair at a time."""
        if self.merges_elsewhere is not None:
            if self.due_pair() is not None:
                self.merges_elsewhere(self)
            return
        while True:
            pair = self.due_pair()
            if pair is None:
                return
            a, b = pair
            run = self.store.write_run_blocks(self.next_seq, len(a) + len(b), merged_blocks(a, b))
            self.next_seq += 1
            self._swap(a, b, run)

    def due_pair(self) -> tuple[Run, Run] | None:
        """The newest pair of runs out of size order (the next merge due), or None."""
        runs = self.runs
        i = next((i for i in range(len(runs) - 1, 0, -1) if len(runs[i - 1]) <= 2 * len(runs[i])), 0)
        return (runs[i - 1], runs[i]) if i else None

    def _swap(self, a: Run, b: Run, run: Run) -> None:
        i = self.runs.index(a)
        self.runs[i:i + 2] = [run]
        self.store.delete_run(a.seq)
        self.store.delete_run(b.seq)

    def plan_merge(self) -> "MergePlan | None":
        """The next merge due (the newest pair of runs out of size order) with
        its run's sequence number taken, or None. O(runs)."""
        pair = self.due_pair()
        if pair is None:
            return None
        self.next_seq += 1
        return MergePlan(pair[0], pair[1], self.next_seq - 1, self.store)

    def finish_merge(self, plan: "MergePlan", run: Run | None) -> bool:
        """Swap in ``run``, the merge :func:`build_merge` made of ``plan``, when
        its two runs are still next to each other here (a scrub, which rewrites
        runs, or a close may have replaced them meanwhile: then the merged file
        is deleted and nothing changes). ``run`` None: the build failed (what
        it wrote, if anything, is deleted). Whether it was swapped in. O(runs)."""
        i = next((k for k, r in enumerate(self.runs) if r is plan.a), -1)
        if run is None or i < 0 or i + 1 >= len(self.runs) or self.runs[i + 1] is not plan.b:
            plan.store.delete_run(plan.seq)
            return False
        self._swap(plan.a, plan.b, run)
        return True

    # ------------------------------------------------------------ scrubbing

    def scrub(self, rows: np.ndarray, runs: bool = True) -> int:
        """Forget the event ids and metadata of journal rows ``rows`` (tail or
        stored; issue 28): their bytes become as many zero bytes, in the tail
        arenas and in the store's ``ids`` and ``meta`` files (so every offset
        stays valid), a stored row loses its ``OWNED`` bit, and the rows leave
        the tail's owner table and every run (a run holding any of them is
        written again under a new sequence number without them, the old file
        deleted; then runs merge by size again). The store is synced last.

        After it :meth:`find` and :meth:`find_stored` answer -1 for those ids
        (unless another, unscrubbed row owns the same id), :meth:`id_bytes`,
        :meth:`meta_bytes` and :meth:`columns` hand back the zero bytes (the
        original lengths), and everything else (records, ``prev`` chains,
        heads, invalidated rows) is unchanged. Returns the id and metadata
        bytes overwritten.

        ``runs=False`` leaves the run files for :meth:`scrub_runs` (an erasure's
        apply defers them to the erasure job, so a burst of erasures rewrites
        each run once); the rows wait in ``scrub_pending`` (kept in the state).

        Idempotent: a row is found in the runs by its row number, not its id,
        so scrubbing rows again (a scrub redone after a crash) finds nothing
        left to remove and zeroes zeros. Raises ValueError for a row past the
        journal. Columnar: one gather of the rows' records, one zeroing pass
        per file, one pass per run file. O(rows + their bytes + run sizes)."""
        rows = np.unique(np.asarray(rows, np.int64))
        if len(rows) and (rows[0] < 0 or rows[-1] >= len(self)):
            raise ValueError(f"rows {rows[0]}..{rows[-1]}: the journal holds {len(self)}")
        cut = int(np.searchsorted(rows, self.base))
        wiped = self._scrub_tail(rows[cut:] - self.base)
        stored = rows[:cut]
        if len(stored):
            wiped += self._scrub_stored(stored)
            if runs:
                self._scrub_runs(stored)
                self.store.sync(self.runs)
            else:  # later, in a batch (scrub_runs, which syncs): a run hit is verified on the now zero id bytes
                # meanwhile; the zeroed bytes are durable at the next snapshot (to_state fsyncs the files), and a
                # replay from an older one scrubs them again
                self.scrub_pending = np.union1d(self.scrub_pending, stored).astype(np.int64)
        return wiped

    @property
    def holds_pending_scrub(self) -> bool:
        return bool(len(self.scrub_pending))

    def scrub_runs(self) -> int:
        """The run files' part of the scrubs made with ``runs=False``, all at once: every run holding an
        entry of a pending row is written again without them. Returns how many rows were pending."""
        pending = self.scrub_pending
        if not len(pending):
            return 0
        self._scrub_runs(pending)
        self.store.sync(self.runs)
        self.scrub_pending = np.zeros(0, np.int64)
        return len(pending)

    def _scrub_tail(self, t: np.ndarray) -> int:
        """Tail rows ``t`` (local, sorted): zero their bytes, unlink them from the owner table."""
        if not len(t):
            return 0
        wiped = int(zero_ranges(self.earena, self.eoffs[t], self.eoffs[t + 1] - self.eoffs[t]))
        wiped += int(zero_ranges(self.marena, self.moffs[t], self.moffs[t + 1] - self.moffs[t]))
        owned = self.owned_tail_rows()
        keep = owned[~_members(owned, t)]
        if len(keep) != len(owned):
            _rehash_owned(self.slots, self.eoffs, self.earena, keep)
            self.owned = len(keep)
        return wiped

    def _scrub_stored(self, s: np.ndarray) -> int:
        """Stored rows ``s`` (sorted): zero their ids and metadata in the files, clear their OWNED bits."""
        size = ROW.itemsize
        rec = self.store.rows.gather(s * size, np.full(len(s), size, np.int64)).view(ROW)
        wiped = self.store.ids.zero(rec["eoff"].astype(np.int64), rec["elen"].astype(np.int64))
        i = s[s >= self.meta_from] - self.meta_from  # entries of the moffs file: the end of each row's metadata
        if len(i):
            eight = np.full(len(i), 8, np.int64)
            ends = self.store.moffs.gather(8 * i, eight).view("<i8").astype(np.int64)
            starts = np.zeros(len(i), np.int64)
            after = i > 0
            starts[after] = self.store.moffs.gather(8 * (i[after] - 1), eight[after]).view("<i8")
            wiped += self.store.meta.zero(starts, ends - starts)
        owned = (rec["kind"] & OWNED) != 0
        if owned.any():
            kind_at = ROW.fields["kind"][1]
            self.store.rows.scatter(s[owned] * size + kind_at, np.ones(int(owned.sum()), np.int64),
                                    rec["kind"][owned] & np.uint8(~OWNED & 0xFF))
        return wiped

    def _scrub_runs(self, s: np.ndarray) -> None:
        """Write every run holding an entry of rows ``s`` again without them
        (new sequence number; the old file deleted once its successor is
        written), drop runs left empty, merge by size."""
        runs = []
        for run in self.runs:
            gone = run_holds(run, s)
            if not gone:
                runs.append(run)
                continue
            if gone < len(run):
                runs.append(self.store.write_run_blocks(self.next_seq, len(run) - gone, kept_blocks(run, s)))
                self.next_seq += 1
            self.store.delete_run(run.seq)
        self.runs = runs
        self._merge_runs()

    # ------------------------------------------------------------ reading

    def record(self, r: int) -> tuple[int, int, int, int, int, int, int]:
        """``(pid, kind, out, val, ach, sub, prev)`` of row ``r``."""
        if r >= self.base:
            t = r - self.base
            return (int(self.pid[t]), int(self.kind[t]), int(self.out[t]), int(self.val[t]), int(self.ach[t]),
                    int(self.sub[t]), int(self.prev[t]))
        x = np.frombuffer(self.store.rows.read(r * ROW.itemsize, ROW.itemsize), ROW)[0]
        return (int(x["pid"]), int(x["kind"]) & ~OWNED, int(x["out"]), int(x["val"]), int(x["ach"]),
                int(x["sub"]), int(x["prev"]))

    def id_bytes(self, r: int) -> bytes:
        if r >= self.base:
            t = r - self.base
            return self.earena[self.eoffs[t]:self.eoffs[t + 1]].tobytes()
        x = np.frombuffer(self.store.rows.read(r * ROW.itemsize, ROW.itemsize), ROW)[0]
        return self.store.ids.read(int(x["eoff"]), int(x["elen"]))

    def meta_bytes(self, r: int) -> bytes:
        """The metadata of row ``r``'s event (b"" none)."""
        if r >= self.base:
            t = r - self.base
            return self.marena[self.moffs[t]:self.moffs[t + 1]].tobytes()
        i = r - self.meta_from
        if i < 0:
            return b""
        if i == 0:
            start, end = 0, int(np.frombuffer(self.store.moffs.read(0, 8), "<i8")[0])
        else:
            start, end = (int(x) for x in np.frombuffer(self.store.moffs.read(8 * (i - 1), 16), "<i8"))
        return self.store.meta.read(start, end - start) if end > start else b""

    def event_id(self, r: int) -> str:
        return decode_id(self.id_bytes(r))

    def columns(self, start: int, stop: int) -> "JournalColumns":
        """Rows ``start .. stop-1`` (clamped to the journal) as columns: stored
        rows read back in one pass over each file (rows, ids, moffs, meta),
        tail rows sliced from memory. No Python object per row. O(rows + their
        id and metadata bytes)."""
        start, stop = max(0, start), min(len(self), stop)
        parts = []
        if start < min(stop, self.base):
            parts.append(self._stored_columns(start, min(stop, self.base)))
        if max(start, self.base) < stop:
            a, b = max(start, self.base) - self.base, stop - self.base
            parts.append(JournalColumns(
                self.pid[a:b].astype(np.int32), self.kind[a:b].copy(), self.out[a:b].copy(),
                self.val[a:b].copy(), self.ach[a:b].copy(), self.sub[a:b].copy(),
                self.earena[self.eoffs[a]:self.eoffs[b]].copy(), self.eoffs[a:b + 1] - self.eoffs[a],
                self.marena[self.moffs[a]:self.moffs[b]].copy(), self.moffs[a:b + 1] - self.moffs[a],
                np.zeros(b - a, np.bool_)))
        cols = JournalColumns.concat(parts)
        if self.invalid and cols.n:
            rows = np.arange(start, start + cols.n, dtype=np.int64)
            cols.invalid[:] = np.isin(rows, np.fromiter(self.invalid, np.int64, count=len(self.invalid)))
        return cols

    def _stored_columns(self, start: int, stop: int) -> "JournalColumns":
        k = stop - start
        rec = np.frombuffer(self.store.rows.read(start * ROW.itemsize, k * ROW.itemsize), ROW)
        if len(rec) != k:
            raise JournalLost(f"the journal rows end before row {stop}")
        e0 = int(rec["eoff"][0])
        earena = np.frombuffer(self.store.ids.read(e0, int(rec["eoff"][-1] + rec["elen"][-1]) - e0), np.uint8)
        eoffs = np.zeros(k + 1, np.int64)
        eoffs[1:] = rec["eoff"].astype(np.int64) - e0 + rec["elen"]
        moffs = np.zeros(k + 1, np.int64)  # rows before meta_from carry none
        first = max(start, self.meta_from)
        if first < stop:
            i = first - self.meta_from
            ends = np.frombuffer(self.store.moffs.read(8 * i, 8 * (stop - first)), "<i8").astype(np.int64)
            m0 = 0 if i == 0 else int(np.frombuffer(self.store.moffs.read(8 * (i - 1), 8), "<i8")[0])
            marena = np.frombuffer(self.store.meta.read(m0, int(ends[-1]) - m0), np.uint8)
            moffs[first - start + 1:] = ends - m0
        else:
            marena = np.zeros(0, np.uint8)
        return JournalColumns(rec["pid"].astype(np.int32), (rec["kind"] & ~np.uint8(OWNED)).astype(np.uint8),
                              rec["out"].copy(), rec["val"].astype(np.int64), rec["ach"].astype(np.int64),
                              rec["sub"].astype(np.int64), earena, eoffs, marena, moffs, np.zeros(k, np.bool_))

    def newest_first(self, player: int) -> Iterator[int]:
        """Rows of one player, newest first, read one by one as asked for."""
        r = int(self.heads[player]) if player < len(self.heads) else -1
        while r >= 0:
            yield r
            r = self.record(r)[6]

    def rows_of(self, player: int) -> list[int]:
        """Rows of one player, oldest first. O(their events)."""
        out = list(self.newest_first(player))
        out.reverse()
        return out

    def find_stored(self, buf: np.ndarray, offs: np.ndarray, sel: np.ndarray) -> np.ndarray:
        """For ids ``sel`` of a buffer: the stored (flushed) row that owns
        each, or -1. One :func:`probe_run` per run; hash matches are verified
        on the id bytes."""
        found = np.full(len(sel), -1, np.int64)
        if not self.runs or not len(sel):
            return found
        hashes = hash_ids(buf, offs, sel)
        for run in self.runs:
            if not len(run):
                continue
            try:
                pos = probe_run(run.hashes, run.fence, hashes)
                for k in np.flatnonzero(pos >= 0).tolist():
                    want = buf[offs[sel[k]]:offs[sel[k] + 1]].tobytes()
                    j = int(pos[k])
                    while j < len(run) and run.hashes[j] == hashes[k]:
                        r = int(run.rows[j])
                        if self.id_bytes(r) == want:
                            found[k] = r
                            break
                        j += 1
            finally:  # the pages these lookups mapped go back to the page cache only
                run.drop_pages()
        return found

    def find(self, event_id: str) -> int:
        """Row of the owned event with this id, or -1."""
        raw = event_id.encode("utf-8", "surrogatepass")
        buf = np.frombuffer(raw, np.uint8)
        h = np.uint64(hash_bytes(buf, 0, len(raw)))
        t = int(owner_find(self.slots, self.eoffs, self.earena, buf, 0, len(raw), h)) if self.owned else -1
        if t >= 0:
            return self.base + t
        return int(self.find_stored(buf, np.array([0, len(raw)], np.int64), np.zeros(1, np.int64))[0])

    def _check(self) -> None:
        """Every invariant, O(rows + owned ids + run sizes) (tests call it after
        mutations, as ``RankIndex._check``): the tail's offsets are monotone
        and inside their arenas; every row's ``prev`` is an earlier row of the
        same player (or -1) and every head is its player's newest row; the
        owner table holds exactly ``owned`` tail rows, each found again from
        its id; the store holds ``base`` rows; runs are sorted by hash, point
        at stored rows that own those ids, keep their fence, and each is at
        least twice the size of the next (newer) one; together they hold
        exactly the stored rows with the OWNED bit, once each (what a rebuild
        of the runs reads; a scrubbed row has neither)."""
        n, base = self.n, self.base
        assert n >= 0 and base >= 0 and len(self) == base + n
        for offs, arena in ((self.eoffs, self.earena), (self.moffs, self.marena)):
            assert offs[0] == 0 and (np.diff(offs[: n + 1]) >= 0).all() and offs[n] <= len(arena)
        assert self.store.rows.size == base * ROW.itemsize, "the store holds every flushed row"
        newest: dict[int, int] = {}
        for r in range(len(self)):
            pid, _kind, _out, _v, _a, _s, prev = self.record(r)
            assert prev < r and (prev == -1 or self.record(prev)[0] == pid), f"row {r}: prev {prev}"
            newest[pid] = r
        for pid, head in enumerate(self.heads.tolist()):
            assert head == newest.get(pid, -1), f"player {pid}: head {head}, newest row {newest.get(pid, -1)}"
        owned = self.owned_tail_rows()
        assert len(owned) == self.owned and len(set(owned.tolist())) == self.owned
        for t in owned.tolist():
            assert 0 <= t < n
            raw = self.earena[self.eoffs[t]:self.eoffs[t + 1]]
            h = np.uint64(hash_bytes(raw, 0, len(raw)))
            assert owner_find(self.slots, self.eoffs, self.earena, raw, 0, len(raw), h) == t
        for older, newer in zip(self.runs, self.runs[1:]):  # merges done elsewhere may still be due
            assert self.merges_elsewhere is not None or len(older) > 2 * len(newer), "runs merge by size"
        for run in self.runs:
            assert len(run.rows) == len(run.hashes) and (np.diff(run.hashes.astype(np.uint64)) >= 0).all()
            assert (run.fence == run.hashes[::FENCE]).all()
            assert ((run.rows >= 0) & (run.rows < base)).all()
            ids = [self.id_bytes(int(r)) for r in run.rows.tolist()]
            got = hash_ids(*_arena(ids), np.arange(len(ids), dtype=np.int64)) if ids else np.zeros(0, np.uint64)
            assert (got == run.hashes).all(), "a run's hashes are its rows' ids"
        kinds = np.frombuffer(self.store.rows.read(0, base * ROW.itemsize), ROW)["kind"]
        in_runs = np.sort(np.concatenate([np.asarray(r.rows, np.int64) for r in self.runs] + [np.zeros(0, np.int64)]))
        assert in_runs.tolist() == np.flatnonzero(kinds & OWNED).tolist(), "the runs hold exactly the stored owners"
        assert all(0 <= r < len(self) for r in self.invalid)

    def nbytes(self) -> int:
        """Bytes in memory (the tail, the heads, the invalidated rows)."""
        n = self.n
        return (45 * n + 16 * (n + 1) + int(self.eoffs[n]) + int(self.moffs[n]) + self.slots.nbytes + self.heads.nbytes
                + 40 * len(self.invalid))

    # ----------------------------------------------------------- snapshots

    def to_state(self, sync: bool = True) -> dict:
        """The journal at this instant, as plain data (the tail copied). ``sync``: the store's files
        are fsync'd first (the sizes named are durable on return); False leaves that to
        :meth:`sync_later`'s callable, run before the snapshot is saved (a background save)."""
        n = self.n
        cols = {name: getattr(self, name)[:n].tobytes() for name in ("pid", "kind", "out", "val", "ach", "sub", "prev")}
        return {
            "format": 3,
            "tail": cols,
            "eoffs": self.eoffs[: n + 1].tobytes(),
            "earena": self.earena[: self.eoffs[n]].tobytes(),
            "moffs": self.moffs[: n + 1].tobytes(),
            "marena": self.marena[: self.moffs[n]].tobytes(),
            "meta_from": self.meta_from,
            "owner": self.slots.tobytes(),
            "owned": self.owned,
            "heads": self.heads.tobytes(),
            "invalid": sorted(self.invalid),
            "base": self.base,
            "runs": [[r.seq, len(r)] for r in self.runs],
            "next_seq": self.next_seq,
            "store": self.store.to_state(self.runs, sync),
        } | ({"scrub_pending": self.scrub_pending.astype("<i8").tobytes()} if len(self.scrub_pending) else {})

    def sync_later(self) -> Callable[[], object]:
        """A callable that makes what :meth:`to_state` (``sync=False``) named durable: it fsyncs the
        store's files, found by name (another thread may run it while this journal goes on; a file
        merged away or dropped meanwhile is skipped: runs are derived, and a dropped journal's
        snapshot is rebuilt from the log)."""
        return self.store.sync_later(self.runs)

    @classmethod
    def from_state(cls, state: dict, place: StorePlace | None = None, tail_rows: int = TAIL_ROWS) -> "Journal":
        """A journal as a snapshot left it. ``place``: where its store is (None:
        in memory; a snapshot of a memory store carries its bytes). Raises
        JournalLost."""
        if "format" not in state:
            return cls._from_columns(state, place, tail_rows)
        st = state["store"]
        if st.get("memory"):
            store: Store = MemoryStore(st)
        elif place is None:
            raise JournalLost("a snapshot of an on-disk journal, and no place to find it")
        else:
            store = place.reopen(st)
        j = cls(store, tail_rows)
        tail = state["tail"]
        eoffs = np.frombuffer(state["eoffs"], np.int64)
        n = len(eoffs) - 1
        j._load_tail(tail, eoffs, state["earena"])
        if "moffs" in state:
            moffs = np.frombuffer(state["moffs"], np.int64)
            j.reserve(0, 0, int(moffs[-1]))
            j.moffs[: n + 1] = moffs
            j.marena[: moffs[-1]] = np.frombuffer(state["marena"], np.uint8)
        j.meta_from = state.get("meta_from", state["base"])  # format 2: the stored rows carry no metadata
        j.slots = np.frombuffer(state["owner"], np.int64).copy()
        j.owned = state["owned"]
        j.heads = np.frombuffer(state["heads"], np.int64).copy()
        j.invalid = set(state["invalid"])
        j.base = state["base"]
        j.n = n
        j.next_seq = state["next_seq"]
        j.scrub_pending = np.frombuffer(state.get("scrub_pending", b""), "<i8").astype(np.int64)
        try:
            j.runs = [store.load_run(seq, size) for seq, size in state["runs"]]
        except JournalLost:  # merged away after this snapshot: runs are derived, rebuild them
            j.runs = j._rebuild_runs()
        return j

    def _rebuild_runs(self, chunk: int = 1 << 20) -> list[Run]:
        """One run of every stored row that owns its id, read back from the
        rows and ids files in chunks. O(stored rows)."""
        hashes, rows = [], []
        for start in range(0, self.base, chunk):
            k = min(chunk, self.base - start)
            rec = np.frombuffer(self.store.rows.read(start * ROW.itemsize, k * ROW.itemsize), ROW)
            if len(rec) != k:
                raise JournalLost(f"the journal rows end before row {start + k}")
            sel = np.flatnonzero(rec["kind"] & OWNED)
            if not len(sel):
                continue
            e0 = int(rec["eoff"][0])
            buf = np.frombuffer(self.store.ids.read(e0, int(rec["eoff"][-1] + rec["elen"][-1]) - e0), np.uint8)
            starts = rec["eoff"][sel] - e0
            bounds = np.stack([starts, starts + rec["elen"][sel]], 1).ravel()  # [s0, e0, s1, e1, ...]
            hashes.append(hash_ids(buf, bounds, np.arange(0, 2 * len(sel), 2)))
            rows.append(start + sel.astype(np.int64))
        h = np.concatenate(hashes) if hashes else np.zeros(0, np.uint64)
        r = np.concatenate(rows) if rows else np.zeros(0, np.int64)
        order = np.argsort(h, kind="stable")
        run = self.store.write_run(self.next_seq, h[order], r[order])
        self.next_seq += 1
        return [run]

    def _load_tail(self, tail: dict, eoffs: np.ndarray, earena: bytes) -> None:
        n = len(eoffs) - 1
        self.reserve(n, len(earena))
        for name, dtype in (("pid", np.int32), ("kind", np.uint8), ("out", np.uint8), ("val", np.int64),
                            ("ach", np.int64), ("sub", np.int64), ("prev", np.int64)):
            if name in tail:
                getattr(self, name)[:n] = np.frombuffer(tail[name], dtype)
        self.eoffs[: n + 1] = eoffs
        self.earena[: eoffs[n]] = np.frombuffer(earena, np.uint8)
        self.moffs[: n + 1] = 0

    @classmethod
    def _from_columns(cls, state: dict, place: StorePlace | None, tail_rows: int) -> "Journal":
        """A snapshot from before the journal moved to disk: every row was a
        column in memory. They become the tail (flushed by the next batch);
        the player chains and invalidated rows are derived from the columns."""
        j = cls(None if place is None else place.fresh(), tail_rows)
        eoffs = np.frombuffer(state["eoffs"], np.int64)
        n = len(eoffs) - 1
        j._load_tail(state, eoffs, state["earena"])
        j.n = n
        pid = j.pid[:n]
        j.ensure_players(int(pid.max()) + 1 if n else 0)
        chain_prev(pid, j.heads, 0, j.prev)
        j.invalid = set(np.flatnonzero(np.frombuffer(state["inv"], np.uint8)).tolist())
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

    def close(self) -> None:
        """Close the store's files and let go of the runs (a mapped run's
        descriptor goes with its last array)."""
        self.store.close()
        self.runs = []


def _nothing() -> None:
    pass


def _arena(ids: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    """Byte strings as one arena and offsets (``_check``)."""
    offs = np.zeros(len(ids) + 1, np.int64)
    offs[1:] = np.cumsum([len(b) for b in ids])
    return np.frombuffer(b"".join(ids), np.uint8).copy(), offs


def _i64(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, np.int64)


def _resized(a: np.ndarray, size: int) -> np.ndarray:
    out = np.zeros(size, a.dtype)
    out[: min(len(a), size)] = a[:size]
    return out

"""The compact form of an ARCHIVED board: build it, read it (docs/storage.md, "Archives").

An archived board's final rows are written once, in rank order, as columns
in one immutable byte string; every read of the board is then answered from
it (docs/api.md §13, archive) and the shards drop the board's partitions.
This module is pure: :func:`encode` turns rows into byte chunks,
:class:`ArchiveView` reads any buffer (``bytes``, an ``mmap``) through numpy
views, copying nothing but what a read returns. The file I/O (temp file,
fsync, rename, mmap) is :mod:`engine.log.archives`.

Layout (little-endian; every section starts at a multiple of 8)::

    magic  b"FRARCHV1"
    u64    header length H
    H      header: compact JSON, sorted keys (format, board_id, policy,
           version, rows, ranked, checksum, sections {name: [offset, nbytes]})
    ...    sections, see SECTIONS
    u64    xxh3_64 of every byte before it (the trailer)

With a history (format 2), the archive also holds every journal row of the
board (docs/api.md §10, history), grouped per player: the player's *slot*
is their row (found by the lookup above), or, for a player who has events
but no row (every event held, refused or a duplicate), ``rows + k`` with
``k`` found through the ``x_*`` sections the same way. ``h_offsets[slot] ..
h_offsets[slot + 1]`` are the slot's events in application order, as
columns (``h_*``: kind, outcome code, invalidated flag, value, achieved,
submitted, event id and metadata bytes with offsets). A history read is one
lookup plus one slice of each column: O(log n + that player's events).

An archive is never edited in place: :func:`without_players` (a player's
erasure, docs/api.md §17) makes the bytes of the same archive without some
players, which the I/O shell writes over the old file as it writes a new one.

Rows ``0 .. ranked-1`` are the ranked (ACTIVE) rows, best first: row ``i``
has rank ``i + 1``. Rows ``ranked .. rows-1`` are the INVALIDATED rows in
player-id order. Player ids are found through ``hashes`` (the xxh3_64 of
every id's UTF-8 bytes, sorted) and ``hash_rows`` (the row of each hash), and
verified on the id bytes, so a lookup is one binary search and touches
O(log n) pages of the file.

>>> view = ArchiveView(b"".join(encode("g:m:s:x", Policy.BEST_SCORE, 3, ArchiveRows.of(
...     ["b", "a", "c"], [5, 5, 1], [10, 10, 3], [10, 10, 3], [1, 1, 2], [True, True, False]))))
>>> [(e.rank, e.player_id, e.value) for e in view.top(0, 10)]
[(1, 'a', 5), (2, 'b', 5)]
>>> view.find("c"), view.find("zz")
(2, -1)
"""

from __future__ import annotations

import json
import struct
from typing import NamedTuple, Sequence

import numba
import numpy as np
import xxhash

from engine.core.checksum import MASK128, render, row_digest
from engine.core.errors import StorageUnavailable, UnsupportedFormat
from engine.core.journal import KIND_NAMES, JournalColumns
from engine.core.model import HistoryEntry, PlayerView, Policy, RankedEntry, RowStatus
from engine.core.partition import outcome_name
from engine.core.export import key_subscores
from engine.core.players import decode_id, encode_ids, gather, hash_bytes, same_bytes

MAGIC = b"FRARCHV1"
#: What :func:`encode` writes; a reader refuses a newer one (engine.core.formats rules).
ARCHIVE_FORMAT = 3  # 2: the history sections (a format-1 archive has none); 3: subscores (below)
#: The format an archive without subscores is written in: byte for byte what format 2 wrote. Only
#: the archive of a board with subscores is format 3 (a format-2 reader refuses it, as it must).
_PLAIN_FORMAT = 2
#: Section name -> numpy dtype ("bytes" sections are raw uint8).
SECTIONS = {
    "value": "<i8", "achieved": "<i8", "submitted": "<i8", "row_version": "<i8",
    "id_offsets": "<i8", "id_bytes": "u1", "meta_offsets": "<i8", "meta_bytes": "u1",
    "hashes": "<u8", "hash_rows": "<i8",
    # the history (format 2)
    "h_offsets": "<i8", "h_kind": "u1", "h_outcome": "u1", "h_invalid": "u1", "h_value": "<i8",
    "h_achieved": "<i8", "h_submitted": "<i8", "h_eid_offsets": "<i8", "h_eid_bytes": "u1",
    "h_meta_offsets": "<i8", "h_meta_bytes": "u1",
    "x_id_offsets": "<i8", "x_id_bytes": "u1", "x_hashes": "<u8", "x_hash_rows": "<i8",
    # subscores (docs/api.md §14): the rows' subscores, row by row, in rank order; only in the
    # archive of a board with subscores (its header then names their directions, "subscores")
    "subscores": "<i8",
}
HISTORY_SECTIONS = tuple(k for k in SECTIONS if k[:2] in ("h_", "x_"))
_U64 = struct.Struct("<Q")


class ArchiveRows(NamedTuple):
    """Every row of a board (any order), as columns: the ids' UTF-8 bytes in
    one buffer with int64 offsets (``rows + 1``), then one number per row.
    ``metadata``: per row the compact JSON bytes of its metadata, or None (the
    whole column may be None)."""

    id_bytes: np.ndarray
    id_offsets: np.ndarray
    value: np.ndarray
    achieved: np.ndarray
    submitted: np.ndarray
    row_version: np.ndarray
    active: np.ndarray
    metadata: Sequence[bytes | None] | None = None
    subscores: np.ndarray | None = None  # (rows, k) int64 on a board with subscores, else None

    @classmethod
    def of(cls, player_ids: Sequence[str], value, achieved, submitted, row_version, active,
           metadata: Sequence[bytes | None] | None = None) -> "ArchiveRows":
        """From a list of ids (tests, small boards)."""
        buf, offs = encode_ids(list(player_ids))
        i64 = lambda c: np.asarray(c, np.int64)  # noqa: E731
        return cls(buf, offs, i64(value), i64(achieved), i64(submitted), i64(row_version), np.asarray(active, bool),
                   metadata)

    @property
    def n(self) -> int:
        """How many rows."""
        return len(self.id_offsets) - 1

    def raw_id(self, i: int) -> bytes:
        return self.id_bytes[self.id_offsets[i]:self.id_offsets[i + 1]].tobytes()


def rows_from_wire(parts: Sequence[Sequence[bytes]]) -> ArchiveRows:
    """The rows of many partitions, each as :meth:`engine.core.partition.Partition.columns`
    answers them (``[id bytes, id offsets, values, achieved, submitted, row
    versions, active, metadata]``), as one :class:`ArchiveRows`. O(rows + id bytes)."""
    arenas = [np.frombuffer(p[0], np.uint8) for p in parts]
    offsets = [np.frombuffer(p[1], "<i8") for p in parts]
    total = np.zeros(1, np.int64)
    shifted = [total]
    base = 0
    for arena, offs in zip(arenas, offsets):
        shifted.append(offs[1:].astype(np.int64) + base)
        base += len(arena)
    def col(k: int, dtype: str = "<i8") -> np.ndarray:
        return np.concatenate([np.frombuffer(p[k], dtype) for p in parts] or [np.zeros(0, dtype)])

    arena = np.concatenate(arenas) if arenas else np.zeros(0, np.uint8)
    subs = None  # a partition's 9th column (boards with subscores): the rows' subscores, little-endian int64
    sized = [(len(p[8]), len(o) - 1) for p, o in zip(parts, offsets) if len(p) > 8 and len(o) > 1]
    if sized:
        k = sized[0][0] // (8 * sized[0][1])
        subs = np.concatenate([np.frombuffer(p[8], "<i8") for p in parts if len(p) > 8]).astype(np.int64).reshape(-1, k)
    metas = None  # a partition's 8th column: one bytes per row, or [] when none has metadata
    if any(len(p) > 7 and p[7] for p in parts):
        metas = [m or None for p, offs in zip(parts, offsets)
                 for m in (p[7] if len(p) > 7 and p[7] else [b""] * (len(offs) - 1))]
    return ArchiveRows(arena, np.concatenate(shifted), col(2).astype(np.int64), col(3).astype(np.int64),
                       col(4).astype(np.int64), col(5).astype(np.int64), col(6, "u1").astype(bool), metas, subs)


class ArchiveHistory(NamedTuple):
    """Every journal row of a board (any order across players, application
    order within each player's), as columns: ``player`` (int64 per row)
    indexes the ids in ``player_bytes`` / ``player_offsets`` (each player
    once); ``cols`` are the rows (their ``pid`` is not used)."""

    player_bytes: np.ndarray
    player_offsets: np.ndarray
    player: np.ndarray
    cols: JournalColumns

    @classmethod
    def of_parts(cls, parts: Sequence[tuple[np.ndarray, np.ndarray, JournalColumns | Sequence[JournalColumns]]]
                 ) -> "ArchiveHistory":
        """From each partition's ``(id bytes, id offsets, journal columns)``
        (the columns whole or as consecutive chunks), whose ``pid`` indexes
        that partition's ids. Every column is copied once. O(rows + bytes)."""
        arenas, offsets, players, chunks, base, at = [], [np.zeros(1, np.int64)], [], [], 0, 0
        for buf, offs, cols in parts:
            arenas.append(np.asarray(buf, np.uint8))
            offsets.append(np.asarray(offs, np.int64)[1:] + at)
            for c in [cols] if isinstance(cols, JournalColumns) else cols:
                players.append(np.asarray(c.pid, np.int64) + base)
                chunks.append(c)
            base += len(offs) - 1
            at += len(buf)
        return cls(np.concatenate(arenas) if arenas else np.zeros(0, np.uint8), np.concatenate(offsets),
                   np.concatenate(players) if players else np.zeros(0, np.int64), JournalColumns.concat(chunks))


@numba.njit(cache=True)
def _match_ids(hashes, hash_rows, id_bytes, id_offsets, q_hashes, q_bytes, q_offsets):
    """For each query id (its hash and bytes), the row whose id it is, or -1:
    a binary search over the sorted ``hashes``, verified on the bytes."""
    out = np.full(len(q_hashes), -1, np.int64)
    n = len(hashes)
    for k in range(len(q_hashes)):
        h = q_hashes[k]
        i = np.searchsorted(hashes, h)
        while i < n and hashes[i] == h:
            r = hash_rows[i]
            if same_bytes(id_bytes, id_offsets[r], id_offsets[r + 1], q_bytes, q_offsets[k], q_offsets[k + 1]):
                out[k] = r
                break
            i += 1
    return out


@numba.njit(cache=True)
def _rows_of_ids(id_bytes, id_offsets, q_bytes, q_offsets):
    """For each query id, the row whose id it is, or -1: an open-addressing
    table over the rows' ids (hashed in the kernel, no Python step per id).
    O(rows + queries) expected."""
    n = len(id_offsets) - 1
    size = 16
    while size < 2 * n:
        size *= 2
    mask = size - 1
    slots = np.full(size, -1, np.int64)
    for r in range(n):
        pos = np.int64(hash_bytes(id_bytes, id_offsets[r], id_offsets[r + 1]) & np.uint64(mask))
        while slots[pos] >= 0:
            pos = (pos + 1) & mask
        slots[pos] = r
    out = np.full(len(q_offsets) - 1, -1, np.int64)
    for k in range(len(out)):
        pos = np.int64(hash_bytes(q_bytes, q_offsets[k], q_offsets[k + 1]) & np.uint64(mask))
        while slots[pos] >= 0:
            r = slots[pos]
            if same_bytes(id_bytes, id_offsets[r], id_offsets[r + 1], q_bytes, q_offsets[k], q_offsets[k + 1]):
                out[k] = r
                break
            pos = (pos + 1) & mask
    return out


def _history_sections(n: int, id_bytes: np.ndarray, id_offsets: np.ndarray, hist: ArchiveHistory) -> dict[str, bytes]:
    """The ``h_*`` and ``x_*`` sections: each history player's slot (their
    row, else ``n + k`` for the k-th player with events and no row), the rows
    ordered by slot (stable: application order within a player kept), the
    per-slot offsets. O(rows log rows) in numpy, nothing per row in Python."""
    q_offs = np.asarray(hist.player_offsets, np.int64)
    q_bytes = np.ascontiguousarray(hist.player_bytes, np.uint8)
    slot = _rows_of_ids(id_bytes, np.asarray(id_offsets, np.int64), q_bytes, q_offs)
    player = np.asarray(hist.player, np.int64)
    counts = np.bincount(player, minlength=len(slot)) if len(player) else np.zeros(len(slot), np.int64)
    extra = np.flatnonzero((slot < 0) & (counts > 0))
    slot[extra] = n + np.arange(len(extra), dtype=np.int64)
    x_bytes, x_offs = gather(q_bytes, q_offs, extra)
    x_hashes = id_hashes(x_bytes, x_offs)
    x_order = np.argsort(x_hashes, kind="stable")
    ev_slot = slot[player]
    order = np.argsort(ev_slot, kind="stable")
    h_offsets = np.zeros(n + len(extra) + 1, np.int64)
    if len(ev_slot):
        np.cumsum(np.bincount(ev_slot, minlength=n + len(extra)), out=h_offsets[1:])
    c = hist.cols
    eid_bytes, eid_offs = gather(np.ascontiguousarray(c.earena, np.uint8), np.asarray(c.eoffs, np.int64), order)
    meta_bytes, meta_offs = gather(np.ascontiguousarray(c.marena, np.uint8), np.asarray(c.moffs, np.int64), order)
    i8 = lambda a: np.asarray(a, np.int64)[order].astype("<i8").tobytes()  # noqa: E731
    u1 = lambda a: np.asarray(a)[order].astype(np.uint8).tobytes()  # noqa: E731
    return {
        "h_offsets": h_offsets.astype("<i8").tobytes(), "h_kind": u1(c.kind), "h_outcome": u1(c.out),
        "h_invalid": u1(c.invalid), "h_value": i8(c.val), "h_achieved": i8(c.ach), "h_submitted": i8(c.sub),
        "h_eid_offsets": eid_offs.astype("<i8").tobytes(), "h_eid_bytes": eid_bytes.tobytes(),
        "h_meta_offsets": meta_offs.astype("<i8").tobytes(), "h_meta_bytes": meta_bytes.tobytes(),
        "x_id_offsets": x_offs.astype("<i8").tobytes(), "x_id_bytes": x_bytes.tobytes(),
        "x_hashes": x_hashes[x_order].astype("<u8").tobytes(), "x_hash_rows": x_order.astype("<i8").tobytes(),
    }


class ArchiveInfo(NamedTuple):
    board_id: str
    policy: Policy
    version: int
    rows: int
    ranked: int
    checksum: str


def id_hashes(buf, offs) -> np.ndarray:
    """xxh3_64 of each id's UTF-8 bytes (ids as one buffer with offsets)."""
    h = xxhash.xxh3_64_intdigest
    mv = memoryview(np.ascontiguousarray(buf, np.uint8))
    o = np.asarray(offs, np.int64).tolist()
    return np.fromiter((h(mv[a:b]) for a, b in zip(o, o[1:])), np.uint64, count=len(o) - 1)


def rank_order(policy: Policy, rows: ArchiveRows, subscores: Sequence[str] = ()) -> np.ndarray:
    """Row positions: the active rows by the board comparator (docs/api.md §6;
    with ``subscores``, their directions, §14: the rows' subscores between
    primary and tie), then the invalidated rows by player id. O(n log n) in
    numpy, plus a Python sort of each run of rows whose keys but the id are
    equal and of the invalidated rows."""
    active = np.asarray(rows.active, bool)
    value = np.asarray(rows.value, np.int64)
    if policy is Policy.FASTEST_TIME:
        primary, tie = value, np.asarray(rows.submitted, np.int64)
    else:  # descending: ~v orders as -v without overflowing at the int64 edge
        primary, tie = np.invert(value), np.asarray(rows.achieved, np.int64)
    on = np.flatnonzero(active)
    subs = key_subscores(rows.subscores, subscores) if subscores and rows.subscores is not None else None
    cols = [] if subs is None else [subs[on, c] for c in range(subs.shape[1])]
    order = on[np.lexsort((tie[on], *reversed(cols), primary[on]))]
    if len(order) > 1:
        p, t = primary[order], tie[order]
        same = (p[1:] == p[:-1]) & (t[1:] == t[:-1])
        if subs is not None:
            for c in range(subs.shape[1]):
                x = subs[order, c]
                same &= x[1:] == x[:-1]
        if same.any():  # equal (primary, tie): the lower player id first
            starts = np.flatnonzero(same & ~np.concatenate(([False], same[:-1])))
            for s in starts.tolist():
                e = s + 1
                while e < len(same) and same[e]:
                    e += 1
                run = order[s:e + 1].tolist()
                order[s:e + 1] = sorted(run, key=rows.raw_id)
    rest = sorted(np.flatnonzero(~active).tolist(), key=rows.raw_id)
    return np.concatenate((order, np.asarray(rest, np.int64))).astype(np.int64)


def encode(board_id: str, policy: Policy, version: int, rows: ArchiveRows,
           history: ArchiveHistory | None = None, subscores: Sequence[str] = ()) -> list[bytes]:
    """The archive of a board at ``version`` as byte chunks to write in order,
    with ``history`` (every journal row of the board) when given.
    Deterministic: the same rows (in any order) and the same history give the
    same bytes. O(n log n + events log events), with no Python object kept per
    row or event (memory: a few columns of the board and of its history)."""
    n = rows.n
    order = rank_order(policy, rows, subscores)
    subs = None
    if subscores:
        subs = (np.zeros((n, len(subscores)), np.int64) if rows.subscores is None
                else np.asarray(rows.subscores, np.int64).reshape(n, len(subscores))[order])
    ranked = int(np.count_nonzero(np.asarray(rows.active, bool)))
    id_bytes, id_offsets = gather(np.ascontiguousarray(rows.id_bytes, np.uint8),
                                  np.asarray(rows.id_offsets, np.int64), order)
    metas = None if rows.metadata is None else [rows.metadata[i] for i in order.tolist()]
    meta_offsets = np.zeros(n + 1, np.int64)
    if n and metas is not None:
        np.cumsum(np.fromiter((len(m or b"") for m in metas), np.int64, count=n), out=meta_offsets[1:])
    hashes = id_hashes(id_bytes, id_offsets)
    by_hash = np.argsort(hashes, kind="stable")
    value, achieved = np.asarray(rows.value, np.int64)[order], np.asarray(rows.achieved, np.int64)[order]
    submitted, rv = np.asarray(rows.submitted, np.int64)[order], np.asarray(rows.row_version, np.int64)[order]
    total = 0
    raw = id_bytes.tobytes()
    o = id_offsets.tolist()
    for i, (v, a, r) in enumerate(zip(value.tolist(), achieved.tolist(), rv.tolist())):
        status = "ACTIVE" if i < ranked else "INVALIDATED"
        total += row_digest(decode_id(raw[o[i]:o[i + 1]]), v, a, status, r, metas[i] if metas else None,
                            None if subs is None else tuple(subs[i].tolist()))
    del raw, o
    data = {
        "value": value.astype("<i8").tobytes(), "achieved": achieved.astype("<i8").tobytes(),
        "submitted": submitted.astype("<i8").tobytes(), "row_version": rv.astype("<i8").tobytes(),
        "id_offsets": id_offsets.astype("<i8").tobytes(), "id_bytes": id_bytes.tobytes(),
        "meta_offsets": meta_offsets.astype("<i8").tobytes(),
        "meta_bytes": b"" if metas is None else b"".join(m or b"" for m in metas),
        "hashes": hashes[by_hash].astype("<u8").tobytes(), "hash_rows": by_hash.astype("<i8").tobytes(),
    }
    if subs is not None:
        data["subscores"] = np.ascontiguousarray(subs, "<i8").tobytes()
    if history is not None:
        data.update(_history_sections(n, id_bytes, id_offsets, history))
    header = {"format": ARCHIVE_FORMAT if subscores else _PLAIN_FORMAT, "board_id": board_id, "policy": policy.value,
              "version": int(version),
              "rows": n, "ranked": ranked, "checksum": render(total & MASK128), "sections": {}}
    if subscores:  # only a board with subscores names them: other archives are byte for byte as before
        header["subscores"] = list(subscores)
    if history is not None:
        header["events"] = history.cols.n
    return _pack(header, data)


def _pack(header: dict, data: dict[str, bytes]) -> list[bytes]:
    """The archive's byte chunks: magic, header (its ``sections`` filled in
    from ``data``, in ``data``'s order), the sections padded to 8 bytes, the
    trailer digest. O(bytes)."""
    # Section offsets depend on the header's length, which depends on the offsets: fix the
    # header's size first (offsets as fixed-width numbers), then fill them in.
    width = 20
    header["sections"] = {k: [0, len(v)] for k, v in data.items()}
    sized = _header_bytes(header, width)
    at = _align(16 + len(sized))
    for k, v in data.items():
        header["sections"][k] = [at, len(v)]
        at = _align(at + len(v))
    head = _header_bytes(header, width)
    assert len(head) == len(sized)
    chunks = [MAGIC, _U64.pack(len(head)), head, b"\0" * (_align(16 + len(head)) - 16 - len(head))]
    pos = _align(16 + len(head))
    for v in data.values():
        chunks += [v, b"\0" * (_align(pos + len(v)) - pos - len(v))]
        pos = _align(pos + len(v))
    digest = xxhash.xxh3_64()
    for c in chunks:
        digest.update(c)
    chunks.append(_U64.pack(digest.intdigest()))
    return chunks


def _align(n: int) -> int:
    return (n + 7) & ~7


def _header_bytes(header: dict, width: int) -> bytes:
    """Compact JSON with every section number padded to ``width`` digits (JSON
    allows no leading zeros, so padding is spaces after the number)."""
    secs = ",".join(f'"{k}":[{str(a).ljust(width)},{str(b).ljust(width)}]' for k, (a, b) in header["sections"].items())
    rest = {k: v for k, v in header.items() if k != "sections"}
    text = json.dumps(rest, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return (text[:-1] + ',"sections":{' + secs + "}}").encode("ascii")


def digest_ok(read, size: int, chunk: int = 1 << 22) -> bool:
    """Whether an archive's trailer matches the bytes before it. ``read(offset,
    n)`` returns bytes of the file, ``size`` is its length (the I/O shell reads
    it with pread, so checking maps nothing into memory). O(size)."""
    if size < 24:
        return False
    h = xxhash.xxh3_64()
    end = size - 8
    for at in range(0, end, chunk):
        h.update(read(at, min(chunk, end - at)))
    return _U64.unpack(read(end, 8))[0] == h.intdigest()


class ArchiveView:
    """Reads of one archive over a buffer; nothing is copied until returned.

    Rank reads are slices (O(limit)); a player lookup is one binary search
    over the sorted id hashes (O(log n)); a tied rank is one binary search
    over the value column (O(log n))."""

    def __init__(self, buf) -> None:
        """Raises :class:`UnsupportedFormat` for a newer or damaged archive."""
        self.buf = buf
        if bytes(buf[:8]) != MAGIC or len(buf) < 24:
            raise UnsupportedFormat("not a FlowRank archive (bad magic): it is damaged or from elsewhere")
        (hlen,) = _U64.unpack(bytes(buf[8:16]))
        header = json.loads(bytes(buf[16:16 + hlen]))
        if not isinstance(header.get("format"), int) or header["format"] > ARCHIVE_FORMAT:
            raise UnsupportedFormat(f"archive format {header.get('format')!r} is newer than {ARCHIVE_FORMAT}, "
                                    "the one this FlowRank version reads")
        self.info = ArchiveInfo(header["board_id"], Policy(header["policy"]), header["version"], header["rows"],
                                header["ranked"], header["checksum"])
        #: The header as written (JSON), and every section as a numpy view of ``buf``, in file order.
        self.header: dict = header
        self.sections: dict[str, np.ndarray] = {}
        cols = self.sections
        for name, (at, nbytes) in header["sections"].items():
            dt = np.dtype(SECTIONS[name])
            cols[name] = np.frombuffer(buf, dt, nbytes // dt.itemsize, at)
        self.value, self.achieved, self.submitted = cols["value"], cols["achieved"], cols["submitted"]
        self.row_version, self.id_offsets, self.id_bytes = cols["row_version"], cols["id_offsets"], cols["id_bytes"]
        self.meta_offsets, self.meta_bytes = cols["meta_offsets"], cols["meta_bytes"]
        self.hashes, self.hash_rows = cols["hashes"], cols["hash_rows"]
        #: The history columns (docs/storage.md), or None: a format-1 archive has no history.
        self.hist = {k: cols[k] for k in HISTORY_SECTIONS} if "h_offsets" in cols else None
        #: subscores (docs/api.md §14): their directions and the rows' values (rows, k), or () and None
        self.subscore_directions: tuple[str, ...] = tuple(header.get("subscores", ()))
        k = len(self.subscore_directions)
        self.subs = cols["subscores"].reshape(self.info.rows, k) if k and "subscores" in cols else None
        self.ranked = self.info.ranked
        self._descending = self.info.policy is not Policy.FASTEST_TIME

    def __len__(self) -> int:
        """Every row, ranked and invalidated."""
        return self.info.rows

    # ------------------------------------------------------------- lookups

    def player_id(self, i: int) -> str:
        return decode_id(self.id_bytes[self.id_offsets[i]:self.id_offsets[i + 1]].tobytes())

    def _raw_id(self, i: int) -> bytes:
        return self.id_bytes[self.id_offsets[i]:self.id_offsets[i + 1]].tobytes()

    def find(self, player_id: str) -> int:
        """The row of ``player_id``, or -1. O(log n)."""
        raw = player_id.encode("utf-8", "surrogatepass")
        h = np.uint64(xxhash.xxh3_64_intdigest(raw))
        i = int(np.searchsorted(self.hashes, h, "left"))
        while i < len(self.hashes) and self.hashes[i] == h:
            r = int(self.hash_rows[i])
            if self._raw_id(r) == raw:
                return r
            i += 1
        return -1

    def find_many(self, player_ids: Sequence[str]) -> list[int]:
        """Rows of many ids (-1 for absent), one vectorised search."""
        raws = [p.encode("utf-8", "surrogatepass") for p in player_ids]
        buf, offs = encode_ids(list(player_ids))
        hs = id_hashes(buf, offs)
        starts = np.searchsorted(self.hashes, hs, "left").tolist()
        out = []
        for raw, h, i in zip(raws, hs.tolist(), starts):
            found = -1
            while i < len(self.hashes) and int(self.hashes[i]) == h:
                r = int(self.hash_rows[i])
                if self._raw_id(r) == raw:
                    found = r
                    break
                i += 1
            out.append(found)
        return out

    def history_slot(self, player_id: str) -> int:
        """The history slot of ``player_id`` (their row, else past the rows), or -1. O(log n)."""
        i = self.find(player_id)
        if i >= 0 or self.hist is None:
            return i
        x = self.hist
        raw = np.frombuffer(player_id.encode("utf-8", "surrogatepass"), np.uint8)
        q = _match_ids(x["x_hashes"], x["x_hash_rows"], x["x_id_bytes"], x["x_id_offsets"],
                       id_hashes(raw, np.array([0, len(raw)], np.int64)), raw, np.array([0, len(raw)], np.int64))
        return -1 if q[0] < 0 else self.info.rows + int(q[0])

    def history(self, player_id: str) -> list[HistoryEntry] | None:
        """Every event of ``player_id`` on the board, in application order, as
        the history route answers it (none for an unknown player); None when
        the archive has no history (format 1). O(log n + the player's events)."""
        x = self.hist
        if x is None:
            return None
        slot = self.history_slot(player_id)
        if slot < 0:
            return []
        a, b = int(x["h_offsets"][slot]), int(x["h_offsets"][slot + 1])
        if b <= a:
            return []
        eo, mo = x["h_eid_offsets"][a:b + 1].tolist(), x["h_meta_offsets"][a:b + 1].tolist()
        eraw, mraw = x["h_eid_bytes"][eo[0]:eo[-1]].tobytes(), x["h_meta_bytes"][mo[0]:mo[-1]].tobytes()
        return [HistoryEntry(decode_id(eraw[e0 - eo[0]:e1 - eo[0]]), KIND_NAMES[k], v, ach, outcome_name(o), bool(inv),
                             mraw[m0 - mo[0]:m1 - mo[0]])
                for e0, e1, m0, m1, k, o, inv, v, ach in zip(
                    eo, eo[1:], mo, mo[1:], x["h_kind"][a:b].tolist(), x["h_outcome"][a:b].tolist(),
                    x["h_invalid"][a:b].tolist(), x["h_value"][a:b].tolist(), x["h_achieved"][a:b].tolist())]

    @property
    def history_events(self) -> int:
        """How many journal rows the history holds (0 without one)."""
        return 0 if self.hist is None else len(self.hist["h_kind"])

    def metadata(self, i: int) -> bytes | None:
        """Row ``i``'s metadata bytes (compact JSON), or None."""
        a, b = int(self.meta_offsets[i]), int(self.meta_offsets[i + 1])
        return self.meta_bytes[a:b].tobytes() if b > a else None

    # --------------------------------------------------------------- reads

    def entries(self, start: int, stop: int) -> list[RankedEntry]:
        """Ranked entries of rows ``start .. stop-1`` (clamped to the ranked rows). O(stop - start)."""
        start, stop = max(0, start), min(self.ranked, stop)
        if stop <= start:
            return []
        offs = self.id_offsets[start:stop + 1].tolist()
        base = offs[0]
        raw = self.id_bytes[base:offs[-1]].tobytes()
        ids = [decode_id(raw[a - base:b - base]) for a, b in zip(offs, offs[1:])]
        moffs = self.meta_offsets[start:stop + 1].tolist()
        if moffs[-1] == moffs[0]:  # no row of the slice has metadata
            metas: list = [None] * (stop - start)
        else:
            mraw = self.meta_bytes[moffs[0]:moffs[-1]].tobytes()
            metas = [mraw[a - moffs[0]:b - moffs[0]] or None for a, b in zip(moffs, moffs[1:])]
        subs = [None] * (stop - start) if self.subs is None else [tuple(s) for s in self.subs[start:stop].tolist()]
        return [RankedEntry(start + k + 1, pid, v, a, None, m, s) for k, (pid, v, a, m, s) in
                enumerate(zip(ids, self.value[start:stop].tolist(), self.achieved[start:stop].tolist(), metas, subs))]

    def subscores(self, i: int) -> tuple[int, ...] | None:
        """Row ``i``'s subscores, or None (a board without subscores)."""
        return None if self.subs is None else tuple(self.subs[i].tolist())

    def top(self, offset: int, limit: int) -> list[RankedEntry]:
        """Ranks ``offset+1 .. offset+limit``."""
        return self.entries(offset, offset + limit)

    def tied_rank(self, i: int) -> int:
        """Competition rank of ranked row ``i``: 1 + the ranked rows whose value
        is strictly better (they form a prefix of the rank order). O(log n)."""
        v = int(self.value[i])
        lo, hi = 0, i
        values, desc = self.value, self._descending
        if self.subs is not None:  # ties are on (value, subscores): compare whole keys (§14)
            key = self._tie_key
            mine = key(i)
            while lo < hi:
                mid = (lo + hi) // 2
                if key(mid) < mine:
                    lo = mid + 1
                else:
                    hi = mid
            return lo + 1
        while lo < hi:
            mid = (lo + hi) // 2
            w = int(values[mid])
            if (w > v) if desc else (w < v):
                lo = mid + 1
            else:
                hi = mid
        return lo + 1

    def _tie_key(self, i: int) -> tuple:
        """Row ``i``'s (primary, subscores) in ascending rank order."""
        v = int(self.value[i])
        assert self.subs is not None
        subs = [s if d == "asc" else -s for s, d in zip(self.subs[i].tolist(), self.subscore_directions)]
        return (-v if self._descending else v, *subs)

    def player(self, version: int, i: int) -> PlayerView:
        """The player view of row ``i`` (``version``: the board's)."""
        ranked = i < self.ranked
        return PlayerView(version, self.player_id(i), i + 1 if ranked else None, int(self.value[i]),
                          int(self.achieved[i]), RowStatus.ACTIVE if ranked else RowStatus.INVALIDATED,
                          int(self.row_version[i]), metadata=self.metadata(i), subscores=self.subscores(i))

    def subset(self, player_ids: Sequence[str]) -> list[RankedEntry]:
        """The ranked rows among ``player_ids``, ranked locally 1..k (the
        archive's order is the comparator's)."""
        rows = sorted({r for r in self.find_many(list(dict.fromkeys(player_ids))) if 0 <= r < self.ranked})
        return [RankedEntry(k + 1, self.player_id(r), int(self.value[r]), int(self.achieved[r]), None, self.metadata(r),
                            self.subscores(r)) for k, r in enumerate(rows)]

    def _check(self) -> None:
        """O(n) self-check: rank order, id index, offsets."""
        n = self.info.rows
        assert len(self.value) == len(self.achieved) == len(self.submitted) == len(self.row_version) == n
        assert len(self.id_offsets) == len(self.meta_offsets) == n + 1
        assert np.all(np.diff(self.hashes.astype(np.uint64)) >= 0) if n > 1 else True
        assert sorted(self.hash_rows.tolist()) == list(range(n))
        for i in range(n):
            assert self.find(self.player_id(i)) == i
        ids = [self._raw_id(i) for i in range(self.ranked, n)]
        assert ids == sorted(ids)
        if self.hist is not None:
            x = self.hist
            extra = len(x["x_id_offsets"]) - 1
            assert len(x["h_offsets"]) == n + extra + 1 and int(x["h_offsets"][-1]) == len(x["h_kind"])
            assert np.all(np.diff(x["h_offsets"]) >= 0)
            assert sorted(x["x_hash_rows"].tolist()) == list(range(extra))
            for k in range(extra):
                pid = decode_id(x["x_id_bytes"][x["x_id_offsets"][k]:x["x_id_offsets"][k + 1]].tobytes())
                assert self.find(pid) == -1 and self.history_slot(pid) == n + k
                assert x["h_offsets"][n + k + 1] > x["h_offsets"][n + k]  # an extra player has events


# ------------------------------------------------------------------ erasure


class ArchiveRewrite(NamedTuple):
    """An archive without some players (:func:`without_players`): the new
    archive's bytes and what was taken out of it."""

    data: bytes
    removed_ranked: int  # ranked (ACTIVE) rows removed: the header's version grew by this many
    removed_rows: int  # rows removed, ranked and INVALIDATED
    removed_events: int  # history events removed, of rows' players and of players with events and no row


def without_players(buf, player_ids: Sequence[str]) -> ArchiveRewrite | None:
    """The archive in ``buf`` (bytes, an ``mmap``) with ``player_ids`` gone
    (docs/storage.md, "Archives", erasure): their rows, ranked or INVALIDATED,
    and their history slots (their events' columns, event ids and metadata),
    also of players with events and no row (the ``x_*`` sections). The other
    rows keep their order, so ranks close up; the header's ``rows``,
    ``ranked`` and ``events`` count what is left, its ``version`` grows by one
    per erased player who had a ranked row (docs/api.md §17), and its
    ``checksum`` is that of the remaining rows (the API checksum is a sum of
    row digests, engine.core.checksum: the erased rows' digests are taken
    off). The format stays the archive's own (1, 2 or 3). The bytes are those
    :func:`encode` gives for the remaining rows and history at the grown
    version, so none of the erased ids' bytes is left in them.

    Returns None when none of ``player_ids`` has a row or a history slot
    here. Raises :class:`StorageUnavailable` when ``buf``'s trailer digest
    does not match (a rewrite must not seal damage under a new digest), and
    :class:`UnsupportedFormat` as :class:`ArchiveView` does.

    O(archive bytes) in numpy masks and gathers, plus O(k log n) for the k
    ids: no Python object per remaining row or event."""
    view = ArchiveView(buf)
    ids = list(dict.fromkeys(player_ids))
    if not ids:
        return None
    n, ranked, c, x = view.info.rows, view.ranked, view.sections, view.hist
    gone = np.asarray(view.find_many(ids), np.int64)
    gone = gone[gone >= 0]
    extra = 0 if x is None else len(x["x_id_offsets"]) - 1
    x_gone = np.zeros(0, np.int64)
    if x is not None and extra:
        q_bytes, q_offs = encode_ids(ids)
        x_gone = _match_ids(x["x_hashes"], x["x_hash_rows"], x["x_id_bytes"], x["x_id_offsets"],
                            id_hashes(q_bytes, q_offs), q_bytes, q_offs)
        x_gone = x_gone[x_gone >= 0]
    if not len(gone) and not len(x_gone):
        return None  # (before the digest check: asking about players an archive no longer holds is cheap)
    if not digest_ok(lambda at, k: buf[at:at + k], len(buf)):
        raise StorageUnavailable("The archive to rewrite is damaged: its digest does not match; restore it from "
                                 "a backup.")
    keep = np.ones(n, bool)
    keep[gone] = False
    x_keep = np.ones(extra, bool)
    x_keep[x_gone] = False
    removed_ranked = int(np.count_nonzero(gone < ranked))
    total = int(view.info.checksum, 16)
    for r in gone.tolist():  # the erased rows only: the checksum is additive (engine.core.checksum)
        total -= row_digest(view.player_id(r), int(view.value[r]), int(view.achieved[r]),
                            "ACTIVE" if r < ranked else "INVALIDATED", int(view.row_version[r]), view.metadata(r),
                            view.subscores(r))

    rows = np.flatnonzero(keep)
    made = _kept_sections(c, n, rows, keep)
    header = dict(view.header)
    header.update(rows=len(rows), ranked=ranked - removed_ranked, version=int(header["version"]) + removed_ranked,
                  checksum=render(total & MASK128))
    removed_events = 0
    if x is not None:
        slot_keep = np.concatenate((keep, x_keep))
        counts = np.diff(np.asarray(x["h_offsets"], np.int64))
        events = np.flatnonzero(np.repeat(slot_keep, counts))
        removed_events = len(x["h_kind"]) - len(events)
        made.update(_kept_history(x, slot_keep, counts, events, x_keep))
        if "events" in header:
            header["events"] = len(events)
    data = {name: made[name] for name in c}  # the sections in the file's order, as encode writes them
    return ArchiveRewrite(b"".join(_pack(header, data)), removed_ranked, int(len(gone)), removed_events)


def _kept_sections(c: dict[str, np.ndarray], n: int, rows: np.ndarray, keep: np.ndarray) -> dict[str, bytes]:
    """The row sections of ``rows`` (positions, ascending), ``keep`` their mask:
    columns indexed, id and metadata arenas gathered, the sorted hash index
    filtered (its order stays sorted) with its rows renumbered. O(rows + bytes)."""
    i8 = lambda a: np.asarray(a, np.int64)  # noqa: E731
    out = {k: i8(c[k])[rows].astype("<i8").tobytes() for k in ("value", "achieved", "submitted", "row_version")}
    id_bytes, id_offs = gather(c["id_bytes"], i8(c["id_offsets"]), rows)
    meta_bytes, meta_offs = gather(c["meta_bytes"], i8(c["meta_offsets"]), rows)
    renumber = np.cumsum(keep, dtype=np.int64) - 1
    on = keep[i8(c["hash_rows"])]
    out.update(id_offsets=id_offs.astype("<i8").tobytes(), id_bytes=id_bytes.tobytes(),
               meta_offsets=meta_offs.astype("<i8").tobytes(), meta_bytes=meta_bytes.tobytes(),
               hashes=np.ascontiguousarray(c["hashes"][on], "<u8").tobytes(),
               hash_rows=renumber[i8(c["hash_rows"])[on]].astype("<i8").tobytes())
    if "subscores" in c:
        subs = c["subscores"]
        out["subscores"] = b"" if n == 0 else np.ascontiguousarray(subs.reshape(n, -1)[rows], "<i8").tobytes()
    return out


def _kept_history(x: dict[str, np.ndarray], slot_keep: np.ndarray, counts: np.ndarray, events: np.ndarray,
                  x_keep: np.ndarray) -> dict[str, bytes]:
    """The history sections of the kept slots (``slot_keep``: rows, then the
    players without a row) and their ``events`` (positions, ascending). O(events + bytes)."""
    i8 = lambda a: np.asarray(a, np.int64)  # noqa: E731
    offsets = np.zeros(int(np.count_nonzero(slot_keep)) + 1, np.int64)
    np.cumsum(counts[slot_keep], out=offsets[1:])
    eid_bytes, eid_offs = gather(x["h_eid_bytes"], i8(x["h_eid_offsets"]), events)
    meta_bytes, meta_offs = gather(x["h_meta_bytes"], i8(x["h_meta_offsets"]), events)
    extra = np.flatnonzero(x_keep)
    x_bytes, x_offs = gather(x["x_id_bytes"], i8(x["x_id_offsets"]), extra)
    on = x_keep[i8(x["x_hash_rows"])]
    renumber = np.cumsum(x_keep, dtype=np.int64) - 1
    out = {k: np.ascontiguousarray(x[k][events]).tobytes()
           for k in ("h_kind", "h_outcome", "h_invalid", "h_value", "h_achieved", "h_submitted")}
    out.update(h_offsets=offsets.astype("<i8").tobytes(), h_eid_offsets=eid_offs.astype("<i8").tobytes(),
               h_eid_bytes=eid_bytes.tobytes(), h_meta_offsets=meta_offs.astype("<i8").tobytes(),
               h_meta_bytes=meta_bytes.tobytes(), x_id_offsets=x_offs.astype("<i8").tobytes(),
               x_id_bytes=x_bytes.tobytes(), x_hashes=np.ascontiguousarray(x["x_hashes"][on], "<u8").tobytes(),
               x_hash_rows=renumber[i8(x["x_hash_rows"])[on]].astype("<i8").tobytes())
    return out

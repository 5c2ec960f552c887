"""Export chunks → CSV and JSON Lines bytes, from their columns (docs/api.md §13).

One numba kernel call per chunk writes every line straight into one byte
buffer: ranks, values and tied ranks as decimal digits, ``achieved_at`` as
``YYYY-MM-DDTHH:MM:SS.sssZ`` (proleptic Gregorian, exact integer arithmetic),
player ids and metadata copied from their byte arenas. No Python object per
row, so rendering costs a few bytes of work per output byte (issue 13: the
export streams at hundreds of thousands of rows per second).

The bytes are exactly what the reference writers give (the tests compare them):

* CSV (RFC 4180, CRLF line ends) as :mod:`csv` writes it with minimal
  quoting: a field holding a comma, a quote, CR or LF is quoted and its
  quotes doubled (only ids and metadata can need it);
* JSON Lines as :func:`orjson.dumps` writes ``{"rank", ["tied_rank",]
  "player_id", "value", "achieved_at"[, "metadata"]}``: ``metadata`` only when
  the row has some, its stored compact JSON as is; an id's ``"`` and ``\\``
  escaped. An id holding a control character (the HTTP API refuses them, an
  embedded caller may not) is escaped by orjson, one row at a time.

On a board with subscores (docs/api.md §14) each CSV line ends with a
``subscores`` column (the compact JSON array, quoted when it holds a comma:
two or more subscores) and each JSON Lines object ends with ``"subscores"``.
"""

from __future__ import annotations

import numba
import numpy as np
import orjson

from engine.core.export import Chunk
from engine.core.timefmt import format_timestamp

_EMPTY = np.zeros(0, np.int64)
_NO_SUBS = np.zeros((0, 0), np.int64)


@numba.njit(cache=True, inline="always")
def _array(out, at, subs, i):
    """Row ``i`` of ``subs`` as a compact JSON array of integers."""
    out[at] = 91  # "["
    at += 1
    for c in range(subs.shape[1]):
        if c:
            out[at] = 44
            at += 1
        at = _int(out, at, subs[i, c])
    out[at] = 93  # "]"
    return at + 1


@numba.njit(cache=True, inline="always")
def _int(out, at, v):
    """Decimal digits of int64 ``v`` at ``out[at:]``; returns the end."""
    if v < 0:
        out[at] = 45  # "-"
        at += 1
        u = np.uint64(-(v + 1)) + np.uint64(1)  # |INT64_MIN| without overflow
    else:
        u = np.uint64(v)
    n = 1
    x = u
    while x >= np.uint64(10):
        x //= np.uint64(10)
        n += 1
    for k in range(n - 1, -1, -1):
        out[at + k] = 48 + np.int64(u % np.uint64(10))
        u //= np.uint64(10)
    return at + n


@numba.njit(cache=True, inline="always")
def _pad(out, at, v, width):
    for k in range(width - 1, -1, -1):
        out[at + k] = 48 + v % 10
        v //= 10
    return at + width


@numba.njit(cache=True)
def _stamp(out, at, ms):
    """``YYYY-MM-DDTHH:MM:SS.sssZ`` of epoch ms (years 0001-9999) at ``out[at:]``."""
    secs = ms // 1000
    millis = ms - secs * 1000
    days = secs // 86_400
    rem = secs - days * 86_400
    z = days + 719_468  # days from 0000-03-01 (H. Hinnant's civil_from_days)
    era = (z if z >= 0 else z - 146_096) // 146_097
    doe = z - era * 146_097
    yoe = (doe - doe // 1_460 + doe // 36_524 - doe // 146_096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = mp + 3 if mp < 10 else mp - 9
    year = yoe + era * 400 + (1 if month <= 2 else 0)
    at = _pad(out, at, year, 4)
    out[at] = 45
    at = _pad(out, at + 1, month, 2)
    out[at] = 45
    at = _pad(out, at + 1, day, 2)
    out[at] = 84  # T
    at = _pad(out, at + 1, rem // 3600, 2)
    out[at] = 58
    at = _pad(out, at + 1, (rem // 60) % 60, 2)
    out[at] = 58
    at = _pad(out, at + 1, rem % 60, 2)
    out[at] = 46
    at = _pad(out, at + 1, millis, 3)
    out[at] = 90  # Z
    return at + 1


@numba.njit(cache=True, inline="always")
def _csv_field(out, at, src, a, b):
    """``src[a:b]`` as a CSV field: quoted, quotes doubled, when it holds , " CR or LF."""
    quote = False
    for k in range(a, b):
        c = src[k]
        if c == 44 or c == 34 or c == 13 or c == 10:
            quote = True
            break
    if not quote:
        out[at:at + b - a] = src[a:b]
        return at + b - a
    out[at] = 34
    at += 1
    for k in range(a, b):
        c = src[k]
        out[at] = c
        at += 1
        if c == 34:
            out[at] = 34
            at += 1
    out[at] = 34
    return at + 1


@numba.njit(cache=True)
def _csv_kernel(first, value, achieved, ids, ioffs, metas, moffs, tied, ties, subs, out):
    at = 0
    for i in range(len(value)):
        at = _int(out, at, first + i)
        out[at] = 44
        at = _csv_field(out, at + 1, ids, ioffs[i], ioffs[i + 1])
        out[at] = 44
        at = _int(out, at + 1, value[i])
        out[at] = 44
        at = _stamp(out, at + 1, achieved[i])
        out[at] = 44
        at = _csv_field(out, at + 1, metas, moffs[i], moffs[i + 1])
        if ties:
            out[at] = 44
            at = _int(out, at + 1, tied[i])
        k = subs.shape[1]
        if k:  # a subscores board: the last column, quoted when the array holds a comma
            out[at] = 44
            at += 1
            if k > 1:
                out[at] = 34
                at += 1
            at = _array(out, at, subs, i)
            if k > 1:
                out[at] = 34
                at += 1
        out[at] = 13
        out[at + 1] = 10
        at += 2
    return at


@numba.njit(cache=True, inline="always")
def _put(out, at, text):
    for k in range(len(text)):
        out[at + k] = text[k]
    return at + len(text)


@numba.njit(cache=True)
def _jsonl_kernel(first, value, achieved, ids, ioffs, metas, moffs, tied, ties, subs, out,
                  k_rank, k_tied, k_pid, k_value, k_at, k_meta, k_subs):
    """Returns the end, or -1 when an id holds a control character (the caller
    falls back to orjson for that chunk)."""
    at = 0
    for i in range(len(value)):
        at = _put(out, at, k_rank)
        at = _int(out, at, first + i)
        if ties:
            at = _put(out, at, k_tied)
            at = _int(out, at, tied[i])
        at = _put(out, at, k_pid)
        for k in range(ioffs[i], ioffs[i + 1]):
            c = ids[k]
            if c < 32:
                return -1
            if c == 34 or c == 92:
                out[at] = 92
                at += 1
            out[at] = c
            at += 1
        at = _put(out, at, k_value)
        at = _int(out, at, value[i])
        at = _put(out, at, k_at)
        at = _stamp(out, at, achieved[i])
        out[at] = 34
        at += 1
        a, b = moffs[i], moffs[i + 1]
        if b > a:
            at = _put(out, at, k_meta)
            out[at:at + b - a] = metas[a:b]
            at += b - a
        if subs.shape[1]:
            at = _put(out, at, k_subs)
            at = _array(out, at, subs, i)
        out[at] = 125
        out[at + 1] = 10
        at += 2
    return at


def _keys(*texts: str) -> tuple:
    return tuple(np.frombuffer(t.encode(), np.uint8) for t in texts)


_JSON_KEYS = _keys('{"rank":', ',"tied_rank":', ',"player_id":"', '","value":', ',"achieved_at":"', ',"metadata":',
                   ',"subscores":')


def _ro(a: np.ndarray) -> np.ndarray:
    """``a`` read-only (a view, no copy): the kernels compile once, for the read-only columns
    a spilled export's ``np.frombuffer`` gives, and not a second time for a live board's."""
    if not a.flags.writeable:
        return a
    v = a.view()
    v.flags.writeable = False
    return v


def _args(chunk: Chunk, ties: bool) -> tuple:
    r = chunk.rows
    tied = chunk.tied_rank if ties and chunk.tied_rank is not None else _EMPTY
    if ties and chunk.tied_rank is None:
        raise ValueError("ties asked of a chunk without tied ranks")
    return (np.int64(chunk.first_rank), _ro(np.ascontiguousarray(r.value, np.int64)),
            _ro(np.ascontiguousarray(r.achieved, np.int64)), _ro(np.ascontiguousarray(r.id_bytes, np.uint8)),
            np.ascontiguousarray(r.id_offsets, np.int64), _ro(np.ascontiguousarray(r.meta_bytes, np.uint8)),
            np.ascontiguousarray(r.meta_offsets, np.int64), np.ascontiguousarray(tied, np.int64), bool(ties),
            _NO_SUBS if chunk.subscores is None else np.ascontiguousarray(chunk.subscores, np.int64))


def _room(chunk: Chunk) -> np.ndarray:
    r = chunk.rows
    k = 0 if chunk.subscores is None else int(chunk.subscores.shape[1])
    return np.empty(r.rows * (200 + 24 * k) + 2 * (len(r.id_bytes) + len(r.meta_bytes)), np.uint8)


def csv_bytes(chunk: Chunk, ties: bool = False) -> bytes:
    """CSV lines of a chunk (no header); with ``ties`` a last ``tied_rank`` column. O(output bytes)."""
    if not len(chunk):
        return b""
    out = _room(chunk)
    args = (*_args(chunk, ties), out)
    end = _csv_kernel(*args)
    return out[:end].tobytes()


def jsonl_bytes(chunk: Chunk, ties: bool = False) -> bytes:
    """JSON Lines of a chunk, one object per row. O(output bytes)."""
    if not len(chunk):
        return b""
    out = _room(chunk)
    args = (*_args(chunk, ties), out, *_JSON_KEYS)
    end = _jsonl_kernel(*args)
    if end < 0:
        return _jsonl_orjson(chunk, ties)
    return out[:end].tobytes()


def _jsonl_orjson(chunk: Chunk, ties: bool) -> bytes:
    """The reference: one orjson object per row (ids JSON must escape)."""
    lines = []
    for e in chunk.entries():
        row: dict = {"rank": e.rank}
        if ties:
            row["tied_rank"] = e.tied_rank
        row |= {"player_id": e.player_id, "value": e.value, "achieved_at": format_timestamp(e.achieved_at)}
        if e.metadata:
            row["metadata"] = orjson.Fragment(e.metadata)
        if e.subscores is not None:
            row["subscores"] = list(e.subscores)
        lines.append(orjson.dumps(row) + b"\n")
    return b"".join(lines)

"""``Outbox``: the webhook messages (docs/api.md §16 "Webhooks") kept durable until delivered.

The engine puts the messages of each log record once that record is durable;
the delivery worker (:mod:`engine.runtime.webhooks`) reads them back in order
and writes each attempt's result here. Files and fsync only (no asyncio).

Layout of the directory (e.g. ``<data-dir>/outbox/``)::

    messages.<S>  a segment: b"FRWHOB01", then one frame per message (engine.log.framing:
                  length u32 LE | crc32 u32 LE | msgpack payload), payload
                  [log_offset, k, count, message_id, body, created_ms]: the k-th of
                  the ``count`` messages put for log record ``log_offset``. ``S`` (20
                  decimal digits) is the seq of its first message.
    state.<S>     the segment's delivery state, 16 bytes per message, at byte 16 * (seq - S):
                  status u8 (0 pending, 1 delivered, 2 failed), 3 zero bytes,
                  attempts u32 LE, next attempt i64 LE (epoch ms; 0: none due)
    done          b"FRWHDN01", then one frame per retired segment: [S, count,
                  put log offsets (<i8 bytes), put first seqs (<i8 bytes),
                  zlib(statuses u8), zlib(attempts <u4)]

Sequence numbers (seqs) are dense from 0 in put order. A put goes whole into
the last segment, or into a new one (``messages.<its first seq>``) when the
last has grown past ``segment_bytes`` or was retired: one ``pwrite`` of its
frames and one ``fdatasync`` (a new segment: its header in the same write, and
a directory fsync). Puts are serialized, so at most one is unfinished when the
process dies, in the last segment. The state files are written only when
results come in: a record past a file's end, or a hole, reads as zeros, which
is ``pending`` with no attempt and nothing due, so a put writes nothing there.
Results are ``pwrite``'d in place (a run of consecutive seqs in one call; a
16-byte aligned record never straddles a sector) and made durable by one
``fdatasync`` per segment a :meth:`Outbox.set_status` call touches.

**Retiring** (what keeps the outbox small): once every message of a segment is
delivered or failed, its final states and its puts' index are appended to
``done`` as one frame (compressed: a segment of first-try deliveries costs a
few dozen bytes), ``done`` is fsync'd, then ``messages.<S>`` and ``state.<S>``
are unlinked. ``GET …/awards`` reads the states from memory (rebuilt from
``done`` and the live state files at open), so the bodies are not needed. The
bytes of the segment files are therefore bounded by the segments that still
hold a pending message (plus the last segment until it is retired); ``done``
grows by a frame per segment, not per message. A crash between the two steps
leaves a segment that ``done`` covers: opening unlinks it.

In memory, per message: its status (1 byte) and attempts (4 bytes); per live
message its next attempt (8 bytes), and every 64th live message's byte
position; per put: its log offset and first seq (16 bytes). Bodies stay on
disk: a receiver that is down only grows files.

Opening verifies every live message (CRC, msgpack, the puts' ``k``/``count``/log
offsets) and decides what a bad frame means, by the rule of
:mod:`engine.log.segment_log`:

* The bytes after the last complete put of the last segment are the put that
  was in flight when the process died (never returned, so never
  acknowledged): if every valid frame among them belongs to that one put, they
  are truncated (a warning names the file and byte offset) and the caller puts
  that record again. So is a torn last frame of ``done`` (its segment is still there).
* Anything else that does not verify (a bad frame followed by a frame of
  another put, a bad header, seqs that are not dense) raises
  :class:`engine.core.errors.LogCorruption` naming the file and byte offset.

State records whose status is not 0-2 read as pending (a redelivery, never a
lost message); a state file longer than its segment's messages is cut to their count.

An outbox of the first layout (one ``messages`` file, ``state`` of 8-byte
records) is moved to this one when it is opened (``messages`` becomes the
segment ``messages.<0>``; ``state`` is rewritten as ``state.<0>``).
"""

from __future__ import annotations

import bisect
import logging
import os
import threading
import zlib
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from engine.core.errors import LogCorruption, StorageUnavailable
from engine.core.webhooks import DELIVERED, FAILED, PENDING, Message, award_messages
from engine.log.framing import (FRAME_HEADER, FRAME_HEADER_SIZE, encode_batch, find_valid_frame, parse_frames, unpack_payload)
from engine.log.port import FaultHook
from engine.log.segment_log import _pwrite_all, fsync_directory

logger = logging.getLogger("flowrank.log")

MAGIC = b"FRWHOB01"
DONE_MAGIC = b"FRWHDN01"
SEGMENT_PREFIX = "messages."
STATE_PREFIX = "state."
DONE_FILE = "done"
LEGACY_MESSAGES_FILE = "messages"  # the first layout (one file, 8-byte state records)
LEGACY_STATE_FILE = "state"
STATE_DTYPE = np.dtype({"names": ["status", "attempts", "due_ms"], "formats": ["u1", "<u4", "<i8"],
                        "offsets": [0, 4, 8], "itemsize": 16})
LEGACY_STATE_DTYPE = np.dtype({"names": ["status", "attempts"], "formats": ["u1", "<u4"], "offsets": [0, 4],
                               "itemsize": 8})
INDEX_EVERY = 64  # a byte position kept per this many messages of a live segment
SEGMENT_BYTES = 1 << 20  # a put starts a new segment once the last one is this long
_BLOCK = 1 << 20


def segment_name(first_seq: int) -> str:
    """The file name of the segment whose first message is ``first_seq``."""
    return f"{SEGMENT_PREFIX}{first_seq:020d}"


def state_name(first_seq: int) -> str:
    """The file name of that segment's delivery state."""
    return f"{STATE_PREFIX}{first_seq:020d}"


MESSAGES_FILE = segment_name(0)  # the first segment (every message while none has been retired)
STATE_FILE = state_name(0)


class _Column:
    """A growable numpy column: ``values()`` is a view of the first ``n``."""

    __slots__ = ("a", "n")

    def __init__(self, dtype, values=()):
        v = np.asarray(values, dtype=dtype)
        self.a = np.zeros(max(16, 2 * len(v)), dtype=dtype)
        self.a[: len(v)] = v
        self.n = len(v)

    def extend(self, values) -> None:
        v = np.asarray(values, dtype=self.a.dtype)
        need = self.n + len(v)
        if need > len(self.a):
            grown = np.zeros(max(need, 2 * len(self.a)), dtype=self.a.dtype)
            grown[: self.n] = self.a[: self.n]
            self.a = grown
        self.a[self.n:need] = v
        self.n = need

    def grow_zeros(self, k: int) -> None:
        self.extend(np.zeros(k, dtype=self.a.dtype))

    def values(self) -> np.ndarray:
        return self.a[: self.n]


class EncodedPut(NamedTuple):
    """One put's messages framed (:func:`encode_put`): the bytes, each frame's start in them, how many."""

    blob: bytes
    starts: list[int]
    n: int


def encode_put(log_offset: int, messages: Sequence[Message]) -> EncodedPut:
    """The frames of the messages of log record ``log_offset``, as :meth:`Outbox.put` writes them. Pure."""
    n = len(messages)
    for m in messages:
        if not isinstance(m.message_id, str) or not isinstance(m.body, bytes) or not isinstance(m.created_ms, int):
            raise TypeError(f"not a Message(str, bytes, int): {m!r}"[:200])
    blob, starts = encode_batch([[log_offset, k, n, m.message_id, m.body, m.created_ms]
                                 for k, m in enumerate(messages)])
    return EncodedPut(blob, starts, n)


def encode_award_put(log_offset: int, board_id: str, version: int, rewards: Sequence[dict],
                     player_ids: Sequence[str], ranks: Sequence[int], cohorts: Sequence[str | None],
                     prizes: Sequence[int], created_ms: int) -> EncodedPut:
    """:func:`encode_put` of an ``A`` record's award messages, from its columns: what a
    helper process runs, so that 50,000 bodies and frames are built off the engine's
    interpreter (engine.runtime.outbox_feed)."""
    return encode_put(log_offset, award_messages(board_id, version, rewards, player_ids, ranks, cohorts, prizes,
                                                 created_ms))


class _Segment:
    """A live segment: its two files, its messages' byte positions (every ``INDEX_EVERY``-th) and next attempts."""

    __slots__ = ("first", "count", "fd", "state_fd", "path", "state_path", "size", "index", "due", "dirty")

    def __init__(self, first: int, fd: int, state_fd: int, path: str, state_path: str, size: int, count: int,
                 index, due) -> None:
        self.first, self.fd, self.state_fd, self.path, self.state_path = first, fd, state_fd, path, state_path
        self.size = size  # durable bytes of its messages file
        self.count = count
        self.index = _Column(np.int64, index)
        self.due = _Column(np.int64, due)
        self.dirty = False  # the messages file may hold bytes past size (a failed put)

    @property
    def end(self) -> int:
        return self.first + self.count


class Outbox:
    """Durable webhook messages and their delivery state. Create with :meth:`open`.

    Thread-safe: puts are serialized among themselves, results among
    themselves; reads may run beside either and see only durable messages.
    """

    def __init__(self, directory: str, segments: list[_Segment], done_fd: int, done_size: int, count: int,
                 put_offsets, put_firsts, statuses: np.ndarray, attempts: np.ndarray,
                 fault_hook: FaultHook | None, fsync: bool, segment_bytes: int):
        self.directory = directory
        self._done_path = os.path.join(directory, DONE_FILE)
        self._segments = segments  # live, by first seq
        self._done_fd = done_fd
        self._done_size = done_size
        self._hook = fault_hook
        self._fsync = fsync
        self._segment_bytes = segment_bytes
        self._count = count
        self._put_offsets = _Column(np.int64, put_offsets)
        self._put_firsts = _Column(np.int64, put_firsts)
        self._status = _Column(np.uint8, statuses)
        self._attempts = _Column(np.uint32, attempts)
        self._counts = np.bincount(statuses, minlength=3)[:3].astype(np.int64)
        self._attempts_total = int(attempts.sum(dtype=np.int64))
        self._low = 0  # every seq below is delivered or failed
        self._check_retire: set[int] = {s.first for s in segments}  # segments that may have become all final
        self.retired = 0  # segments retired since open
        self._lock = threading.Lock()  # the fields above
        self._put_lock = threading.Lock()  # one put (or retirement) at a time
        self._state_lock = threading.Lock()  # one set_status at a time
        self._io_lock = threading.Lock()  # reads of segment files vs. their closing at retirement
        self._closed = False

    # ------------------------------------------------------------------ open

    @classmethod
    def open(cls, directory: str, *, fault_hook: FaultHook | None = None, fsync: bool = True,
             segment_bytes: int = SEGMENT_BYTES) -> "Outbox":
        """Open (creating if needed) the outbox in ``directory``: verifies every
        live message (``O(bytes)``), truncates an unfinished last put, unlinks
        segments ``done`` covers, raises :class:`LogCorruption` for anything
        else that does not verify. ``fault_hook(op, path)`` is called before
        ``"create"``, ``"write"``, ``"fsync"``, ``"truncate"``, ``"dirsync"``,
        ``"state.write"``, ``"state.fsync"``, ``"done.write"``, ``"done.fsync"``
        and ``"unlink"``. ``fsync=False``: benchmarks only, not durable.
        ``segment_bytes``: a put starts a new segment once the last is this long."""
        directory = os.path.abspath(directory)
        os.makedirs(directory, exist_ok=True)
        _migrate_first_layout(directory, fsync)
        done_fd, done_size, retired = _open_done(directory, fsync)
        opened: list[_Segment] = []
        try:
            names = sorted(n for n in os.listdir(directory)
                           if n.startswith(SEGMENT_PREFIX) and n[len(SEGMENT_PREFIX):].isdigit())
            covered = {r[0]: r[1] for r in retired}
            puts: list[tuple[np.ndarray, np.ndarray]] = [(r[2], r[3]) for r in retired]
            columns: list[tuple[int, np.ndarray, np.ndarray]] = [(r[0], r[4], r[5]) for r in retired]
            for i, name in enumerate(names):
                first = int(name[len(SEGMENT_PREFIX):])
                if first in covered:  # retired, its unlink cut short by a crash
                    _unlink_segment(directory, first, fsync)
                    continue
                got = _open_segment(directory, first, i == len(names) - 1, fsync, fault_hook)
                if got is None:
                    continue
                seg, offsets, firsts, statuses, attempts = got
                opened.append(seg)
                puts.append((offsets, firsts))
                columns.append((first, statuses, attempts))
            spans = sorted((first, len(st)) for first, st, _ in columns)
            at = 0
            for first, n in spans:
                if first != at:
                    raise LogCorruption(f"outbox {directory}: seqs from {min(first, at)} to {max(first, at)} are "
                                        f"{'missing' if first > at else 'held twice'} (segments and {DONE_FILE})")
                at = first + n
            statuses = np.zeros(at, np.uint8)
            attempts = np.zeros(at, np.uint32)
            for first, st, att in columns:
                statuses[first:first + len(st)] = st
                attempts[first:first + len(st)] = att
            offsets = np.concatenate([p[0] for p in puts] or [np.zeros(0, np.int64)])
            firsts = np.concatenate([p[1] for p in puts] or [np.zeros(0, np.int64)])
            order = np.argsort(firsts, kind="stable")
            offsets, firsts = offsets[order], firsts[order]
            if np.any(np.diff(offsets) <= 0):
                raise LogCorruption(f"outbox {directory}: puts out of log order across segments")
            opened.sort(key=lambda s: s.first)
        except BaseException:
            os.close(done_fd)
            for seg in opened:
                os.close(seg.fd)
                os.close(seg.state_fd)
            raise
        box = cls(directory, opened, done_fd, done_size, at, offsets, firsts, statuses, attempts, fault_hook,
                  fsync, segment_bytes)
        with box._put_lock, box._state_lock:
            box._retire_due()  # all-final segments a crash left behind
        return box

    # ------------------------------------------------------------------ put

    @property
    def count(self) -> int:
        """Messages put so far (the next put's first seq). ``O(1)``."""
        return self._count

    @property
    def covered_offset(self) -> int:
        """The log offset of the last put, -1 before any: the caller puts the
        messages of every durable log record after it."""
        with self._lock:
            n = self._put_offsets.n
            return int(self._put_offsets.a[n - 1]) if n else -1

    def first_seq(self, log_offset: int) -> int | None:
        """The first seq the put for ``log_offset`` got (retired or not); None if there was none. ``O(log puts)``."""
        with self._lock:
            offsets = self._put_offsets.values()
            i = int(np.searchsorted(offsets, log_offset))
            if i < len(offsets) and offsets[i] == log_offset:
                return int(self._put_firsts.a[i])
        return None

    def put(self, log_offset: int, messages: Sequence[Message]) -> int:
        """Append the messages of log record ``log_offset`` durably (fsync'd
        before it returns); returns the seq the first one got (the rest follow
        densely). Idempotent: for ``log_offset <= covered_offset`` it returns
        the seq that put got and writes nothing (``ValueError`` if that record
        had no put, i.e. the caller skipped it). No messages: nothing is
        written, returns :attr:`count`. ``O(bytes)``, one ``pwrite`` and one
        fsync. On a disk fault raises :class:`StorageUnavailable`, nothing is kept."""
        with self._put_lock:
            covered = self.covered_offset
            if log_offset <= covered:
                first = self.first_seq(log_offset)
                if first is None:
                    if not messages:
                        return self._count
                    raise ValueError(f"log offset {log_offset} is at or below the outbox's covered offset "
                                     f"{covered} but had no put: its messages would be lost")
                return first
            if not messages:
                return self._count
            return self._append(log_offset, *encode_put(log_offset, messages))

    def put_encoded(self, log_offset: int, encoded: "EncodedPut") -> int:
        """:meth:`put` of messages :func:`encode_put` framed already (in another
        process, say): only the write and the fsync happen here."""
        with self._put_lock:
            if log_offset <= self.covered_offset:
                first = self.first_seq(log_offset)
                if first is None and encoded.n:
                    raise ValueError(f"log offset {log_offset} is at or below the outbox's covered offset "
                                     f"{self.covered_offset} but had no put: its messages would be lost")
                return self._count if first is None else first
            if not encoded.n:
                return self._count
            return self._append(log_offset, *encoded)

    def _append(self, log_offset: int, blob: bytes, starts: list[int], n: int) -> int:
        """Write one put's frames at the end of the last segment (or a new one) and fsync; the caller
        holds ``_put_lock``."""
        first = self._count
        seg = self._segments[-1] if self._segments else None
        if seg is None or seg.end != first or seg.size >= self._segment_bytes:
            return self._append_new(log_offset, blob, starts, n)
        size = seg.size
        try:
            if seg.dirty:
                self._call("truncate", seg.path)
                os.ftruncate(seg.fd, size)
                seg.dirty = False
            seg.dirty = True
            self._call("write", seg.path)
            _pwrite_all(seg.fd, blob, size)
            if self._fsync:
                self._call("fsync", seg.path)
                os.fdatasync(seg.fd)
            seg.dirty = False
        except OSError as exc:
            try:
                self._call("truncate", seg.path)
                os.ftruncate(seg.fd, size)
                seg.dirty = False
            except OSError:
                pass  # retried before the next write
            raise StorageUnavailable(f"outbox {seg.path}: could not append ({exc})") from exc
        self._added(seg, log_offset, size, blob, starts, n)
        return first

    def _append_new(self, log_offset: int, blob: bytes, starts: list[int], n: int) -> int:
        """A put into a new segment ``messages.<count>``: header and frames in one write, fsync'd, then
        the directory (its name is durable before the put returns)."""
        first = self._count
        path = os.path.join(self.directory, segment_name(first))
        state_path = os.path.join(self.directory, state_name(first))
        fd = state_fd = -1
        try:
            self._call("create", path)
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
            state_fd = os.open(state_path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
            self._call("write", path)
            _pwrite_all(fd, MAGIC + blob, 0)
            if self._fsync:
                self._call("fsync", path)
                os.fdatasync(fd)
                self._call("dirsync", self.directory)
                fsync_directory(self.directory)
        except OSError as exc:
            for f in (fd, state_fd):
                if f >= 0:
                    os.close(f)
            for p in (path, state_path):
                try:
                    os.unlink(p)
                except OSError:
                    pass
            raise StorageUnavailable(f"outbox {path}: could not start a segment ({exc})") from exc
        seg = _Segment(first, fd, state_fd, path, state_path, len(MAGIC), 0, (), ())
        with self._lock:
            self._segments.append(seg)
        self._added(seg, log_offset, 0, MAGIC + blob, [len(MAGIC) + s for s in starts], n)
        return first

    def _added(self, seg: _Segment, log_offset: int, size: int, blob: bytes, starts: list[int], n: int) -> None:
        """Account for a put durable at byte ``size`` of ``seg``."""
        first = self._count
        index = [size + starts[k] for k in range(n) if (first - seg.first + k) % INDEX_EVERY == 0]
        with self._lock:
            seg.index.extend(index)
            seg.due.grow_zeros(n)
            self._put_offsets.extend([log_offset])
            self._put_firsts.extend([first])
            self._status.grow_zeros(n)
            self._attempts.grow_zeros(n)
            self._counts[PENDING] += n
            seg.size = size + len(blob)
            seg.count += n
            self._count = first + n

    def _call(self, op: str, path: str) -> None:
        if self._hook is not None:
            self._hook(op, path)

    # ------------------------------------------------------------------ read

    def read(self, from_seq: int, max_count: int) -> list[tuple[int, Message]]:
        """Up to ``max_count`` ``(seq, Message)`` from ``from_seq`` on, in seq
        order, durable messages of live segments only (a retired segment's
        messages are skipped: they are all delivered or failed; ``[]`` at the
        end). Seeks by the sparse index: ``O(INDEX_EVERY + bytes read)``."""
        if from_seq < 0 or max_count < 0:
            raise ValueError("from_seq and max_count must be >= 0")
        out: list[tuple[int, Message]] = []
        with self._io_lock:
            while len(out) < max_count:
                with self._lock:
                    ends = [s.end for s in self._segments]
                    i = bisect.bisect_right(ends, from_seq)
                    if i == len(ends):
                        break
                    seg = self._segments[i]
                    start = max(from_seq, seg.first)
                    n = min(max_count - len(out), seg.end - start)
                    rel = start - seg.first
                    pos = int(seg.index.a[rel // INDEX_EVERY])
                    end, fd, path = seg.size, seg.fd, seg.path
                values = _read_frames(fd, path, pos, end, rel % INDEX_EVERY, n)
                out.extend((start + k, Message(v[3], v[4], v[5])) for k, v in enumerate(values))
                from_seq = start + n
        return out

    def message(self, seq: int) -> Message:
        """The message of ``seq`` (``IndexError`` if there is none, or its segment was retired)."""
        got = self.read(seq, 1) if 0 <= seq < self._count else []
        if not got or got[0][0] != seq:
            raise IndexError(f"no message {seq} (the outbox holds {self._count}, of which the live segments "
                             "hold the undelivered)")
        return got[0][1]

    # ------------------------------------------------------------------ state

    def status(self, seqs) -> tuple[np.ndarray, np.ndarray]:
        """``(statuses u8, attempts u32)`` of ``seqs`` (copies), as durable, retired or not.
        ``IndexError`` for a seq not put. ``O(len(seqs))``."""
        seqs = np.asarray(seqs, dtype=np.int64)
        with self._lock:
            self._check_seqs(seqs)
            return self._status.a[seqs], self._attempts.a[seqs]

    def due(self, seqs) -> np.ndarray:
        """The next attempt (epoch ms, 0: none due) recorded for each of ``seqs`` (0 in a retired segment)."""
        seqs = np.asarray(seqs, dtype=np.int64).reshape(-1)
        out = np.zeros(len(seqs), np.int64)
        with self._lock:
            self._check_seqs(seqs)
            for seg in self._segments:
                m = (seqs >= seg.first) & (seqs < seg.end)
                if m.any():
                    out[m] = seg.due.a[seqs[m] - seg.first]
        return out

    def _check_seqs(self, seqs: np.ndarray) -> None:
        if len(seqs) and (int(seqs.min()) < 0 or int(seqs.max()) >= self._count):
            raise IndexError(f"seqs must lie in [0, {self._count})")

    def set_status(self, seqs, statuses, attempts, due_ms=0) -> None:
        """Record delivery results: durable when it returns (one fdatasync per
        segment touched), then visible to :meth:`status`. ``statuses``,
        ``attempts`` and ``due_ms`` (the next attempt, epoch ms; 0: none) are
        arrays like ``seqs`` or scalars; a seq given twice keeps its last
        values; a seq of a retired segment is final already and left as it is.
        ``O(k log k)`` for ``k`` seqs, one ``pwrite`` per run of consecutive
        seqs. On a disk fault raises :class:`StorageUnavailable`; what
        :meth:`status` shows is then unchanged. A segment whose messages are
        then all final is retired (when no put is running; else later)."""
        seqs = np.asarray(seqs, dtype=np.int64).reshape(-1)
        statuses = np.broadcast_to(np.asarray(statuses, dtype=np.int64), seqs.shape)
        attempts = np.broadcast_to(np.asarray(attempts, dtype=np.int64), seqs.shape)
        due_ms = np.broadcast_to(np.asarray(due_ms, dtype=np.int64), seqs.shape)
        if not len(seqs):
            return
        if int(statuses.min()) < PENDING or int(statuses.max()) > FAILED:
            raise ValueError("a status must be PENDING, DELIVERED or FAILED")
        if int(attempts.min()) < 0 or int(attempts.max()) > 0xFFFFFFFF:
            raise ValueError("attempts must fit in u32")
        with self._lock:
            self._check_seqs(seqs)
        order = np.argsort(seqs, kind="stable")
        s = seqs[order]
        keep = np.ones(len(s), dtype=bool)
        keep[:-1] = s[1:] != s[:-1]  # the last of equal seqs wins
        order, s = order[keep], s[keep]
        recs = np.zeros(len(s), dtype=STATE_DTYPE)
        recs["status"] = statuses[order]
        recs["attempts"] = attempts[order]
        recs["due_ms"] = due_ms[order]
        with self._state_lock:
            with self._lock:
                parts = []
                for seg in self._segments:
                    a, b = np.searchsorted(s, [seg.first, seg.end])
                    if b > a:
                        parts.append((seg, int(a), int(b)))
            written: list[tuple[_Segment, int, int]] = []
            try:
                for seg, a, b in parts:
                    self._call("state.write", seg.state_path)
                    ss = s[a:b]
                    breaks = np.flatnonzero(np.diff(ss) != 1) + 1
                    for x, y in zip(np.r_[0, breaks], np.r_[breaks, len(ss)]):
                        _pwrite_all(seg.state_fd, recs[a + x:a + y].tobytes(),
                                    (int(ss[x]) - seg.first) * STATE_DTYPE.itemsize)
                    written.append((seg, a, b))
                if self._fsync:
                    for seg, _, _ in written:
                        self._call("state.fsync", seg.state_path)
                        os.fdatasync(seg.state_fd)
            except OSError as exc:
                for seg, a, b in parts:
                    self._rewrite_state(seg, s[a:b])
                raise StorageUnavailable(f"outbox {self.directory}: could not record results ({exc})") from exc
            with self._lock:
                for seg, a, b in parts:
                    ss, rr = s[a:b], recs[a:b]
                    old_status = self._status.a[ss]
                    old_attempts = self._attempts.a[ss].astype(np.int64)
                    np.subtract.at(self._counts, old_status.astype(np.int64), 1)
                    np.add.at(self._counts, rr["status"].astype(np.int64), 1)
                    self._attempts_total += int(rr["attempts"].astype(np.int64).sum() - old_attempts.sum())
                    self._status.a[ss] = rr["status"]
                    self._attempts.a[ss] = rr["attempts"]
                    seg.due.a[ss - seg.first] = rr["due_ms"]
                    self._check_retire.add(seg.first)
        self.retire()

    def _rewrite_state(self, seg: _Segment, seqs: np.ndarray) -> None:
        """After a failed write: put back what memory says (best effort, not
        fsync'd: memory is what was durable, and the next call fsyncs)."""
        with self._lock:
            recs = np.zeros(len(seqs), dtype=STATE_DTYPE)
            recs["status"] = self._status.a[seqs]
            recs["attempts"] = self._attempts.a[seqs]
            recs["due_ms"] = seg.due.a[seqs - seg.first]
        try:
            for i, seq in enumerate(seqs):
                _pwrite_all(seg.state_fd, recs[i:i + 1].tobytes(), (int(seq) - seg.first) * STATE_DTYPE.itemsize)
        except OSError:
            pass

    # ------------------------------------------------------------------ retiring

    def retire(self, wait: bool = False) -> int:
        """Retire every segment whose messages are all delivered or failed (see the module doc); how many.
        Without ``wait`` it does nothing while a put runs (the next call, or the put's end, does it).
        A disk fault is logged and the segment stays live (tried again later)."""
        if not self._put_lock.acquire(blocking=wait):
            return 0
        try:
            with self._state_lock:
                return self._retire_due()
        finally:
            self._put_lock.release()

    def _retire_due(self) -> int:
        """The caller holds ``_put_lock`` and ``_state_lock``."""
        done = 0
        with self._lock:
            check, self._check_retire = self._check_retire, set()
            ready = [seg for seg in self._segments if seg.first in check and seg.count
                     and not np.any(self._status.a[seg.first:seg.end] == PENDING)]
        for seg in ready:
            try:
                self._retire(seg)
                done += 1
            except StorageUnavailable as exc:
                logger.warning("outbox %s: could not retire a segment (%s); trying again later", seg.path, exc)
                with self._lock:
                    self._check_retire.add(seg.first)
        return done

    def _retire(self, seg: _Segment) -> None:
        with self._lock:
            statuses = self._status.a[seg.first:seg.end].copy()
            attempts = self._attempts.a[seg.first:seg.end].astype("<u4")
            firsts = self._put_firsts.values()
            a, b = np.searchsorted(firsts, [seg.first, seg.end])
            offsets = self._put_offsets.a[a:b].astype("<i8")
            put_firsts = firsts[a:b].astype("<i8")
        blob, _ = encode_batch([[seg.first, seg.count, offsets.tobytes(), put_firsts.tobytes(),
                                 zlib.compress(statuses.tobytes(), 6), zlib.compress(attempts.tobytes(), 6)]])
        size = self._done_size
        try:
            self._call("done.write", self._done_path)
            _pwrite_all(self._done_fd, blob, size)
            if self._fsync:
                self._call("done.fsync", self._done_path)
                os.fdatasync(self._done_fd)
        except OSError as exc:
            try:
                os.ftruncate(self._done_fd, size)
            except OSError:
                pass  # a torn frame past the durable end: opening cuts it, the segment is still there
            raise StorageUnavailable(f"outbox {self._done_path}: could not record a retired segment ({exc})") from exc
        self._done_size = size + len(blob)
        with self._io_lock:  # no read is in its files
            with self._lock:
                self._segments.remove(seg)
            os.close(seg.fd)
            os.close(seg.state_fd)
        self.retired += 1
        try:
            self._call("unlink", seg.path)
            os.unlink(seg.path)
            os.unlink(seg.state_path)
            if self._fsync:
                fsync_directory(self.directory)
        except OSError as exc:  # done covers it: the next open unlinks it
            logger.warning("outbox %s: retired, but could not be unlinked (%s)", seg.path, exc)

    def sizes(self) -> dict[str, int]:
        """Bytes on disk: ``messages`` (the live segments), ``state`` (their state files), ``done``, and
        ``segments`` (how many are live). ``O(live segments)``."""
        with self._lock:
            segs = list(self._segments)
            out = {"segments": len(segs), "messages": sum(s.size for s in segs), "done": self._done_size}
        state = 0
        with self._io_lock:
            for s in segs:
                try:
                    state += os.fstat(s.state_fd).st_size
                except OSError:
                    pass
        out["state"] = state
        return out

    def outbox_bytes(self) -> int:
        """Every byte of the outbox's files."""
        s = self.sizes()
        return s["messages"] + s["state"] + s["done"]

    # ------------------------------------------------------------------ erasure

    def scrub(self, player_ids: Sequence[str]) -> int:
        """Blank every award message of these players still in a live segment (docs/api.md §17, erasure; a
        retired segment holds no ids or bodies): its id's player part and its body become as many ``x`` /
        space bytes (same frame length, CRC recomputed, pwrite in place, one fdatasync per segment), and a
        pending one is marked failed (never sent). Idempotent. Returns how many it blanked.
        O(live messages) reads of ids (the bodies of matches only)."""
        wanted = set(player_ids)
        found: list[int] = []
        seq = 0
        while True:
            got = self.read(seq, 4096)
            if not got:
                break
            for s, m in got:  # award/<board_id>/<player_id>: a board id has no "/", a player id may
                if m.message_id.startswith("award/") and m.message_id[6:].partition("/")[2] in wanted:
                    found.append(s)
            seq = got[-1][0] + 1
        if not found:
            return 0
        with self._put_lock, self._state_lock, self._io_lock:  # no retirement meanwhile
            touched: dict[int, _Segment] = {}
            for s in found:
                seg, pos = self._position(s)
                length = FRAME_HEADER.unpack(os.pread(seg.fd, FRAME_HEADER_SIZE, pos))[0]
                v = unpack_payload(os.pread(seg.fd, length, pos + FRAME_HEADER_SIZE))
                board, _, tail = v[3][6:].partition("/")
                v[3] = "award/" + board + "/" + "x" * len(tail.encode("utf-8", "surrogatepass"))
                v[4] = b" " * len(v[4])
                blob, _ = encode_batch([v])
                assert len(blob) == FRAME_HEADER_SIZE + length, "a blanked message keeps its length"
                _pwrite_all(seg.fd, blob, pos)
                touched[seg.first] = seg
            if self._fsync:
                for seg in touched.values():
                    os.fdatasync(seg.fd)
        pending = [s for s in found if int(self._status.a[s]) == PENDING]
        if pending:
            _, att = self.status(pending)
            self.set_status(pending, FAILED, att)
        return len(found)

    def _position(self, seq: int) -> tuple[_Segment, int]:
        """The live segment of message ``seq`` and its frame's byte position (from the sparse index, then
        frame by frame)."""
        with self._lock:
            seg = next(s for s in self._segments if s.first <= seq < s.end)
            rel = seq - seg.first
            pos = int(seg.index.a[rel // INDEX_EVERY])
        for _ in range(rel % INDEX_EVERY):
            pos += FRAME_HEADER_SIZE + FRAME_HEADER.unpack(os.pread(seg.fd, FRAME_HEADER_SIZE, pos))[0]
        return seg, pos

    # ------------------------------------------------------------------ counts

    def counts(self) -> dict[str, int]:
        """``{"pending", "delivered", "failed", "attempts"}``: messages by durable
        status and the sum of their attempts. ``O(1)``."""
        with self._lock:
            p, d, f = (int(x) for x in self._counts)
            return {"pending": p, "delivered": d, "failed": f, "attempts": self._attempts_total}

    def oldest_pending_seq(self) -> int | None:
        """The smallest seq still pending, or None. Amortized ``O(1)``: a cursor
        moves past delivered and failed messages and never back."""
        with self._lock:
            status, count = self._status.a, self._count
            low = self._low
            while low < count and status[low] != PENDING:
                chunk = status[low:min(count, low + 65536)]
                hits = np.flatnonzero(chunk == PENDING)
                low = low + int(hits[0]) if len(hits) else low + len(chunk)
            self._low = low
            return low if low < count else None

    def oldest_pending(self) -> tuple[int, Message] | None:
        """``(seq, Message)`` of the oldest pending message, or None."""
        seq = self.oldest_pending_seq()
        return None if seq is None else (seq, self.message(seq))

    # ------------------------------------------------------------------ close

    def close(self) -> None:
        """Release the files. Idempotent."""
        if self._closed:
            return
        self._closed = True
        with self._put_lock, self._state_lock, self._io_lock:
            for seg in self._segments:
                os.close(seg.fd)
                os.close(seg.state_fd)
            os.close(self._done_fd)

    def __enter__(self) -> "Outbox":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def check(self) -> None:
        """O(n) self-check (tests): counts, attempts, segments and indexes agree with the columns."""
        with self._lock:
            st = self._status.values()
            assert len(st) == self._attempts.n == self._count
            assert [int(x) for x in self._counts] == np.bincount(st, minlength=3)[:3].tolist()
            assert self._attempts_total == int(self._attempts.values().sum(dtype=np.int64))
            prev = -1
            for seg in self._segments:
                assert seg.first > prev and seg.count > 0 and seg.end <= self._count
                assert seg.index.n == (seg.count + INDEX_EVERY - 1) // INDEX_EVERY and seg.due.n == seg.count
                prev = seg.end - 1
            if self._segments:  # every seq after the live segments' last is retired, or there is none
                assert self._segments[-1].end <= self._count
            firsts = self._put_firsts.values()
            assert np.all(np.diff(firsts) > 0) and np.all(np.diff(self._put_offsets.values()) > 0)
            assert not np.any(st[: self._low] == PENDING)
            live = np.zeros(self._count, bool)
            for seg in self._segments:
                live[seg.first:seg.end] = True
            assert not np.any(st[~live] == PENDING), "a retired message is pending"


# ---------------------------------------------------------------- helpers


class _Scan:
    """What opening found: complete puts, their index, where the good bytes end."""

    __slots__ = ("end", "count", "index", "put_offsets", "put_firsts", "problem", "tail_offset")

    def __init__(self) -> None:
        self.end = len(MAGIC)
        self.count = 0
        self.index: list[int] = []
        self.put_offsets: list[int] = []
        self.put_firsts: list[int] = []
        self.problem: str | None = None
        self.tail_offset: int | None = None  # the log offset of the unfinished put, when its first frame is good


def _message_fields(v) -> tuple[int, int, int] | None:
    """``(log_offset, k, count)`` of a decoded payload, None if it is not a message."""
    if (isinstance(v, list) and len(v) == 6 and all(type(x) is int for x in (v[0], v[1], v[2], v[5]))
            and isinstance(v[3], str) and isinstance(v[4], bytes) and 0 <= v[1] < v[2] and v[0] >= 0):
        return v[0], v[1], v[2]
    return None


def _scan(fd: int) -> _Scan:
    """Verify ``messages`` from its header on, block by block (``O(bytes)``,
    memory one block): stops at the first frame that is bad or breaks the
    puts' order, or at the end."""
    out = _Scan()
    pos = out.end
    group: tuple[int, int] | None = None  # (log_offset, count) of the put being read
    group_index: list[int] = []
    k_next = 0
    buf, base = b"", pos
    while True:
        rel = pos - base
        result = parse_frames(buf, rel, len(buf), 4096)
        for v, start in zip(result.values, result.starts):
            f = _message_fields(v)
            at = base + start
            if f is None:
                out.problem = "not a message"
            elif k_next == 0 and (f[1] != 0 or (out.put_offsets and f[0] <= out.put_offsets[-1])):
                out.problem = "a put out of order"
            elif k_next and (f[0], f[2]) != group or (k_next and f[1] != k_next):
                out.problem = "a put out of order"
            if out.problem:
                break
            if k_next == 0:
                group, group_index = (f[0], f[2]), []
                out.tail_offset = f[0]
            if (out.count + f[1]) % INDEX_EVERY == 0:
                group_index.append(at)
            k_next = f[1] + 1
            if k_next == f[2]:  # the put is complete
                out.put_offsets.append(f[0])
                out.put_firsts.append(out.count)
                out.count += f[2]
                out.index.extend(group_index)
                out.end = at + FRAME_HEADER_SIZE + FRAME_HEADER.unpack_from(buf, start)[0]
                k_next, out.tail_offset = 0, None
        if out.problem:
            return out
        pos = base + result.end
        if result.problem is None and result.end < len(buf):
            continue  # stopped at the frame limit: the buffer holds more
        if result.problem is not None and not result.incomplete:
            out.problem = result.problem
            return out
        remainder = buf[result.end:]
        need = _BLOCK
        if len(remainder) >= FRAME_HEADER_SIZE:
            need = max(need, FRAME_HEADER.unpack_from(remainder)[0] + FRAME_HEADER_SIZE)
        more = os.pread(fd, need, base + len(buf))
        if not more:
            if remainder or k_next:
                out.problem = result.problem or "an unfinished put"
            return out
        buf, base = remainder + more, pos


def _check_torn_put(fd: int, path: str, scan: _Scan) -> None:
    """The bytes after ``scan.end`` must be one unfinished put: every valid
    frame there a message of the same log record, after the last complete
    put. Otherwise raise :class:`LogCorruption`. ``O(tail bytes)``."""
    size = os.fstat(fd).st_size
    tail = os.pread(fd, size - scan.end, scan.end)
    after = scan.put_offsets[-1] if scan.put_offsets else -1
    offset = scan.tail_offset
    pos = 0
    while True:
        found = find_valid_frame(tail, pos, len(tail))
        if found is None:
            return
        length = FRAME_HEADER.unpack_from(tail, found)[0]
        f = _message_fields(unpack_payload(tail[found + FRAME_HEADER_SIZE:found + FRAME_HEADER_SIZE + length]))
        if f is None or f[0] <= after or (offset is not None and f[0] != offset):
            raise LogCorruption(f"outbox {path}: {scan.problem} at byte offset {scan.end} followed by a valid "
                                f"frame of another put at byte offset {scan.end + found}")
        offset = f[0]
        pos = found + FRAME_HEADER_SIZE + length


def _read_frames(fd: int, path: str, pos: int, end: int, skip: int, n: int) -> list:
    """Decode ``n`` frames after skipping ``skip``, from byte ``pos`` (all
    before ``end``, the durable size), with ``pread``s of a block or more."""
    values: list = []
    buf, base = b"", pos
    while n > 0:
        rel = pos - base
        if skip:
            result = parse_frames(buf, rel, len(buf), skip, keep=False, decode=False)
            skip -= len(result.starts)
        else:
            result = parse_frames(buf, rel, len(buf), n)
            values.extend(result.values)
            n -= len(result.values)
        pos = base + result.end
        if n == 0:
            break
        if result.problem is None and result.end < len(buf):
            continue  # done skipping: the buffer holds more
        if result.problem is not None and not result.incomplete:
            raise LogCorruption(f"outbox {path}: {result.problem} at byte offset {pos}")
        remainder = buf[result.end:]
        need = _BLOCK
        if len(remainder) >= FRAME_HEADER_SIZE:
            need = max(need, FRAME_HEADER.unpack_from(remainder)[0] + FRAME_HEADER_SIZE)
        more = os.pread(fd, min(need, end - base - len(buf)), base + len(buf))
        if not more:
            raise LogCorruption(f"outbox {path}: durable data ends inside a message at byte offset {pos}")
        buf, base = remainder + more, pos
    return values


def _open_segment(directory: str, first: int, last: bool, fsync: bool, hook: FaultHook | None):
    """Open and verify segment ``first``: ``(segment, put offsets, put first seqs, statuses, attempts)``,
    or None when it is the last one and holds no complete put (unlinked: a put that never returned)."""
    path = os.path.join(directory, segment_name(first))
    fd = os.open(path, os.O_RDWR)
    try:
        size = os.fstat(fd).st_size
        head = os.pread(fd, len(MAGIC), 0)
        if size < len(MAGIC) or head != MAGIC:
            if not (last and size < len(MAGIC) and MAGIC.startswith(head)):
                raise LogCorruption(f"outbox {path}: bad header at byte offset 0")
            scan = None
        else:
            scan = _scan(fd)
            if scan.end < size:
                if not last:
                    raise LogCorruption(f"outbox {path}: {scan.problem} at byte offset {scan.end} (not the last "
                                        "segment: no put was unfinished there)")
                _check_torn_put(fd, path, scan)
                logger.warning("outbox %s: unfinished put (%s) at byte offset %d; truncating %d bytes",
                               path, scan.problem, scan.end, size - scan.end)
                if hook is not None:
                    hook("truncate", path)
                os.ftruncate(fd, scan.end)
                if fsync:
                    os.fsync(fd)
        if scan is None or scan.count == 0:  # a segment whose first put never returned
            os.close(fd)
            fd = -1
            _unlink_segment(directory, first, fsync)
            return None
        state_fd, statuses, attempts, due = _open_state(os.path.join(directory, state_name(first)), scan.count,
                                                        fsync)
    except BaseException:
        if fd >= 0:
            os.close(fd)
        raise
    seg = _Segment(first, fd, state_fd, path, os.path.join(directory, state_name(first)), scan.end, scan.count,
                   scan.index, due)
    return (seg, np.asarray(scan.put_offsets, np.int64), np.asarray(scan.put_firsts, np.int64) + first,
            statuses, attempts)


def _unlink_segment(directory: str, first: int, fsync: bool) -> None:
    for name in (segment_name(first), state_name(first)):
        try:
            os.unlink(os.path.join(directory, name))
        except FileNotFoundError:
            pass
    if fsync:
        fsync_directory(directory)


def _open_state(path: str, count: int, fsync: bool) -> tuple[int, np.ndarray, np.ndarray, np.ndarray]:
    """A segment's state file's fd and the (status, attempts, due) columns of its ``count`` messages."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        size = os.fstat(fd).st_size
        want = count * STATE_DTYPE.itemsize
        if size > want:
            logger.warning("outbox %s: %d bytes past the %d messages' records; truncating", path, size - want, count)
            os.ftruncate(fd, want)
            if fsync:
                os.fsync(fd)
        whole = min(size, want) // STATE_DTYPE.itemsize
        recs = np.frombuffer(os.pread(fd, whole * STATE_DTYPE.itemsize, 0), dtype=STATE_DTYPE) if whole else \
            np.zeros(0, dtype=STATE_DTYPE)
        statuses = np.zeros(count, dtype=np.uint8)
        attempts = np.zeros(count, dtype=np.uint32)
        due = np.zeros(count, dtype=np.int64)
        statuses[:whole] = recs["status"]
        attempts[:whole] = recs["attempts"]
        due[:whole] = recs["due_ms"]
        bad = np.flatnonzero(statuses > FAILED)
        if len(bad):
            logger.warning("outbox %s: %d records with an unknown status (first seq %d) read as pending",
                           path, len(bad), int(bad[0]))
            statuses[bad] = PENDING
    except BaseException:
        os.close(fd)
        raise
    return fd, statuses, attempts, due


def _open_done(directory: str, fsync: bool) -> tuple[int, int, list]:
    """``done``'s fd, its durable size and its frames decoded: ``(first, count, put offsets, put firsts,
    statuses, attempts)`` each. A torn last frame is cut (its segment is still there); a bad frame
    followed by a valid one raises :class:`LogCorruption`."""
    path = os.path.join(directory, DONE_FILE)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        size = os.fstat(fd).st_size
        if size < len(DONE_MAGIC):
            if not DONE_MAGIC.startswith(os.pread(fd, size, 0)):
                raise LogCorruption(f"outbox {path}: bad header at byte offset 0")
            os.ftruncate(fd, 0)
            _pwrite_all(fd, DONE_MAGIC, 0)
            if fsync:
                os.fsync(fd)
                fsync_directory(directory)
            return fd, len(DONE_MAGIC), []
        buf = os.pread(fd, size, 0)
        if buf[:len(DONE_MAGIC)] != DONE_MAGIC:
            raise LogCorruption(f"outbox {path}: bad header at byte offset 0")
        result = parse_frames(buf, len(DONE_MAGIC), len(buf), 1 << 62)
        out = []
        for v, start in zip(result.values, result.starts):
            got = _retired_fields(v)
            if got is None:
                raise LogCorruption(f"outbox {path}: not a retired segment at byte offset {start}")
            out.append(got)
        if result.end < len(buf):
            later = find_valid_frame(buf, result.end + 1, len(buf))
            if later is not None:
                raise LogCorruption(f"outbox {path}: {result.problem} at byte offset {result.end} followed by a "
                                    f"valid frame at byte offset {later}")
            logger.warning("outbox %s: unfinished frame (%s) at byte offset %d; truncating %d bytes",
                           path, result.problem, result.end, len(buf) - result.end)
            os.ftruncate(fd, result.end)
            if fsync:
                os.fsync(fd)
    except BaseException:
        os.close(fd)
        raise
    return fd, result.end, out


def _retired_fields(v):
    """A decoded ``done`` frame as ``(first, count, put offsets, put firsts, statuses, attempts)``; None if
    it is not one."""
    try:
        first, count, offsets, firsts, st, att = v
        offsets = np.frombuffer(offsets, "<i8").astype(np.int64)
        firsts = np.frombuffer(firsts, "<i8").astype(np.int64)
        statuses = np.frombuffer(zlib.decompress(st), np.uint8).copy()
        attempts = np.frombuffer(zlib.decompress(att), "<u4").astype(np.uint32)
    except (TypeError, ValueError, zlib.error):
        return None
    if (type(first) is not int or type(count) is not int or first < 0 or count < 1 or len(statuses) != count
            or len(attempts) != count or len(offsets) != len(firsts) or not len(firsts) or firsts[0] != first
            or np.any(firsts >= first + count) or np.any(statuses == PENDING) or np.any(statuses > FAILED)):
        return None
    return first, count, offsets, firsts, statuses, attempts


def _migrate_first_layout(directory: str, fsync: bool) -> None:
    """Move an outbox of the first layout (``messages`` and ``state`` of 8-byte records) to segments:
    ``state.<0>`` written whole (via a temporary name), then ``messages`` renamed ``messages.<0>``,
    then ``state`` unlinked. A crash at any step is finished by the next open."""
    legacy = os.path.join(directory, LEGACY_MESSAGES_FILE)
    legacy_state = os.path.join(directory, LEGACY_STATE_FILE)
    if os.path.exists(legacy):
        old = np.zeros(0, LEGACY_STATE_DTYPE)
        if os.path.exists(legacy_state):
            raw = open(legacy_state, "rb").read()
            old = np.frombuffer(raw[:len(raw) // LEGACY_STATE_DTYPE.itemsize * LEGACY_STATE_DTYPE.itemsize],
                                LEGACY_STATE_DTYPE)
        recs = np.zeros(len(old), STATE_DTYPE)
        recs["status"] = old["status"]
        recs["attempts"] = old["attempts"]
        tmp = os.path.join(directory, state_name(0) + ".tmp")
        with open(tmp, "wb") as f:
            f.write(recs.tobytes())
            f.flush()
            if fsync:
                os.fsync(f.fileno())
        os.replace(tmp, os.path.join(directory, state_name(0)))
        os.replace(legacy, os.path.join(directory, segment_name(0)))
        if fsync:
            fsync_directory(directory)
        logger.info("outbox %s: moved to the segmented layout", directory)
    if os.path.exists(legacy_state):
        os.unlink(legacy_state)
        if fsync:
            fsync_directory(directory)


__all__ = ["DELIVERED", "FAILED", "INDEX_EVERY", "MESSAGES_FILE", "Outbox", "PENDING", "SEGMENT_BYTES",
           "STATE_DTYPE", "STATE_FILE", "segment_name", "state_name"]

"""``Outbox``: the webhook messages (docs/api.md §16 "Webhooks") kept durable until delivered.

The engine puts the messages of each log record once that record is durable;
the delivery worker (:mod:`engine.runtime.webhooks`) reads them back in order
and writes each attempt's result here. Files and fsync only (no asyncio).

Layout of the directory (e.g. ``<data-dir>/outbox/``)::

    messages   b"FRWHOB01", then one frame per message (engine.log.framing:
               length u32 LE | crc32 u32 LE | msgpack payload), payload
               [log_offset, k, count, message_id, body, created_ms]: the k-th of
               the ``count`` messages put for log record ``log_offset``
    state      8 bytes per message, at byte 8 * seq: status u8 (0 pending,
               1 delivered, 2 failed), 3 zero bytes, attempts u32 LE

Sequence numbers (seqs) are dense from 0 in put order: a message's seq is its
position in ``messages``. A put is one ``pwrite`` of its frames and one
``fdatasync``; puts are serialized, so at most one is unfinished when the
process dies. The state file is written only when results come in: a record
past its end, or a hole, reads as zeros, which is ``pending`` with no attempt,
so a put writes nothing there. Results are ``pwrite``'d in place (a run of
consecutive seqs in one call; an 8-byte aligned record never straddles a
sector) and made durable by one ``fdatasync`` per :meth:`Outbox.set_status` call.

In memory, per message: its status (1 byte) and attempts (4 bytes), and every
64th message's byte position (1/8 byte); per put: its log offset and first seq
(16 bytes). Bodies stay on disk: a receiver that is down only grows files.

Opening verifies every frame (CRC, msgpack, the puts' ``k``/``count``/log
offsets) and decides what a bad frame means, by the rule of
:mod:`engine.log.segment_log`:

* The bytes after the last complete put are the put that was in flight when
  the process died (never returned, so never acknowledged): if every valid
  frame among them belongs to that one put, they are truncated (a warning
  names the file and byte offset) and the caller puts that record again.
* Anything else that does not verify (a bad frame followed by a frame of
  another put, a bad header) raises :class:`engine.core.errors.LogCorruption`
  naming the file and byte offset.

State records whose status is not 0-2 read as pending (a redelivery, never a
lost message); a state file longer than the messages is cut to their count.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from engine.core.errors import LogCorruption, StorageUnavailable
from engine.core.webhooks import DELIVERED, FAILED, PENDING, Message, award_messages
from engine.log.framing import FRAME_HEADER, FRAME_HEADER_SIZE, encode_batch, find_valid_frame, parse_frames, unpack_payload
from engine.log.port import FaultHook
from engine.log.segment_log import _pwrite_all, fsync_directory

logger = logging.getLogger("flowrank.log")

MAGIC = b"FRWHOB01"
MESSAGES_FILE = "messages"
STATE_FILE = "state"
STATE_DTYPE = np.dtype({"names": ["status", "attempts"], "formats": ["u1", "<u4"], "offsets": [0, 4], "itemsize": 8})
INDEX_EVERY = 64  # a byte position kept per this many messages
_BLOCK = 1 << 20


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


class Outbox:
    """Durable webhook messages and their delivery state. Create with :meth:`open`.

    Thread-safe: puts are serialized among themselves, results among
    themselves; reads may run beside either and see only durable messages.
    """

    def __init__(self, directory: str, fd: int, state_fd: int, scan: "_Scan", statuses: np.ndarray,
                 attempts: np.ndarray, fault_hook: FaultHook | None, fsync: bool):
        self.directory = directory
        self._path = os.path.join(directory, MESSAGES_FILE)
        self._state_path = os.path.join(directory, STATE_FILE)
        self._fd = fd
        self._state_fd = state_fd
        self._hook = fault_hook
        self._fsync = fsync
        self._size = scan.end  # durable bytes of `messages`
        self._count = scan.count
        self._index = _Column(np.int64, scan.index)
        self._put_offsets = _Column(np.int64, scan.put_offsets)
        self._put_firsts = _Column(np.int64, scan.put_firsts)
        self._status = _Column(np.uint8, statuses)
        self._attempts = _Column(np.uint32, attempts)
        self._counts = np.bincount(statuses, minlength=3)[:3].astype(np.int64)
        self._attempts_total = int(attempts.sum(dtype=np.int64))
        self._low = 0  # every seq below is delivered or failed
        self._dirty = False  # `messages` may hold bytes past _size (a failed put)
        self._lock = threading.Lock()  # the fields above
        self._put_lock = threading.Lock()  # one put at a time
        self._state_lock = threading.Lock()  # one set_status at a time
        self._closed = False

    # ------------------------------------------------------------------ open

    @classmethod
    def open(cls, directory: str, *, fault_hook: FaultHook | None = None, fsync: bool = True) -> "Outbox":
        """Open (creating if needed) the outbox in ``directory``: verifies every
        message (``O(bytes)``), truncates an unfinished last put, raises
        :class:`LogCorruption` for anything else that does not verify.
        ``fault_hook(op, path)`` is called before ``"create"``, ``"write"``,
        ``"fsync"``, ``"truncate"``, ``"dirsync"``, ``"state.write"`` and
        ``"state.fsync"``. ``fsync=False``: benchmarks only, not durable."""
        directory = os.path.abspath(directory)
        os.makedirs(directory, exist_ok=True)
        path = os.path.join(directory, MESSAGES_FILE)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            size = os.fstat(fd).st_size
            if size < len(MAGIC):
                if not MAGIC.startswith(os.pread(fd, size, 0)):
                    raise LogCorruption(f"outbox {path}: bad header at byte offset 0")
                if fault_hook is not None:
                    fault_hook("create", path)
                os.ftruncate(fd, 0)
                _pwrite_all(fd, MAGIC, 0)
                if fsync:
                    os.fsync(fd)
                    fsync_directory(directory)
            elif os.pread(fd, len(MAGIC), 0) != MAGIC:
                raise LogCorruption(f"outbox {path}: bad header at byte offset 0")
            scan = _scan(fd)
            if scan.end < os.fstat(fd).st_size:
                _check_torn_put(fd, path, scan)
                logger.warning("outbox %s: unfinished put (%s) at byte offset %d; truncating %d bytes",
                               path, scan.problem, scan.end, os.fstat(fd).st_size - scan.end)
                os.ftruncate(fd, scan.end)
                if fsync:
                    os.fsync(fd)
            state_fd, statuses, attempts = _open_state(directory, scan.count, fsync)
        except BaseException:
            os.close(fd)
            raise
        return cls(directory, fd, state_fd, scan, statuses, attempts, fault_hook, fsync)

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
        """The first seq the put for ``log_offset`` got; None if there was none. ``O(log puts)``."""
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
        """Write one put's frames at the end and fsync; the caller holds ``_put_lock``."""
        size, first = self._size, self._count
        try:
            if self._dirty:
                self._call("truncate", self._path)
                os.ftruncate(self._fd, size)
                self._dirty = False
            self._dirty = True
            self._call("write", self._path)
            _pwrite_all(self._fd, blob, size)
            if self._fsync:
                self._call("fsync", self._path)
                os.fdatasync(self._fd)
            self._dirty = False
        except OSError as exc:
            self._undo_put(size)
            raise StorageUnavailable(f"outbox {self._path}: could not append ({exc})") from exc
        index = [size + starts[k] for k in range(n) if (first + k) % INDEX_EVERY == 0]
        with self._lock:
            self._index.extend(index)
            self._put_offsets.extend([log_offset])
            self._put_firsts.extend([first])
            self._status.grow_zeros(n)
            self._attempts.grow_zeros(n)
            self._counts[PENDING] += n
            self._size = size + len(blob)
            self._count = first + n
        return first

    def _undo_put(self, size: int) -> None:
        try:
            self._call("truncate", self._path)
            os.ftruncate(self._fd, size)
            self._dirty = False
        except OSError:
            pass  # retried before the next write

    def _call(self, op: str, path: str) -> None:
        if self._hook is not None:
            self._hook(op, path)

    # ------------------------------------------------------------------ read

    def read(self, from_seq: int, max_count: int) -> list[tuple[int, Message]]:
        """Up to ``max_count`` ``(seq, Message)`` from ``from_seq`` on, in seq
        order, durable messages only (``[]`` at the end). Seeks by the sparse
        index: ``O(INDEX_EVERY + bytes read)``."""
        if from_seq < 0 or max_count < 0:
            raise ValueError("from_seq and max_count must be >= 0")
        with self._lock:
            n = min(max_count, self._count - from_seq)
            if n <= 0:
                return []
            pos = int(self._index.a[from_seq // INDEX_EVERY])
            end = self._size
        skip = from_seq % INDEX_EVERY
        values = _read_frames(self._fd, self._path, pos, end, skip, n)
        return [(from_seq + i, Message(v[3], v[4], v[5])) for i, v in enumerate(values)]

    def message(self, seq: int) -> Message:
        """The message of ``seq`` (``IndexError`` if there is none)."""
        got = self.read(seq, 1) if 0 <= seq < self._count else []
        if not got:
            raise IndexError(f"no message {seq} (the outbox holds {self._count})")
        return got[0][1]

    # ------------------------------------------------------------------ state

    def status(self, seqs) -> tuple[np.ndarray, np.ndarray]:
        """``(statuses u8, attempts u32)`` of ``seqs`` (copies), as durable.
        ``IndexError`` for a seq not put. ``O(len(seqs))``."""
        seqs = np.asarray(seqs, dtype=np.int64)
        with self._lock:
            self._check_seqs(seqs)
            return self._status.a[seqs], self._attempts.a[seqs]

    def _check_seqs(self, seqs: np.ndarray) -> None:
        if len(seqs) and (int(seqs.min()) < 0 or int(seqs.max()) >= self._count):
            raise IndexError(f"seqs must lie in [0, {self._count})")

    def set_status(self, seqs, statuses, attempts) -> None:
        """Record delivery results: durable when it returns (one fdatasync per
        call), then visible to :meth:`status`. ``statuses``/``attempts`` are
        arrays like ``seqs`` or scalars; a seq given twice keeps its last
        values. ``O(k log k)`` for ``k`` seqs, one ``pwrite`` per run of
        consecutive seqs. On a disk fault raises :class:`StorageUnavailable`;
        what :meth:`status` shows is then unchanged."""
        seqs = np.asarray(seqs, dtype=np.int64).reshape(-1)
        statuses = np.broadcast_to(np.asarray(statuses, dtype=np.int64), seqs.shape)
        attempts = np.broadcast_to(np.asarray(attempts, dtype=np.int64), seqs.shape)
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
        breaks = np.flatnonzero(np.diff(s) != 1) + 1
        with self._state_lock:
            try:
                self._call("state.write", self._state_path)
                for a, b in zip(np.r_[0, breaks], np.r_[breaks, len(s)]):
                    _pwrite_all(self._state_fd, recs[a:b].tobytes(), int(s[a]) * STATE_DTYPE.itemsize)
                if self._fsync:
                    self._call("state.fsync", self._state_path)
                    os.fdatasync(self._state_fd)
            except OSError as exc:
                self._rewrite_state(s)
                raise StorageUnavailable(f"outbox {self._state_path}: could not record results ({exc})") from exc
            with self._lock:
                old_status = self._status.a[s]
                old_attempts = self._attempts.a[s].astype(np.int64)
                np.subtract.at(self._counts, old_status.astype(np.int64), 1)
                np.add.at(self._counts, recs["status"].astype(np.int64), 1)
                self._attempts_total += int(recs["attempts"].astype(np.int64).sum() - old_attempts.sum())
                self._status.a[s] = recs["status"]
                self._attempts.a[s] = recs["attempts"]

    def _rewrite_state(self, seqs: np.ndarray) -> None:
        """After a failed write: put back what memory says (best effort, not
        fsync'd: memory is what was durable, and the next call fsyncs)."""
        with self._lock:
            recs = np.zeros(len(seqs), dtype=STATE_DTYPE)
            recs["status"] = self._status.a[seqs]
            recs["attempts"] = self._attempts.a[seqs]
        try:
            for i, seq in enumerate(seqs):
                _pwrite_all(self._state_fd, recs[i:i + 1].tobytes(), int(seq) * STATE_DTYPE.itemsize)
        except OSError:
            pass

    def scrub(self, player_ids: Sequence[str]) -> int:
        """Blank every award message of these players (docs/api.md §17, erasure): its id's player part and its
        body become as many ``x`` / space bytes (same frame length, CRC recomputed, pwrite in place, one
        fdatasync), and a pending one is marked failed (never sent). Idempotent. Returns how many it
        blanked. O(messages) reads of ids (the bodies of matches only)."""
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
        with self._state_lock:
            for s in found:
                pos = self._position(s)
                length = FRAME_HEADER.unpack(os.pread(self._fd, FRAME_HEADER_SIZE, pos))[0]
                v = unpack_payload(os.pread(self._fd, length, pos + FRAME_HEADER_SIZE))
                board, _, tail = v[3][6:].partition("/")
                v[3] = "award/" + board + "/" + "x" * len(tail.encode("utf-8", "surrogatepass"))
                v[4] = b" " * len(v[4])
                blob, _ = encode_batch([v])
                assert len(blob) == FRAME_HEADER_SIZE + length, "a blanked message keeps its length"
                _pwrite_all(self._fd, blob, pos)
            if self._fsync:
                os.fdatasync(self._fd)
        pending = [s for s in found if int(self._status.a[s]) == PENDING]
        if pending:
            _, att = self.status(pending)
            self.set_status(pending, FAILED, att)
        return len(found)

    def _position(self, seq: int) -> int:
        """The byte position of message ``seq``'s frame (from the sparse index, then frame by frame)."""
        with self._lock:
            pos = int(self._index.a[seq // INDEX_EVERY])
        for _ in range(seq % INDEX_EVERY):
            pos += FRAME_HEADER_SIZE + FRAME_HEADER.unpack(os.pread(self._fd, FRAME_HEADER_SIZE, pos))[0]
        return pos

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
        with self._put_lock, self._state_lock:
            os.close(self._fd)
            os.close(self._state_fd)

    def __enter__(self) -> "Outbox":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def check(self) -> None:
        """O(n) self-check (tests): counts, attempts and index agree with the columns."""
        with self._lock:
            st = self._status.values()
            assert len(st) == self._attempts.n == self._count
            assert [int(x) for x in self._counts] == np.bincount(st, minlength=3)[:3].tolist()
            assert self._attempts_total == int(self._attempts.values().sum(dtype=np.int64))
            assert self._index.n == (self._count + INDEX_EVERY - 1) // INDEX_EVERY
            firsts = self._put_firsts.values()
            assert np.all(np.diff(firsts) > 0) and np.all(np.diff(self._put_offsets.values()) > 0)
            assert not np.any(st[: self._low] == PENDING)


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


def _open_state(directory: str, count: int, fsync: bool) -> tuple[int, np.ndarray, np.ndarray]:
    """The state file's fd and the (status, attempts) columns of ``count`` messages."""
    path = os.path.join(directory, STATE_FILE)
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
        statuses[:whole] = recs["status"]
        attempts[:whole] = recs["attempts"]
        bad = np.flatnonzero(statuses > FAILED)
        if len(bad):
            logger.warning("outbox %s: %d records with an unknown status (first seq %d) read as pending",
                           path, len(bad), int(bad[0]))
            statuses[bad] = PENDING
    except BaseException:
        os.close(fd)
        raise
    return fd, statuses, attempts


__all__ = ["DELIVERED", "FAILED", "INDEX_EVERY", "Outbox", "PENDING", "STATE_DTYPE"]

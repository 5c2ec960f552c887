"""``SegmentedFileLog``: the durable event log as a directory of segment files.

Layout: ``<directory>/<first_offset:020d>.log`` files, each a segment header
plus framed records (see :mod:`engine.log.framing`). Only the last segment
(the *active* one) is ever written; a new one is started before a commit
group when the active segment holds at least ``segment_bytes`` (so a segment
exceeds ``segment_bytes`` by at most one commit group).

Group commit: callers encode their batch in their own thread and queue it; a
single writer thread takes *every* queued batch, writes them with one
``pwrite`` and makes them durable with one ``fsync``, then wakes the callers.
While one fsync runs, new batches pile up and form the next group, so under
load the number of fsyncs is far below the number of batches.

Opening scans and verifies every segment (CRC + msgpack decode per record)
and builds a sparse index (every ``index_interval``-th record's byte
position) used by :meth:`SegmentedFileLog.read_from` to seek.

Torn tail vs corruption (the conservative rule):

* A bad frame (short header, short payload, bad length, CRC mismatch,
  undecodable payload) in the *last* segment is a torn write from a crash
  iff no valid frame (complete, CRC-correct, decodable) starts at any byte
  position after it. The file is truncated at the bad frame and a warning is
  logged (logger ``flowrank.log``) naming the file and byte offset.
* Any bad frame in a non-last segment, or one in the last segment that is
  followed by a valid frame, raises :class:`engine.core.errors.LogCorruption`
  naming the file and byte offset. Data is never skipped silently.
* Segments must chain: each segment's first offset equals the previous
  segment's first offset plus its record count, and matches its header.

Formats: each segment header carries the framing version and the
``record_format`` its records were written in (a number opaque here; the
default is this version's :data:`engine.core.formats.LOG_FORMAT`). A segment with
a newer framing version, or a newer ``record_format`` than the log was opened
with, raises :class:`engine.core.errors.UnsupportedFormat`. Records of one segment
are all in its header's format: a log opened with another ``record_format``
than its active segment's starts a new segment before its first write.

Disk faults: if a write or fsync fails, every batch of the group fails with
:class:`engine.core.errors.StorageUnavailable`, the active segment is truncated
back to its last durable size (retried before the next write if the
truncate itself fails), and the next group tries again, so the log recovers
on its own once the fault clears.

Appends at a position (``append_payloads(payloads, at=offset)``): a caller
that keeps more than one append in flight (the sequencer) names the offset
each batch must start at. A batch is written only at that offset: one that
arrives before the batch ahead of it (two threads, or a threaded Ray actor,
may start out of order) is held back until the log reaches its offset; one
whose offset has passed fails; and once a group fails, every batch held or
arriving for a later offset fails too (it was decided on top of records the
log does not have), until a commit succeeds again. So the log never keeps a
batch whose predecessor it lost. A batch held longer than
:data:`HOLD_TIMEOUT_S` fails.

Rewriting (erasure, :meth:`SegmentedFileLog.rewrite`): records before a
position are replaced in place, offsets unchanged. Each changed segment is
written whole to ``<segment>.rw`` beside it and fsync'd; the commit point is
``rewrite.manifest`` (temp + fsync + rename + directory fsync) naming each
temp, its segment and the new file's size, record count and CRC-32; then each
temp is renamed onto its segment and the manifest deleted. ``open`` finishes
the renames of a manifest it finds (roll forward, after checking each file
against the manifest) and deletes ``.rw`` files no manifest names (roll
back). Readers open a segment file under the same lock the swap renames
under, so the file they open always matches the sizes and index they use.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import re
import struct
import threading
import time
import zlib
from bisect import bisect_right
from collections.abc import Callable, Iterator, Sequence
from typing import NamedTuple

from engine.core.errors import LogCorruption, StorageUnavailable, UnsupportedFormat
from engine.core.formats import LOG_FORMAT
from engine.log.framing import (
    FRAME_HEADER,
    FRAME_HEADER_SIZE,
    SEGMENT_HEADER_SIZE,
    SEGMENT_VERSION,
    decode_segment_header,
    encode_batch,
    encode_payloads,
    encode_segment_header,
    find_valid_frame,
    pack_payload,
    parse_frames,
    unpack_payload,
)
from engine.log.port import FaultHook, RewriteStats

logger = logging.getLogger("flowrank.log")

SEGMENT_NAME = re.compile(r"^(\d{20})\.log$")
_READ_BLOCK = 1 << 20
#: A rewritten segment's temp file is ``<segment file name>`` + this.
REWRITE_SUFFIX = ".rw"
#: The commit point of a rewrite (see the module doc); its temp adds ``.tmp``.
REWRITE_MANIFEST = "rewrite.manifest"
_MANIFEST_FORMAT = 1
#: How long an append at a position waits for the appends ahead of it (module doc) before it fails.
HOLD_TIMEOUT_S = 30.0
#: The durable mark (``open(..., mark=True)``): where the writer publishes, after every commit, the log's
#: durable end and a generation that changes whenever segments are rewritten or deleted, for a
#: :class:`engine.log.follower.LogFollower` in another process on this node. Page cache only, never
#: fsync'd: a writer that opens the log writes it again before any follower starts.
MARK_NAME = "durable.mark"
MARK = struct.Struct("<qqq")  # durable end, generation, their check (durable ^ generation ^ MARK_CHECK)
MARK_CHECK = 0x46524D41524B  # "FRMARK"


def segment_file_name(first_offset: int) -> str:
    """``00000000000000000042.log`` for ``first_offset == 42``."""
    return f"{first_offset:020d}.log"


def fsync_directory(path: str) -> None:
    """fsync a directory so created/renamed/deleted entries are durable."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class _Segment:
    """One segment's durable state. ``records``/``size`` only grow after an
    fsync; index lists are append-only (readers bisect them under the lock)."""

    __slots__ = ("first_offset", "path", "records", "size", "index_k", "index_pos", "record_format")

    def __init__(self, first_offset: int, path: str, records: int, size: int,
                 index_k: list[int], index_pos: list[int], record_format: int = 0):
        self.first_offset = first_offset
        self.record_format = record_format
        self.path = path
        self.records = records
        self.size = size
        self.index_k = index_k  # record number within segment
        self.index_pos = index_pos  # byte position of that record


class _Request:
    __slots__ = ("blob", "starts", "count", "first", "error", "done", "at", "since")

    def __init__(self, blob: bytes, starts: list[int], at: int | None = None):
        self.blob = blob
        self.starts = starts
        self.count = len(starts)
        self.first = -1
        self.error: BaseException | None = None
        self.done = threading.Event()
        self.at = at  # the offset it must start at (None: wherever the log is)
        self.since = time.monotonic()  # queued at (a held request times out)


def select_group(pending: list, pos: int, broken: bool, now: float,
                 hold_s: float = HOLD_TIMEOUT_S) -> tuple[list, list, list]:
    """Split queued requests (arrival order) into ``(group, failed, held)`` for a
    log whose next offset is ``pos``: an unconditional request, or one at exactly
    the offset reached, joins the group (then any held one that now fits); one
    whose offset has passed fails; one ahead waits, unless the log is ``broken``
    (the last group failed, nothing committed since) or it waited ``hold_s``.
    Each failed request comes with its reason: ``(request, message)``. Pure."""
    group, failed, held = [], [], []
    for r in pending:
        if r.at is None or r.at == pos:
            group.append(r)
            pos += r.count
            while held:  # a request that arrived early fits now
                nxt = next((h for h in held if h.at == pos), None)
                if nxt is None:
                    break
                held.remove(nxt)
                group.append(nxt)
                pos += nxt.count
        elif r.at < pos:
            failed.append((r, f"append at offset {r.at}, but the log is at offset {pos}"))
        else:
            held.append(r)
    keep = []
    for h in held:
        if h.at < pos:
            failed.append((h, f"append at offset {h.at}, but the log is at offset {pos}"))
        elif broken:
            failed.append((h, f"append at offset {h.at}: the append before it failed (the log is at {pos})"))
        elif now - h.since >= hold_s:
            failed.append((h, f"append at offset {h.at}: the log stayed at offset {pos} for {hold_s:g} s"))
        else:
            keep.append(h)
    return group, failed, keep


class _Rewritten(NamedTuple):
    """A segment written again, not yet swapped in: its new in-memory
    segment, the temp file, the records changed and the file's CRC-32."""

    segment: _Segment
    temp: str
    changed: int
    crc32: int


class SegmentedFileLog:
    """File-backed :class:`engine.log.EventLog`. Create with :meth:`open`."""

    def __init__(self, directory: str, segments: list[_Segment], *, segment_bytes: int,
                 fsync: bool, fault_hook: FaultHook | None, index_interval: int, record_format: int = 0,
                 mark: bool = False):
        self._dir = directory
        self._record_format = record_format
        self._segments = segments
        self._firsts = [s.first_offset for s in segments]
        self._segment_bytes = segment_bytes
        self._fsync = fsync
        self._hook = fault_hook
        self._interval = index_interval
        last = segments[-1]
        # a non-empty active segment of another record format is closed before the first write
        self._roll_first = last.records > 0 and last.record_format != record_format
        self._durable = last.first_offset + last.records
        self._assigned = self._durable
        self._lock = threading.Lock()  # guards segments/_firsts/_durable/_assigned/_rewriting
        self._write_lock = threading.Lock()  # held by the writer for a commit group; rewrite rolls under it
        self._rewrite_lock = threading.Lock()  # one rewrite at a time
        self._rewriting: set[int] = set()  # first offsets of the segments a rewrite holds (retention spares them)
        self._cond = threading.Condition(threading.Lock())  # guards _pending/_closing
        self._pending: list[_Request] = []
        self._broken = False  # the last group failed and none committed since (appends at a position, module doc)
        self._closing = False
        self._closed = False
        self._dirty = False  # active segment may hold bytes past last.size
        self._fd = os.open(last.path, os.O_WRONLY)
        self._stats = {"groups": 0, "batches": 0, "records": 0, "fsyncs": 0,
                       "failed_groups": 0, "last_fsync_seconds": 0.0}
        # the durable mark (MARK_NAME): a new generation per open, and per rewrite or deletion after it
        self._mark_fd = os.open(os.path.join(directory, MARK_NAME), os.O_RDWR | os.O_CREAT, 0o644) if mark else None
        self._generation = time.time_ns()
        self._publish()
        self._writer = threading.Thread(target=self._run, name=f"flowrank-log-writer:{directory}",
                                        daemon=True)
        self._writer.start()

    # ------------------------------------------------------------------ open

    def _publish(self, new_generation: bool = False) -> None:
        """Write the durable mark (MARK_NAME) when this log keeps one: the
        durable end, and a new generation after segments were rewritten or
        deleted (a follower then scans them again)."""
        if self._mark_fd is None:
            return
        if new_generation:
            self._generation += 1
        durable, gen = self._durable, self._generation
        os.pwrite(self._mark_fd, MARK.pack(durable, gen, durable ^ gen ^ MARK_CHECK), 0)

    @classmethod
    def open(cls, directory: str, *, segment_bytes: int = 64 * 2**20, fsync: bool = True,
             fault_hook: FaultHook | None = None, index_interval: int = 1024,
             record_format: int = LOG_FORMAT, mark: bool = False) -> "SegmentedFileLog":
        """Open (creating if needed) the log in ``directory``.

        Verifies every record of every segment (``O(total bytes)``), repairs a
        torn tail of the last segment (truncate + warning) and raises
        :class:`LogCorruption` for anything else that does not verify.
        ``fsync=False`` skips fsyncs (benchmarks/tests only: not durable).
        ``fault_hook(op, path)`` is the fault-injection seam, called before
        ``"create"``, ``"write"``, ``"fsync"``, ``"truncate"``, ``"dirsync"``
        and the ``"rewrite.*"`` steps of :meth:`rewrite`.
        Leftovers of an interrupted :meth:`rewrite` are resolved first: a
        ``rewrite.manifest`` is rolled forward (``LogCorruption`` if a file
        does not match it), ``.rw`` files without one are deleted.
        ``record_format`` (default: this version's ``engine.core.formats.LOG_FORMAT``)
        is written into new segment headers; a segment whose header names a
        newer one raises :class:`UnsupportedFormat`. ``mark``: publish the
        durable end after every commit (:data:`MARK_NAME`) for a
        :class:`engine.log.follower.LogFollower` in another process.
        """
        if segment_bytes < 1 or index_interval < 1:
            raise ValueError("segment_bytes and index_interval must be >= 1")
        directory = os.path.abspath(directory)
        if not os.path.isdir(directory):
            os.makedirs(directory, exist_ok=True)
            fsync_directory(os.path.dirname(directory))
        _recover_rewrite(directory, fsync)
        names = sorted(
            (int(m.group(1)), os.path.join(directory, m.group(0)))
            for m in map(SEGMENT_NAME.match, os.listdir(directory)) if m
        )
        segments: list[_Segment] = []
        if not names:
            path = os.path.join(directory, segment_file_name(0))
            os.close(_create_segment_file(path, 0, fsync, None, record_format))
            fsync_directory(directory)
            names = [(0, path)]
        for i, (first, path) in enumerate(names):
            last = i == len(names) - 1
            if segments:
                prev = segments[-1]
                expected = prev.first_offset + prev.records
                if first != expected:
                    raise LogCorruption(
                        f"log segment {path} starts at offset {first} but the previous segment "
                        f"{prev.path} ends at offset {expected} (byte offset 0): records missing")
            seg = _scan_segment(path, first, last, index_interval, fsync, record_format)
            if seg.record_format > record_format:
                raise UnsupportedFormat(
                    f"log segment {path}: records in format {seg.record_format}, newer than format "
                    f"{record_format} that this FlowRank version reads; it was written by a newer FlowRank "
                    "(run that version or newer on this data directory), or the header is damaged")
            segments.append(seg)
        last_seg = segments[-1]
        if last_seg.records == 0 and last_seg.record_format != record_format:  # empty: rewrite its header
            os.close(_create_segment_file(last_seg.path, last_seg.first_offset, fsync, None, record_format))
            last_seg.record_format = record_format
        return cls(directory, segments, segment_bytes=segment_bytes, fsync=fsync,
                   fault_hook=fault_hook, index_interval=index_interval, record_format=record_format, mark=mark)

    # --------------------------------------------------------------- queries

    @property
    def directory(self) -> str:
        return self._dir

    def end_offset(self) -> int:
        """Next offset to be assigned. ``O(1)``."""
        with self._lock:
            return self._assigned

    def durable_offset(self) -> int:
        """First offset not yet durable. ``O(1)``."""
        with self._lock:
            return self._durable

    def start_offset(self) -> int:
        """Oldest retained offset. ``O(1)``."""
        with self._lock:
            return self._segments[0].first_offset

    def record_formats(self) -> list[tuple[int, int]]:
        """``(first_offset, record_format)`` per segment, oldest first."""
        with self._lock:
            return [(s.first_offset, s.record_format) for s in self._segments]

    def segments(self) -> list[tuple[int, str, int]]:
        """``(first_offset, path, durable bytes)`` per segment, oldest first."""
        with self._lock:
            return [(s.first_offset, s.path, s.size) for s in self._segments]

    def stats(self) -> dict:
        """Counters for metrics: groups, batches, records, fsyncs, failed
        groups and the duration of the last fsync in seconds."""
        with self._lock:
            return dict(self._stats)

    # ---------------------------------------------------------------- append

    def append_batch(self, records: Sequence[object]) -> list[int]:
        """See :meth:`engine.log.EventLog.append_batch`. Encoding is
        ``O(batch bytes)`` in the caller's thread; the wait is one group
        commit (one write + one fsync shared with concurrent callers)."""
        return self._append(records, encode_batch)

    def append_payloads(self, payloads: Sequence[bytes], at: int | None = None) -> list[int]:
        """See :meth:`engine.log.EventLog.append_payloads`: framing only, no packing;
        ``at``: the offset the batch must start at (module doc)."""
        return self._append(payloads, encode_payloads, at)

    def _append(self, items: Sequence, encode, at: int | None = None) -> list[int]:
        if self._closed or self._closing:
            raise ValueError("append to a closed log")
        if not items:
            return []
        blob, starts = encode(items)
        request = _Request(blob, starts, at)
        with self._cond:
            if self._closing:
                raise ValueError("append to a closed log")
            self._pending.append(request)
            self._cond.notify()
        request.done.wait()
        if request.error is not None:
            raise request.error
        return list(range(request.first, request.first + request.count))

    def _run(self) -> None:
        while True:
            with self._cond:
                while True:
                    if not self._pending and self._closing:
                        return
                    if self._pending:
                        # only this thread moves _durable and _broken: read without the lock
                        group, failed, held = select_group(self._pending, self._durable, self._broken,
                                                           time.monotonic())
                        if self._closing:  # nothing more will come: a held request never fits
                            failed += [(h, "append to a closing log") for h in held]
                            held = []
                        self._pending = held
                        if group or failed:
                            break
                        self._cond.wait(timeout=min(1.0, HOLD_TIMEOUT_S))  # only held requests: wait for theirs
                    else:
                        self._cond.wait()
            for request, why in failed:
                request.error = StorageUnavailable(f"event log: {why}")
                request.done.set()
            if not group:
                continue
            try:
                with self._write_lock:
                    self._commit(group)
            except BaseException as exc:  # never leave a caller waiting forever
                self._broken = True
                for request in group:
                    if not request.done.is_set():
                        request.error = StorageUnavailable(f"event log writer failed: {exc!r}")
                        request.done.set()
                if not isinstance(exc, Exception):
                    raise

    def _call_hook(self, op: str, path: str) -> None:
        if self._hook is not None:
            self._hook(op, path)

    def _commit(self, group: list[_Request]) -> None:
        stage = "prepare"
        seg = self._segments[-1]
        try:
            if self._dirty:
                stage = "truncate"
                self._truncate_active()
            if (seg.size >= self._segment_bytes or self._roll_first) and seg.records > 0:
                stage = "segment roll"
                seg = self._roll()
                self._roll_first = False
            data = b"".join(r.blob for r in group) if len(group) > 1 else group[0].blob
            count = sum(r.count for r in group)
            with self._lock:
                self._assigned = self._durable + count
            stage = "write"
            self._dirty = True
            self._call_hook("write", seg.path)
            _pwrite_all(self._fd, data, seg.size)
            if self._fsync:
                stage = "fsync"
                self._call_hook("fsync", seg.path)
                t0 = time.perf_counter()
                os.fsync(self._fd)
                fsync_seconds = time.perf_counter() - t0
            else:
                fsync_seconds = 0.0
            self._dirty = False
        except OSError as exc:
            with self._lock:
                self._assigned = self._durable
                self._stats["failed_groups"] += 1
            if self._dirty:
                try:
                    self._truncate_active()
                except OSError as texc:
                    logger.warning("could not truncate %s back to %d after a failed %s: %s",
                                   seg.path, seg.size, stage, texc)
            message = (f"event log {stage} failed on {seg.path}: "
                       f"{errno.errorcode.get(exc.errno, exc.errno) if exc.errno else ''} {exc}").strip()
            self._broken = True  # appends held for later offsets fail (module doc)
            for request in group:
                request.error = StorageUnavailable(message)
                request.done.set()
            return
        # success: publish offsets, sizes and index entries, then wake callers
        with self._lock:
            first = self._durable
            pos = seg.size
            k = seg.records
            interval = self._interval
            for request in group:
                request.first = first
                # index every interval-th record (record 0 is indexed at creation)
                m = max(interval, -(-k // interval) * interval)
                for m in range(m, k + request.count, interval):
                    seg.index_k.append(m)
                    seg.index_pos.append(pos + request.starts[m - k])
                first += request.count
                k += request.count
                pos += len(request.blob)
            seg.records = k
            seg.size = pos
            self._durable = first
            self._assigned = first
            self._broken = False
            self._publish()
            st = self._stats
            st["groups"] += 1
            st["batches"] += len(group)
            st["records"] += count
            if self._fsync:
                st["fsyncs"] += 1
                st["last_fsync_seconds"] = fsync_seconds
        for request in group:
            request.done.set()

    def _truncate_active(self) -> None:
        seg = self._segments[-1]
        self._call_hook("truncate", seg.path)
        os.ftruncate(self._fd, seg.size)
        if self._fsync:
            os.fsync(self._fd)
        self._dirty = False

    def _roll(self) -> _Segment:
        with self._lock:
            first = self._durable
        path = os.path.join(self._dir, segment_file_name(first))
        self._call_hook("create", path)
        fd = _create_segment_file(path, first, self._fsync, self._hook, self._record_format)
        try:
            if self._fsync:
                self._call_hook("dirsync", self._dir)
                fsync_directory(self._dir)
        except OSError:
            os.close(fd)
            _unlink_quietly(path)
            raise
        seg = _Segment(first, path, 0, SEGMENT_HEADER_SIZE, [0], [SEGMENT_HEADER_SIZE], self._record_format)
        old_fd, self._fd = self._fd, fd
        with self._lock:
            self._segments.append(seg)
            self._firsts.append(first)
        os.close(old_fd)
        return seg

    # ------------------------------------------------------------------ read

    def read_from(self, offset: int, chunk_records: int = 4096) -> Iterator[tuple[int, object]]:
        """See :meth:`engine.log.EventLog.read_from`. Seeking costs
        ``O(log segments + log index + index_interval)``; then ``O(bytes)``."""
        if offset < 0 or chunk_records < 1:
            raise ValueError("offset must be >= 0 and chunk_records >= 1")
        if offset < self.start_offset():
            raise ValueError(f"offset {offset} precedes the oldest retained offset {self.start_offset()}")
        return self._reader(offset, chunk_records)

    def _reader(self, offset: int, chunk_records: int) -> Iterator[tuple[int, object]]:
        cur = offset
        f = None
        fseg: _Segment | None = None
        buf = b""
        buf_base = 0  # file position of buf[0]
        pos = 0  # file position of record `cur` when fseg is set
        try:
            while True:
                with self._lock:
                    if cur >= self._durable:
                        return
                    i = bisect_right(self._firsts, cur) - 1
                    if i < 0:
                        raise ValueError(f"offset {cur} precedes the oldest retained offset "
                                         f"{self._firsts[0]}")
                    seg = self._segments[i]
                    seg_end_offset = seg.first_offset + seg.records
                    seg_end_pos = seg.size
                    if seg is not fseg:
                        j = bisect_right(seg.index_k, cur - seg.first_offset) - 1
                        seek_k, seek_pos = seg.index_k[j], seg.index_pos[j]
                        # opened under the lock: a rewrite swaps files under it, so this file is `seg`'s
                        try:
                            opened = open(seg.path, "rb")
                        except FileNotFoundError:
                            raise ValueError(f"offset {cur} was deleted by retention") from None
                if seg is not fseg:
                    if f is not None:
                        f.close()
                    f = opened
                    fseg = seg
                    buf, buf_base = b"", seek_pos
                    pos = seek_pos
                    skip = cur - seg.first_offset - seek_k
                    if skip:
                        _, buf, buf_base, pos = _read_frames(f, seg.path, buf, buf_base, pos,
                                                             seg_end_pos, skip, keep=False)
                n = min(chunk_records, seg_end_offset - cur)
                if n <= 0:
                    continue  # a newer segment holds `cur`; loop re-resolves it
                values, buf, buf_base, pos = _read_frames(f, seg.path, buf, buf_base, pos,
                                                          seg_end_pos, n, keep=True)
                base = cur
                cur += len(values)
                yield from zip(range(base, cur), values)
        finally:
            if f is not None:
                f.close()

    def read_where(self, offset: int, head: bytes) -> list[tuple[int, object]]:
        """See :meth:`engine.log.EventLog.read_where`. Reads each segment from
        ``offset`` (seeking by the sparse index) to its durable end in blocks
        of ``_SCAN_BLOCK`` bytes; a frame is decoded (and its CRC checked) only
        when its payload starts with ``head``."""
        if offset < 0:
            raise ValueError("offset must be >= 0")
        with self._lock:
            if offset < self._segments[0].first_offset:
                raise ValueError(f"offset {offset} precedes the oldest retained offset "
                                 f"{self._segments[0].first_offset}")
            firsts = [s.first_offset for s in self._segments if s.first_offset + s.records > offset]
        out: list[tuple[int, object]] = []
        for first in firsts:
            k = max(0, offset - first)
            with self._lock:  # the file is opened with the metadata it matches (a rewrite swaps both under it)
                i = bisect_right(self._firsts, first) - 1
                seg = self._segments[i] if i >= 0 else None
                if seg is None or seg.first_offset != first:
                    raise ValueError(f"offset {max(offset, first)} was deleted by retention")
                path, records, size = seg.path, seg.records, seg.size
                j = bisect_right(seg.index_k, k) - 1
                n, pos = seg.index_k[j], seg.index_pos[j]
                try:
                    f = open(path, "rb")
                except FileNotFoundError:
                    raise ValueError(f"offset {max(offset, first)} was deleted by retention") from None
            with f:
                out.extend(_scan_where(f, path, first, n, pos, k, records, size, head))
        return out

    # --------------------------------------------------------------- rewrite

    def rewrite(self, before: int, fn: Callable[[int, object], object]) -> RewriteStats:
        """See :meth:`engine.log.EventLog.rewrite`.

        Steps (module doc): roll the active segment if it holds a record
        ``< before`` (the writer waits for that roll only), then per segment
        holding such records read and decode it, call ``fn``, and, if a
        record's bytes changed, write the whole segment to ``<segment>.rw``
        (same header, unchanged records byte for byte, changed ones packed
        and framed as :meth:`append_payloads` frames them) and fsync it. Then
        the manifest (commit point), the renames with the in-memory segments
        swapped under the lock readers open files under, the manifest's
        deletion. A failure before the commit point deletes the temps and
        changes nothing; after it, the manifest stays and the next
        :meth:`rewrite` (or :meth:`open`) finishes the renames.

        A returned record that is a new object but packs to the same bytes
        counts as unchanged. Appends continue throughout; retention spares
        the segments being rewritten. Memory: one segment's bytes and
        records at a time. ``O(bytes of the segments below before)``.
        """
        if self._closed or self._closing:
            raise ValueError("rewrite of a closed log")
        with self._rewrite_lock:
            self._finish_rewrite()
            limit = self._close_active_below(before)
            with self._lock:
                segs = [s for s in self._segments[:-1] if s.first_offset < limit and s.records > 0]
                held = {s.first_offset for s in segs}
                self._rewriting |= held
            try:
                return self._rewrite_segments(segs, limit, fn)
            finally:
                with self._lock:
                    self._rewriting -= held

    def _close_active_below(self, before: int) -> int:
        """Roll the active segment if it holds a durable record ``< before``;
        returns the end of the rewrite range (``before``, at most the durable
        offset). Holds the writer's lock for the roll only."""
        with self._write_lock:
            with self._lock:
                limit = max(0, min(before, self._durable))
                active = self._segments[-1]
            if active.records > 0 and active.first_offset < limit:
                try:
                    if self._dirty:
                        self._truncate_active()
                    self._roll()
                    self._roll_first = False
                except OSError as exc:
                    raise StorageUnavailable(f"event log segment roll before a rewrite failed on "
                                             f"{active.path}: {exc}") from exc
        return limit

    def _rewrite_segments(self, segs: list[_Segment], limit: int,
                          fn: Callable[[int, object], object]) -> RewriteStats:
        written: list[_Rewritten] = []
        try:
            for seg in segs:
                got = self._rewrite_segment(seg, limit, fn)
                if got is not None:
                    written.append(got)
            if written:
                self._commit_manifest(written)
        except BaseException as exc:
            for w in written:
                _unlink_quietly(w.temp)
            if isinstance(exc, OSError):
                raise StorageUnavailable(f"event log rewrite failed: {exc}") from exc
            raise
        if not written:
            return RewriteStats(0, 0, 0)
        try:
            self._swap(written)
        except OSError as exc:
            raise StorageUnavailable(f"event log rewrite failed after its commit point (the next rewrite "
                                     f"or open finishes it): {exc}") from exc
        return RewriteStats(len(written), sum(w.changed for w in written), sum(w.segment.size for w in written))

    def _rewrite_segment(self, seg: _Segment, limit: int,
                         fn: Callable[[int, object], object]) -> "_Rewritten | None":
        """One segment through ``fn``; its temp file written and fsync'd if
        a record changed, else None."""
        with open(seg.path, "rb") as f:  # not active: its file no longer changes (rewrites run one at a time)
            data = f.read(seg.size)
        result = parse_frames(data, SEGMENT_HEADER_SIZE, len(data), seg.records, keep=True)
        if len(result.starts) != seg.records:
            raise LogCorruption(f"log segment {seg.path}: {result.problem or 'file shorter than its durable size'} "
                                f"at byte offset {result.end}")
        view = memoryview(data)
        unpack_header = FRAME_HEADER.unpack_from
        payloads: list = []
        changed = 0
        first = seg.first_offset
        calls = min(seg.records, limit - first)
        for k, (start, value) in enumerate(zip(result.starts, result.values)):
            length = unpack_header(data, start)[0]
            payload = view[start + FRAME_HEADER_SIZE:start + FRAME_HEADER_SIZE + length]
            if k < calls:
                new = fn(first + k, value)
                if new is not value:
                    packed = pack_payload(new)
                    if packed != payload:
                        payload = packed
                        changed += 1
            payloads.append(payload)
        if not changed:
            return None
        blob, starts = encode_payloads(payloads)
        header = encode_segment_header(first, seg.record_format)
        temp = seg.path + REWRITE_SUFFIX
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            self._call_hook("rewrite.write", temp)
            _pwrite_all(fd, header, 0)
            _paced_write(fd, blob, SEGMENT_HEADER_SIZE, self._fsync)
            if self._fsync:
                self._call_hook("rewrite.fsync", temp)
                os.fsync(fd)
        except BaseException:
            os.close(fd)
            _unlink_quietly(temp)
            raise
        os.close(fd)
        interval = self._interval
        index_k = list(range(0, len(starts), interval)) or [0]
        index_pos = [SEGMENT_HEADER_SIZE + starts[k] for k in index_k] if starts else [SEGMENT_HEADER_SIZE]
        new_seg = _Segment(first, seg.path, seg.records, SEGMENT_HEADER_SIZE + len(blob), index_k, index_pos,
                           seg.record_format)
        return _Rewritten(new_seg, temp, changed, zlib.crc32(blob, zlib.crc32(header)))

    def _commit_manifest(self, written: list["_Rewritten"]) -> None:
        """Write the manifest: temp, fsync, directory fsync (the ``.rw`` files'
        entries too), rename (the commit point), directory fsync."""
        manifest = os.path.join(self._dir, REWRITE_MANIFEST)
        temp = manifest + ".tmp"
        body = json.dumps({"format": _MANIFEST_FORMAT, "segments": [
            {"temp": os.path.basename(w.temp), "segment": os.path.basename(w.segment.path),
             "bytes": w.segment.size, "records": w.segment.records, "crc32": w.crc32} for w in written]},
            separators=(",", ":")).encode()
        try:
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                self._call_hook("rewrite.manifest.write", temp)
                _pwrite_all(fd, body, 0)
                if self._fsync:
                    self._call_hook("rewrite.manifest.fsync", temp)
                    os.fsync(fd)
            finally:
                os.close(fd)
            if self._fsync:
                self._call_hook("rewrite.dirsync", self._dir)
                fsync_directory(self._dir)
            self._call_hook("rewrite.manifest.rename", manifest)
            os.replace(temp, manifest)
        except BaseException:
            _unlink_quietly(temp)
            raise

    def _swap(self, written: list["_Rewritten"]) -> None:
        """After the commit point: rename every temp onto its segment, swapping
        the in-memory segment with it, all under the lock readers open files
        under; then make the renames durable and delete the manifest."""
        manifest = os.path.join(self._dir, REWRITE_MANIFEST)
        if self._fsync:
            self._call_hook("rewrite.dirsync", self._dir)
            fsync_directory(self._dir)  # the manifest is durable before any segment changes
        with self._lock:
            for w in written:
                self._call_hook("rewrite.rename", w.segment.path)
                os.replace(w.temp, w.segment.path)
                i = bisect_right(self._firsts, w.segment.first_offset) - 1
                self._segments[i] = w.segment
            self._publish(new_generation=True)
        self._delete_manifest(manifest)

    def _delete_manifest(self, manifest: str) -> None:
        if self._fsync:
            self._call_hook("rewrite.dirsync", self._dir)
            fsync_directory(self._dir)
        self._call_hook("rewrite.manifest.delete", manifest)
        os.unlink(manifest)
        if self._fsync:
            self._call_hook("rewrite.dirsync", self._dir)
            fsync_directory(self._dir)

    def _finish_rewrite(self) -> None:
        """Finish a rewrite of this process that failed after its commit point
        (its manifest is still there): the remaining renames, each segment
        verified again and swapped under the lock; then the manifest goes.
        Without a manifest, deletes leftover temps. Called under the rewrite lock."""
        manifest = os.path.join(self._dir, REWRITE_MANIFEST)
        try:
            if not os.path.exists(manifest):
                _delete_rewrite_temps(self._dir)
                return
            entries = _read_manifest(manifest)
            for entry in entries:
                temp = os.path.join(self._dir, entry["temp"])
                path = os.path.join(self._dir, entry["segment"])
                with self._lock:
                    i = bisect_right(self._firsts, _first_of(path)) - 1
                    seg = self._segments[i] if i >= 0 else None
                    if seg is None or seg.path != path:  # deleted by retention meanwhile
                        _unlink_quietly(temp)
                        continue
                    if os.path.exists(temp):
                        _check_rewritten(temp, entry)
                        self._call_hook("rewrite.rename", path)
                        os.replace(temp, path)
                    else:
                        _check_rewritten(path, entry)
                    new = _scan_segment(path, seg.first_offset, False, self._interval, self._fsync, seg.record_format)
                    if new.records != seg.records:
                        raise LogCorruption(f"log segment {path}: rewritten with {new.records} records, "
                                            f"{seg.records} before")
                    self._segments[i] = new
                    self._publish(new_generation=True)
            self._delete_manifest(manifest)
            _delete_rewrite_temps(self._dir)
        except OSError as exc:
            raise StorageUnavailable(f"event log rewrite could not finish the previous one: {exc}") from exc

    # --------------------------------------------------------------- retention

    def delete_segments_before(self, offset: int) -> list[str]:
        """Delete the oldest segments whose records are all ``< offset``;
        never the active one, nor one a :meth:`rewrite` in progress holds (nor
        any after it). ``O(segments deleted)`` + one directory fsync."""
        deleted: list[str] = []
        with self._lock:
            while len(self._segments) > 1:
                seg = self._segments[0]
                if seg.first_offset + seg.records > offset or seg.first_offset in self._rewriting:
                    break  # a segment a rewrite holds stays, and so do the newer ones
                os.unlink(seg.path)
                self._segments.pop(0)
                self._firsts.pop(0)
                deleted.append(seg.path)
            if deleted:
                self._publish(new_generation=True)
        if deleted:
            fsync_directory(self._dir)
        return deleted

    # ----------------------------------------------------------------- close

    def close(self) -> None:
        """Finish queued appends, stop the writer, close the file. Idempotent."""
        if self._closed:
            return
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        self._writer.join()
        self._closed = True
        for fd in (self._fd, self._mark_fd):
            try:
                if fd is not None:
                    os.close(fd)
            except OSError:
                pass

    def __enter__(self) -> "SegmentedFileLog":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# ---------------------------------------------------------------- helpers


def _pwrite_all(fd: int, data: bytes, pos: int) -> None:
    view = memoryview(data)
    while view:
        n = os.pwrite(fd, view, pos)
        if n <= 0:
            raise OSError(errno.EIO, "short write")
        view = view[n:]
        pos += n


#: A rewrite writes its temp files this many bytes at a time, each made durable before the next
#: (fdatasync), at most REWRITE_BYTES_PER_S: the log's own commits never queue behind a whole rewritten
#: segment in the device's write cache, so appends keep their fsync latency while an erasure rewrites.
REWRITE_CHUNK = 4 << 20
REWRITE_BYTES_PER_S = 96 << 20


def _paced_write(fd: int, data: bytes, pos: int, sync: bool) -> None:
    view = memoryview(data)
    for at in range(0, len(view), REWRITE_CHUNK):
        started = time.monotonic()
        chunk = view[at:at + REWRITE_CHUNK]
        _pwrite_all(fd, chunk, pos + at)
        if sync:
            os.fdatasync(fd)
        spare = len(chunk) / REWRITE_BYTES_PER_S - (time.monotonic() - started)
        if spare > 0:
            time.sleep(spare)


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def _create_segment_file(path: str, first_offset: int, fsync: bool, hook: FaultHook | None,
                         record_format: int = 0) -> int:
    """Create (or reset a leftover of a failed roll) a segment with its header,
    fsync'd. Returns a write fd. The caller fsyncs the directory."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        if hook is not None:
            hook("write", path)
        _pwrite_all(fd, encode_segment_header(first_offset, record_format), 0)
        if fsync:
            if hook is not None:
                hook("fsync", path)
            os.fsync(fd)
    except OSError:
        os.close(fd)
        _unlink_quietly(path)
        raise
    return fd


def _read_frames(f, path: str, buf: bytes, buf_base: int, pos: int, limit_pos: int, n: int,
                 *, keep: bool):
    """Parse ``n`` frames starting at file position ``pos`` (all of them lie
    before ``limit_pos``, the segment's durable size), refilling ``buf`` (the
    bytes from file position ``buf_base``) as needed.
    Returns ``(values, buf, buf_base, pos)``."""
    values: list = []
    while n > 0:
        rel = pos - buf_base
        result = parse_frames(buf, rel, len(buf), n, keep=keep)
        if keep:
            values.extend(result.values)
        got = len(result.starts)
        n -= got
        pos = buf_base + result.end
        if n == 0:
            break
        if result.problem is not None and not result.incomplete:
            raise LogCorruption(f"log segment {path}: {result.problem} at byte offset {pos}")
        # need more bytes: keep the unparsed remainder, read at least one block
        if pos >= limit_pos:
            raise LogCorruption(f"log segment {path}: durable data ends inside a record at byte offset {pos}")
        remainder = buf[result.end:]
        need = _READ_BLOCK
        if len(remainder) >= 8:
            need = max(need, int.from_bytes(remainder[:4], "little") + 8)
        f.seek(buf_base + len(buf))
        more = f.read(min(need, limit_pos - (buf_base + len(buf))))
        if not more:
            raise LogCorruption(f"log segment {path}: file shorter than its durable size at byte offset {pos}")
        buf = remainder + more
        buf_base = pos
    return values, buf, buf_base, pos


_SCAN_BLOCK = 8 << 20


def _scan_where(f, path: str, first: int, n: int, pos: int, k: int, records: int, size: int,
                head: bytes) -> list[tuple[int, object]]:
    """Records ``k ..`` of one segment whose payload starts with ``head``,
    starting the walk at record ``n`` (file position ``pos``); ``size`` is the
    segment's durable size. One sequential pass; other frames are not decoded."""
    out: list[tuple[int, object]] = []
    f.seek(pos)
    buf, base = f.read(min(_SCAN_BLOCK, size - pos)), pos
    want = FRAME_HEADER_SIZE + len(head)
    unpack_header = FRAME_HEADER.unpack_from
    while n < records:
        rel = pos - base
        if rel + want > len(buf):  # refill from here (a frame's head is never cut)
            f.seek(pos)
            buf, base, rel = f.read(min(max(_SCAN_BLOCK, want), size - pos)), pos, 0
            if len(buf) < FRAME_HEADER_SIZE:
                raise LogCorruption(f"log segment {path}: file shorter than its durable size at byte offset {pos}")
        length, crc = unpack_header(buf, rel)
        if n >= k and buf.startswith(head, rel + FRAME_HEADER_SIZE):
            end = rel + FRAME_HEADER_SIZE + length
            if end > len(buf):
                f.seek(pos)
                buf, base, rel = f.read(min(max(_SCAN_BLOCK, FRAME_HEADER_SIZE + length), size - pos)), pos, 0
                end = FRAME_HEADER_SIZE + length
            payload = memoryview(buf)[rel + FRAME_HEADER_SIZE:end]
            if len(payload) != length or zlib.crc32(payload) != crc:
                raise LogCorruption(f"log segment {path}: bad record at byte offset {pos}")
            out.append((first + n, unpack_payload(payload)))
        pos += FRAME_HEADER_SIZE + length
        n += 1
    return out


def _scan_segment(path: str, first: int, last: bool, interval: int, fsync: bool,
                  record_format: int = 0) -> _Segment:
    """Verify one segment file and build its sparse index (see module doc).
    ``record_format``: what a torn (empty) last segment's header is rewritten with."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < SEGMENT_HEADER_SIZE:
        expected = encode_segment_header(first, record_format)
        if last and expected.startswith(data):
            # crash while creating the segment: rewrite its header
            logger.warning("log segment %s: torn segment header (%d bytes) at byte offset 0; rewriting it",
                           path, len(data))
            with open(path, "r+b") as f:
                f.truncate(0)
                f.write(expected)
                f.flush()
                if fsync:
                    os.fsync(f.fileno())
            return _Segment(first, path, 0, SEGMENT_HEADER_SIZE, [0], [SEGMENT_HEADER_SIZE], record_format)
        raise LogCorruption(f"log segment {path}: short segment header at byte offset 0")
    header = decode_segment_header(data)
    if header is None:
        raise LogCorruption(f"log segment {path}: bad segment magic at byte offset 0")
    if header.version > SEGMENT_VERSION:
        raise UnsupportedFormat(f"log segment {path}: segment framing version {header.version}, newer than "
                                f"version {SEGMENT_VERSION} that this FlowRank version reads; it was written by "
                                "a newer FlowRank (run that version or newer on this data directory), or the header is damaged")
    if header.version != SEGMENT_VERSION:
        raise LogCorruption(f"log segment {path}: bad segment version {header.version} at byte offset 0")
    header_first = header.first_offset
    if header_first != first:
        raise LogCorruption(f"log segment {path}: header says first offset {header_first}, "
                            f"file name says {first} (byte offset 0)")
    result = parse_frames(data, SEGMENT_HEADER_SIZE, len(data), len(data), keep=False)
    end = result.end
    if result.problem is not None:
        if not last:
            raise LogCorruption(f"log segment {path}: {result.problem} at byte offset {end} "
                                f"(not the last segment)")
        follower = find_valid_frame(data, end + 1, len(data))
        if follower is not None:
            raise LogCorruption(f"log segment {path}: {result.problem} at byte offset {end} "
                                f"followed by a valid record at byte offset {follower}")
        logger.warning("log segment %s: torn tail (%s) at byte offset %d; truncating %d bytes",
                       path, result.problem, end, len(data) - end)
        with open(path, "r+b") as f:
            f.truncate(end)
            if fsync:
                os.fsync(f.fileno())
    starts = result.starts
    index_k = list(range(0, len(starts), interval)) or [0]
    index_pos = [starts[k] for k in index_k] if starts else [SEGMENT_HEADER_SIZE]
    return _Segment(first, path, len(starts), end, index_k, index_pos, header.record_format)


# ------------------------------------------------------- rewrite recovery


def _first_of(path: str) -> int:
    m = SEGMENT_NAME.match(os.path.basename(path))
    if m is None:
        raise LogCorruption(f"rewrite manifest names {path!r}, not a log segment (byte offset 0)")
    return int(m.group(1))


def _read_manifest(path: str) -> list[dict]:
    """The entries of a rewrite manifest; ``LogCorruption`` if it does not
    parse (it is written whole before its rename, so it never should)."""
    try:
        with open(path, "rb") as f:
            doc = json.loads(f.read())
        if doc["format"] != _MANIFEST_FORMAT:
            raise UnsupportedFormat(f"rewrite manifest {path}: format {doc['format']}, this FlowRank version "
                                    f"reads format {_MANIFEST_FORMAT}")
        entries = doc["segments"]
        for e in entries:
            _first_of(e["segment"])
            if e["temp"] != e["segment"] + REWRITE_SUFFIX:
                raise ValueError(f"temp {e['temp']!r} is not its segment's")
            int(e["bytes"]), int(e["records"]), int(e["crc32"])
    except (ValueError, KeyError, TypeError) as exc:
        raise LogCorruption(f"rewrite manifest {path}: unreadable ({exc}) at byte offset 0") from exc
    return entries


def _check_rewritten(path: str, entry: dict) -> None:
    """``path`` is the file a manifest entry describes (size and CRC-32 of
    the whole file), else ``LogCorruption``: never put an unknown file in
    place of a segment."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) != entry["bytes"] or zlib.crc32(data) != entry["crc32"]:
        raise LogCorruption(f"log segment rewrite {path}: {len(data)} bytes with CRC-32 {zlib.crc32(data)}, "
                            f"the rewrite manifest says {entry['bytes']} bytes with CRC-32 {entry['crc32']} "
                            f"(byte offset 0)")


def _delete_rewrite_temps(directory: str) -> list[str]:
    """Delete ``.rw`` files and a manifest temp (a rewrite that never reached
    its commit point); returns the deleted names."""
    gone = []
    for name in os.listdir(directory):
        if name.endswith(".log" + REWRITE_SUFFIX) or name == REWRITE_MANIFEST + ".tmp":
            os.unlink(os.path.join(directory, name))
            gone.append(name)
    return gone


def _recover_rewrite(directory: str, fsync: bool) -> None:
    """At open: roll forward a committed rewrite (its manifest is there),
    roll back an uncommitted one (delete its temps). See the module doc."""
    manifest = os.path.join(directory, REWRITE_MANIFEST)
    rolled = os.path.exists(manifest)
    if rolled:
        entries = _read_manifest(manifest)
        renamed = 0
        for entry in entries:
            temp = os.path.join(directory, entry["temp"])
            path = os.path.join(directory, entry["segment"])
            if not os.path.exists(path):  # retention deleted it since
                _unlink_quietly(temp)
            elif os.path.exists(temp):
                _check_rewritten(temp, entry)
                os.replace(temp, path)
                renamed += 1
            else:
                _check_rewritten(path, entry)  # renamed before the crash: it must be the new file
        if fsync:
            fsync_directory(directory)
        os.unlink(manifest)
        logger.warning("log %s: finished an interrupted rewrite of %d segments (%d renames were left)",
                       directory, len(entries), renamed)
    gone = _delete_rewrite_temps(directory)
    if gone:
        logger.warning("log %s: deleted %s of a rewrite that had not committed", directory, ", ".join(sorted(gone)))
    if fsync and (rolled or gone):
        fsync_directory(directory)

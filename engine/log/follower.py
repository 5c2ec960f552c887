"""``LogFollower``: the event log read by a process that does not write it.

The engine appends to its log in its own process (issue 29 item 4: no Ray
call between a batch and its fsync); the log actor keeps serving what the
shard actors read while they recover (the records after their snapshot, the
dead letters) and the snapshots. It reads the segment files the engine
writes, on the same node, through a follower: a read-only
:class:`~engine.log.segment_log.SegmentedFileLog` that never truncates,
never writes, and serves only records the writer has made durable.

How it knows what is durable: the writer, opened with ``mark=True``, writes
the log's durable end and a *generation* into ``durable.mark``
(:data:`~engine.log.segment_log.MARK_NAME`) after every commit, in the page
cache (both processes see it at once; it is never needed after a crash: a
writer that opens the log writes it again before any follower starts). A
record past the mark may be in the file and not yet fsync'd, or be cut back
by a failed fsync and its offset reused, so the follower never serves it.

Before every read the follower looks at the mark: a bigger durable end is
parsed from where it stopped (the new frames of the active segment, then any
new segment); a new generation (the writer rewrote segments for an erasure,
or deleted them for retention) makes it scan every segment again. A read
already open on a segment the writer swaps keeps reading the file it opened,
as readers in the writer's own process do.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator

from engine.core.errors import LogCorruption, UnsupportedFormat
from engine.core.formats import LOG_FORMAT
from engine.log.framing import SEGMENT_HEADER_SIZE, SEGMENT_VERSION, decode_segment_header, parse_frames
from engine.log.segment_log import MARK, MARK_CHECK, MARK_NAME, SEGMENT_NAME, SegmentedFileLog, _Segment


class LogFollower(SegmentedFileLog):
    """A read-only view of the log in ``directory``, written by another
    process (:meth:`SegmentedFileLog.open` with ``mark=True``). Reads
    (``read_from``, ``read_where``, offsets) answer up to the writer's
    durable end at the time of the call; appends, rewrites and retention
    raise ``ValueError``: they are the writer's."""

    def __init__(self, directory: str, *, index_interval: int = 1024, record_format: int = LOG_FORMAT) -> None:
        # not SegmentedFileLog.__init__: no file opened for writing, no writer thread
        self._dir = os.path.abspath(directory)
        self._interval = index_interval
        self._record_format = record_format
        self._lock = threading.Lock()  # what the inherited read paths take (segments, _firsts, _durable)
        self._refresh_lock = threading.Lock()
        self._segments: list[_Segment] = []
        self._firsts: list[int] = []
        self._durable = self._assigned = 0
        self._generation: int | None = None
        self._rewriting: set[int] = set()
        self._closed = self._closing = False
        self._stats = {"scans": 0, "refreshes": 0}
        self.refresh()

    # ------------------------------------------------------------ following

    @property
    def generation(self) -> int | None:
        """The writer's generation this follower last scanned at (a new one: segments were rewritten or deleted)."""
        return self._generation

    def _read_mark(self) -> tuple[int, int]:
        path = os.path.join(self._dir, MARK_NAME)
        for _ in range(100):  # a read that overlapped the writer's 24-byte write: read again
            try:
                with open(path, "rb") as f:
                    raw = f.read(MARK.size)
            except FileNotFoundError:
                raise LogCorruption(f"log {self._dir}: no {MARK_NAME}: its writer did not open it with a mark "
                                    "(byte offset 0)") from None
            if len(raw) == MARK.size:
                durable, gen, check = MARK.unpack(raw)
                if durable ^ gen ^ MARK_CHECK == check:
                    return durable, gen
        raise LogCorruption(f"log {self._dir}: {MARK_NAME} does not verify (byte offset 0)")

    def refresh(self) -> None:
        """Catch up with the writer's durable mark (module doc). O(new bytes),
        or O(log bytes) after a rewrite or deletion."""
        with self._refresh_lock:
            durable, gen = self._read_mark()
            if gen != self._generation:
                segments = self._scan_all(durable)
                with self._lock:
                    self._segments = segments
                    self._firsts = [s.first_offset for s in segments]
                    last = segments[-1]
                    self._durable = self._assigned = last.first_offset + last.records
                    self._generation = gen
                self._stats["scans"] += 1
            elif durable > self._durable:
                self._extend(durable)
                self._stats["refreshes"] += 1

    def _names(self) -> list[tuple[int, str]]:
        return sorted((int(m.group(1)), os.path.join(self._dir, m.group(0)))
                      for m in map(SEGMENT_NAME.match, os.listdir(self._dir)) if m)

    def _scan_all(self, durable: int) -> list[_Segment]:
        segments: list[_Segment] = []
        for first, path in self._names():
            if first >= durable and segments:
                break  # a segment the writer has rolled to but not committed into yet
            if segments and first != segments[-1].first_offset + segments[-1].records:
                raise LogCorruption(f"log segment {path} starts at offset {first} but the previous segment ends "
                                    f"at offset {segments[-1].first_offset + segments[-1].records} (byte offset 0)")
            seg = self._new_segment(path, first)
            self._grow(seg, durable - first)
            segments.append(seg)
        if not segments:
            raise LogCorruption(f"log {self._dir}: no segment (byte offset 0)")
        return segments

    def _new_segment(self, path: str, first: int) -> _Segment:
        with open(path, "rb") as f:
            head = f.read(SEGMENT_HEADER_SIZE)
        header = decode_segment_header(head) if len(head) == SEGMENT_HEADER_SIZE else None
        if header is None or header.version != SEGMENT_VERSION or header.first_offset != first:
            if header is not None and header.version > SEGMENT_VERSION:
                raise UnsupportedFormat(f"log segment {path}: segment framing version {header.version} is newer "
                                        f"than version {SEGMENT_VERSION} that this FlowRank version reads")
            raise LogCorruption(f"log segment {path}: bad segment header (byte offset 0)")
        return _Segment(first, path, 0, SEGMENT_HEADER_SIZE, [0], [SEGMENT_HEADER_SIZE], header.record_format)

    def _grow(self, seg: _Segment, want: int) -> int:
        """Parse up to ``want`` more frames of ``seg`` from its known end,
        extending its count, size and sparse index; how many it found."""
        if want <= 0:
            return 0
        with open(seg.path, "rb") as f:
            f.seek(seg.size)
            data = f.read()
        # CRC-checked, not decoded: the writer decoded every record at its open or packed it itself
        got = parse_frames(data, 0, len(data), want, keep=False, decode=False)
        k0, n = seg.records, len(got.starts)
        interval = self._interval
        for m in range(max(interval, -(-k0 // interval) * interval), k0 + n, interval):
            seg.index_k.append(m)
            seg.index_pos.append(seg.size + got.starts[m - k0])
        seg.records = k0 + n
        seg.size += got.end
        return n

    def _extend(self, durable: int) -> None:
        with self._lock:
            segments = list(self._segments)
        last = segments[-1]
        grown = _Segment(last.first_offset, last.path, last.records, last.size, list(last.index_k),
                         list(last.index_pos), last.record_format)
        end = grown.first_offset + grown.records
        end += self._grow(grown, durable - end)
        added = []
        while end < durable:  # the rest is in segments the writer rolled to
            path = os.path.join(self._dir, f"{end:020d}.log")
            if not os.path.exists(path):
                raise LogCorruption(f"log {self._dir}: the writer's mark says offset {durable} is durable, but no "
                                    f"segment holds offset {end} (byte offset 0)")
            seg = self._new_segment(path, end)
            found = self._grow(seg, durable - end)
            if not found:
                raise LogCorruption(f"log segment {path}: no record where the writer's mark says offset {end} is "
                                    "(byte offset 0)")
            added.append(seg)
            end += found
        with self._lock:
            self._segments[-1] = grown
            self._segments.extend(added)
            self._firsts.extend(s.first_offset for s in added)
            self._durable = self._assigned = end

    # ---------------------------------------------------------------- reads

    def read_from(self, offset: int, chunk_records: int = 4096) -> Iterator[tuple[int, object]]:
        self.refresh()
        return super().read_from(offset, chunk_records)

    def read_where(self, offset: int, head: bytes) -> list[tuple[int, object]]:
        self.refresh()
        return super().read_where(offset, head)

    def end_offset(self) -> int:
        self.refresh()
        return super().end_offset()

    def durable_offset(self) -> int:
        self.refresh()
        return super().durable_offset()

    def start_offset(self) -> int:
        self.refresh()
        return super().start_offset()

    def segments(self) -> list[tuple[int, str, int]]:
        self.refresh()
        return super().segments()

    # ------------------------------------------------------- not a writer

    def _append(self, items, encode, at=None):
        raise ValueError(f"log {self._dir}: a follower does not append (its writer does)")

    def rewrite(self, before, fn):
        raise ValueError(f"log {self._dir}: a follower does not rewrite (its writer does)")

    def delete_segments_before(self, offset: int) -> list[str]:
        raise ValueError(f"log {self._dir}: a follower does not delete segments (its writer does)")

    def close(self) -> None:
        self._closed = True

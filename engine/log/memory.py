"""In-memory implementations of the storage ports, for fast unit tests.

Same contracts as the file implementations minus files: records and
payloads are stored msgpack-encoded (so values are copied, tuples read back
as lists and unencodable values fail at the call), offsets are dense,
segments are emulated with the same byte accounting and roll rule so
retention behaves alike, and the same ``fault_hook(op, path)`` seam makes
``"write"``/``"fsync"`` (or ``"rewrite.write"``, ``"snapshot.write"``) fail with
:class:`engine.core.errors.StorageUnavailable`. Nothing survives the process.
"""

from __future__ import annotations

import re
import threading
import time
from bisect import bisect_right
from collections.abc import Callable, Iterator, Sequence

from engine.core.errors import StorageUnavailable
from engine.log.framing import SEGMENT_HEADER_SIZE, encode_batch, encode_payloads, pack_payload, unpack_payload
from engine.log.port import FaultHook, RewriteStats
from engine.log.segment_log import HOLD_TIMEOUT_S

_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$")


def check_snapshot_name(name: str) -> str:
    """Return ``name`` if it is a safe file-name component (letters, digits,
    ``-``, ``_``; starts alphanumeric; at most 128 chars), else ValueError."""
    if not isinstance(name, str) or not _SAFE_NAME.match(name):
        raise ValueError(f"unsafe snapshot name {name!r}: use letters, digits, '-' and '_'")
    return name


class InMemoryLog:
    """:class:`engine.log.EventLog` held in a list. ``append_batch`` is
    ``O(batch bytes)``; ``read_from`` seeks in ``O(1)``."""

    def __init__(self, *, segment_bytes: int = 64 * 2**20, fault_hook: FaultHook | None = None):
        self._payloads: list[bytes] = []  # index = offset - self._start
        self._start = 0
        # emulated segments: [first_offset, bytes]
        self._segs: list[list[int]] = [[0, SEGMENT_HEADER_SIZE]]
        self._segment_bytes = segment_bytes
        self._hook = fault_hook
        self._lock = threading.Lock()
        self._moved = threading.Condition(self._lock)  # an append committed or failed (appends at a position)
        self._broken = False  # the last append failed and none committed since
        self._rewrite_lock = threading.Lock()
        self._closed = False

    @classmethod
    def open(cls, directory: str | None = None, **kwargs) -> "InMemoryLog":
        """Signature twin of :meth:`SegmentedFileLog.open`; ``directory`` and
        ``fsync`` are ignored."""
        kwargs.pop("fsync", None)
        kwargs.pop("index_interval", None)
        return cls(**kwargs)

    def append_batch(self, records: Sequence[object]) -> list[int]:
        return self._append(records, encode_batch)  # encoding validates encodability

    def append_payloads(self, payloads: Sequence[bytes], at: int | None = None) -> list[int]:
        """``at``: the offset the batch must start at, as
        :meth:`engine.log.SegmentedFileLog.append_payloads` (held back until the
        log reaches it; fails once it has passed, or once an append before it failed)."""
        return self._append(payloads, encode_payloads, at)

    def _append(self, items: Sequence, encode, at: int | None = None) -> list[int]:
        if self._closed:
            raise ValueError("append to a closed log")
        if not items:
            return []
        blob, starts = encode(items)
        ends = starts[1:] + [len(blob)]
        payloads = [blob[s + 8:e] for s, e in zip(starts, ends)]
        with self._lock:
            if at is not None:
                self._wait_turn(at)
            seg = self._segs[-1]
            path = f"memory:{seg[0]:020d}.log"
            if self._hook is not None:
                for op in ("write", "fsync"):
                    try:
                        self._hook(op, path)
                    except OSError as exc:
                        self._broken = True
                        self._moved.notify_all()
                        raise StorageUnavailable(f"event log {op} failed on {path}: {exc}") from exc
            self._broken = False
            self._moved.notify_all()
            first = self._start + len(self._payloads)
            if seg[1] >= self._segment_bytes and first > seg[0]:
                seg = [first, SEGMENT_HEADER_SIZE]
                self._segs.append(seg)
            seg[1] += len(blob)
            self._payloads.extend(payloads)
            return list(range(first, first + len(payloads)))

    def _wait_turn(self, at: int) -> None:
        """Under the lock: wait until the log reaches offset ``at``; StorageUnavailable
        if it has passed it, if an append before it fails, or after HOLD_TIMEOUT_S."""
        deadline = time.monotonic() + HOLD_TIMEOUT_S
        while True:
            pos = self._start + len(self._payloads)
            if at == pos:
                return
            if at < pos:
                raise StorageUnavailable(f"event log: append at offset {at}, but the log is at offset {pos}")
            if self._broken:
                raise StorageUnavailable(f"event log: append at offset {at}: the append before it failed "
                                         f"(the log is at {pos})")
            left = deadline - time.monotonic()
            if left <= 0:
                raise StorageUnavailable(f"event log: append at offset {at}: the log stayed at offset {pos} "
                                         f"for {HOLD_TIMEOUT_S:g} s")
            self._moved.wait(left)

    def end_offset(self) -> int:
        with self._lock:
            return self._start + len(self._payloads)

    durable_offset = end_offset

    def start_offset(self) -> int:
        with self._lock:
            return self._start

    def read_from(self, offset: int, chunk_records: int = 4096) -> Iterator[tuple[int, object]]:
        if offset < 0 or chunk_records < 1:
            raise ValueError("offset must be >= 0 and chunk_records >= 1")
        if offset < self.start_offset():
            raise ValueError(f"offset {offset} precedes the oldest retained offset {self._start}")
        return self._reader(offset, chunk_records)

    def _reader(self, cur: int, chunk_records: int) -> Iterator[tuple[int, object]]:
        while True:
            with self._lock:
                if cur < self._start:
                    raise ValueError(f"offset {cur} was deleted by retention")
                i = cur - self._start
                chunk = self._payloads[i:i + chunk_records]
            if not chunk:
                return
            for payload in chunk:
                yield cur, unpack_payload(payload)
                cur += 1

    def read_where(self, offset: int, head: bytes) -> list[tuple[int, object]]:
        if offset < 0:
            raise ValueError("offset must be >= 0")
        with self._lock:
            if offset < self._start:
                raise ValueError(f"offset {offset} precedes the oldest retained offset {self._start}")
            start, payloads = self._start, self._payloads[max(0, offset - self._start):]
        first = max(offset, start)
        return [(first + i, unpack_payload(p)) for i, p in enumerate(payloads) if p.startswith(head)]

    def segments(self) -> list[tuple[int, str, int]]:
        with self._lock:
            return [(first, f"memory:{first:020d}.log", size) for first, size in self._segs]

    def delete_segments_before(self, offset: int) -> list[str]:
        deleted = []
        with self._lock:
            while len(self._segs) > 1 and self._segs[1][0] <= offset:
                first, _ = self._segs.pop(0)
                nxt = self._segs[0][0]
                del self._payloads[: nxt - self._start]
                self._start = nxt
                deleted.append(f"memory:{first:020d}.log")
        return deleted

    def rewrite(self, before: int, fn: Callable[[int, object], object]) -> RewriteStats:
        """See :meth:`engine.log.EventLog.rewrite`. Rolls the emulated active
        segment like the file log, calls ``fn`` outside the lock (appends go
        on), then swaps the changed payloads in at once and adjusts the
        emulated segment sizes. ``"rewrite.write"`` is called per changed
        segment before anything changes; an ``OSError`` there fails the call
        with ``StorageUnavailable`` and nothing rewritten. ``O(records below
        before)``."""
        if self._closed:
            raise ValueError("rewrite of a closed log")
        with self._rewrite_lock:
            with self._lock:
                start = self._start
                end = start + len(self._payloads)
                limit = max(start, min(before, end))
                if self._segs[-1][0] < limit:  # the active segment holds a record < before: roll
                    self._segs.append([end, SEGMENT_HEADER_SIZE])
                old = self._payloads[: limit - start]
                firsts = [first for first, _size in self._segs]
            changes: dict[int, bytes] = {}
            for offset, payload in enumerate(old, start):
                record = unpack_payload(payload)
                new = fn(offset, record)
                if new is not record:
                    packed = pack_payload(new)
                    if packed != payload:
                        changes[offset] = packed
            touched = sorted({firsts[bisect_right(firsts, o) - 1] for o in changes})
            if self._hook is not None:
                for first in touched:
                    path = f"memory:{first:020d}.log"
                    try:
                        self._hook("rewrite.write", path)
                    except OSError as exc:
                        raise StorageUnavailable(f"event log rewrite failed on {path}: {exc}") from exc
            with self._lock:
                sizes = {seg[0]: seg for seg in self._segs}
                changed = 0
                for offset, packed in changes.items():
                    i = offset - self._start
                    if i < 0:
                        continue  # retention deleted it meanwhile
                    sizes[firsts[bisect_right(firsts, offset) - 1]][1] += len(packed) - len(self._payloads[i])
                    self._payloads[i] = packed
                    changed += 1
                kept = [sizes[first][1] for first in touched if first in sizes]
            return RewriteStats(len(kept), changed, sum(kept))

    def close(self) -> None:
        self._closed = True

    def __enter__(self) -> "InMemoryLog":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class InMemorySnapshotStore:
    """:class:`engine.log.SnapshotStore` in a dict; keeps ``keep`` per name."""

    def __init__(self, keep: int = 3, *, fault_hook: FaultHook | None = None):
        if keep < 1:
            raise ValueError("keep must be >= 1")
        self._keep = keep
        self._hook = fault_hook
        self._snaps: dict[str, dict[int, bytes]] = {}
        self._lock = threading.Lock()

    def save(self, name: str, offset: int, payload: object) -> str:
        check_snapshot_name(name)
        if not isinstance(offset, int) or offset < 0:
            raise ValueError(f"snapshot offset must be an int >= 0, got {offset!r}")
        data = pack_payload(payload)
        path = f"memory:{name}.{offset:020d}.snap"
        if self._hook is not None:
            try:
                self._hook("snapshot.write", path)
            except OSError as exc:
                raise StorageUnavailable(f"snapshot write failed on {path}: {exc}") from exc
        with self._lock:
            snaps = self._snaps.setdefault(name, {})
            snaps[offset] = data
            for old in sorted(snaps)[: -self._keep]:
                del snaps[old]
        return path

    def load_latest(self, name: str) -> tuple[int, object] | None:
        check_snapshot_name(name)
        with self._lock:
            snaps = self._snaps.get(name)
            if not snaps:
                return None
            offset = max(snaps)
            data = snaps[offset]
        return offset, unpack_payload(data)

    def delete_through(self, offset: int) -> list[str]:
        """Delete every snapshot at or before ``offset`` (as the file store)."""
        gone = []
        with self._lock:
            for name, snaps in self._snaps.items():
                for o in [o for o in snaps if o <= offset]:
                    del snaps[o]
                    gone.append(f"memory:{name}.{o:020d}.snap")
        return gone

    def list(self, name: str) -> list[tuple[int, str]]:
        check_snapshot_name(name)
        with self._lock:
            return [(o, f"memory:{name}.{o:020d}.snap") for o in sorted(self._snaps.get(name, {}))]

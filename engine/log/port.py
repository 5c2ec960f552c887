"""The two storage ports of FlowRank: the event log and the snapshot store.

The event log is the commit point: an event is acknowledged only once
:meth:`EventLog.append_batch` has returned, i.e. after the data was written
and fsync'd. Every in-memory structure is rebuilt from the newest good
snapshot (:class:`SnapshotStore`) plus the log tail after the snapshot's
offset. Both ports store *opaque* msgpack-serialisable values (None, bools,
ints, floats, str, bytes, lists, dicts); tuples read back as lists.

Implementations: :class:`engine.log.SegmentedFileLog` and
:class:`engine.log.InMemoryLog`; :class:`engine.log.FileSnapshotStore` and
:class:`engine.log.InMemorySnapshotStore`. The same contract tests
(``tests/log``) run against both implementations of each port.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import NamedTuple, Protocol, runtime_checkable

#: Test seam shared by the implementations: called as ``hook(op, path)``
#: right before each I/O step (``op`` is e.g. ``"write"``, ``"fsync"``,
#: ``"snapshot.rename"``). Raising ``OSError`` makes that step fail as if the
#: OS had failed it; blocking in the hook freezes the writer at that point.
FaultHook = Callable[[str, str], None]


class RewriteStats(NamedTuple):
    """What :meth:`EventLog.rewrite` did: the segments written again, the
    records ``fn`` changed, and the bytes of the new segment files."""

    segments_rewritten: int
    records_changed: int
    bytes_written: int


@runtime_checkable
class EventLog(Protocol):
    """An append-only, totally ordered, durable sequence of records.

    Offsets are dense record sequence numbers: the first record ever
    appended has offset 0, the next 1, and so on, with no gaps, across the
    whole log (retention may delete a prefix; offsets are never reused).
    """

    def append_batch(self, records: Sequence[object]) -> list[int]:
        """Append ``records`` in order; return their offsets (consecutive).

        Returns only after the whole batch is durable. Thread-safe;
        concurrent batches are committed together (group commit) and never
        interleave. All-or-nothing: on a storage fault raises
        :class:`engine.core.errors.StorageUnavailable` and none of the batch is
        kept; ``TypeError``/``ValueError`` if a record cannot be encoded
        (nothing is appended). An empty batch returns ``[]``.
        """
        ...

    def append_payloads(self, payloads: Sequence[bytes], at: int | None = None) -> list[int]:
        """:meth:`append_batch` of records already packed with
        :func:`engine.log.framing.pack_payload`: the bytes are framed and
        written as they are (the sequencer packs each record once).

        ``at`` (None: wherever the log is): the offset the batch must start
        at, for a caller with several appends in flight (the sequencer). A
        batch that arrives before the one ahead of it waits for it; it fails
        with StorageUnavailable if its offset has passed, if an append
        before it failed (nothing committed since), or after
        ``HOLD_TIMEOUT_S``. So a log never keeps a batch whose predecessor
        it lost."""
        ...

    def end_offset(self) -> int:
        """The next offset to be assigned (== :meth:`durable_offset` when no
        append is in flight). ``O(1)``."""
        ...

    def durable_offset(self) -> int:
        """First offset that is not yet durable; every smaller offset (from
        :meth:`start_offset`) can be read. ``O(1)``."""
        ...

    def start_offset(self) -> int:
        """Offset of the oldest retained record (0 until retention deletes)."""
        ...

    def read_from(self, offset: int, chunk_records: int = 4096) -> Iterator[tuple[int, object]]:
        """Yield ``(offset, record)`` for every durable record ``>= offset``,
        in order, reading ``chunk_records`` at a time.

        Safe while appends continue: the iterator stops once it reaches the
        durable end it observes; records that become durable before it gets
        there are included. Raises ``ValueError`` if ``offset`` precedes
        :meth:`start_offset`; yields nothing if ``offset >= durable_offset()``.
        """
        ...

    def read_where(self, offset: int, head: bytes) -> list[tuple[int, object]]:
        """``(offset, record)`` of every durable record ``>= offset`` whose
        encoded payload (msgpack bytes) begins with ``head``, in order.

        Only those records are decoded: the others are stepped over by their
        frame lengths, in one pass of sequential reads (``O(bytes)`` of I/O,
        ``O(records)`` of header parsing). Meant for rare records that must be
        known before a replay reaches the records they concern (dead letters).
        Raises ``ValueError`` if ``offset`` precedes :meth:`start_offset`.
        """
        ...

    def segments(self) -> list[tuple[int, str, int]]:
        """``(first_offset, path, bytes)`` of each retained segment, oldest first."""
        ...

    def delete_segments_before(self, offset: int) -> list[str]:
        """Delete whole segments whose every record is ``< offset``, oldest
        first, never the active (last) segment. Returns deleted paths."""
        ...

    def rewrite(self, before: int, fn: Callable[[int, object], object]) -> RewriteStats:
        """Replace records in place, keeping their offsets (erasure: ids become
        pseudonyms in the records before the erasure's log position).

        ``fn(offset, record)`` is called, in offset order, for every durable
        record with ``start_offset() <= offset < before`` (records not yet
        durable when the call starts count as ``>= before``) and returns the
        record to keep there; returning the very object it was given (``is``)
        means unchanged. Records at or after ``before`` are never touched.
        The new records must be in the record format of their segment.

        Atomic: a reader sees every affected segment old or every one new
        once the call returned, and a crash at any step leaves, after the
        next open, all old or all new segments (never a mix, never a
        half-written file). Appends go on meanwhile (the active segment is
        closed first when it holds a record ``< before``). Only segments
        where ``fn`` changed a record are written again. Raises what ``fn``
        raises, ``TypeError``/``ValueError`` for a record that cannot be
        encoded, :class:`engine.core.errors.StorageUnavailable` on I/O
        faults. Rewrites run one at a time. ``O(bytes of the range)``.
        """
        ...

    def close(self) -> None:
        """Finish in-flight appends, release files. Idempotent."""
        ...


@runtime_checkable
class SnapshotStore(Protocol):
    """Named, checksummed snapshots, each tagged with the log offset it reflects.

    A snapshot at ``offset`` means: the state after applying every record
    with offset ``< offset``; replay resumes at ``offset``.
    """

    def save(self, name: str, offset: int, payload: object) -> str:
        """Store ``payload`` atomically (a reader sees the old set of
        snapshots or the new one, never a half-written file); keep the newest
        ``keep`` snapshots of ``name`` and delete older ones. Returns the
        snapshot's path (or pseudo-path). ``ValueError`` for an unsafe
        ``name`` or a negative offset; ``TypeError`` for a payload msgpack
        cannot encode; :class:`engine.core.errors.StorageUnavailable` on I/O faults.
        """
        ...

    def load_latest(self, name: str) -> tuple[int, object] | None:
        """``(offset, payload)`` of the newest snapshot of ``name`` whose
        checksum verifies; bad ones are skipped with a logged warning; None
        when no good snapshot exists (replay the whole log)."""
        ...

    def delete_through(self, offset: int) -> list[str]:
        """Delete every snapshot of any name at or before ``offset`` (an erasure, docs/api.md §17)."""
        ...

    def list(self, name: str) -> list[tuple[int, str]]:
        """``(offset, path)`` of the stored snapshots of ``name``, oldest first
        (not verified)."""
        ...

"""Move a data directory's event log and snapshots into an empty PostgreSQL log
(``flowrank log import``, docs/operations.md "Running on PostgreSQL").

What is copied, from ``<data-dir>/log`` and ``<data-dir>/snapshots``:

* every retained segment, as a segment table of its own with the same first
  offset, the same record format and the same byte count (the file log's
  framing sizes): the records keep their offsets and their bytes (the
  payloads are copied as framed, never decoded and packed again);
* the start offset when retention trimmed a prefix, the end offset;
* every snapshot file whose checksum verifies (a damaged one is skipped with
  a warning, as ``load_latest`` would skip it), with its name and offset.

It all goes in **one transaction** on the target, so a failed or interrupted
import leaves the log as empty as it found it. Records go in with one binary
COPY per chunk (``chunk_records`` records or ``chunk_bytes`` bytes, whichever
comes first). Before COMMIT the counts are checked in the database: per
segment table its rows, first and last offset and payload bytes against the
source, and per snapshot name the rows. The epoch steps (in the head and the
lease rows), so a writer that had opened the empty log can never append over
the import, and the lease is left free, so the first node may start at once.

The target must be empty: no record, no retained offset, no snapshot, and no
live lease holder; anything else is :class:`ImportRefused`. The source is
opened as ``flowrank serve`` opens it (``SegmentedFileLog.open``: every record
verified, a torn tail cut), under the data directory's ``LOCK``, so no server
may be running on it.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
from psycopg import sql

from engine.core.errors import StorageUnavailable
from engine.core.formats import LOG_FORMAT
from engine.log.framing import FRAME_HEADER, FRAME_HEADER_SIZE, SEGMENT_HEADER_SIZE, parse_frames
from engine.log.pg_lease import DEFAULT_LEASE_S
from engine.log.pg_log import Names, PostgresLog, _create_segment_table, _one, connect, copy_rows, create_schema
from engine.log.segment_log import SegmentedFileLog
from engine.log.snapshots import SnapshotInvalid, decode_snapshot_body

logger = logging.getLogger("flowrank.log")

_SNAP_FILE = re.compile(r"^([A-Za-z0-9][A-Za-z0-9_-]*)\.(\d{20})\.snap$")


class ImportRefused(Exception):
    """The import cannot start: the target log is not empty, a node holds its lease, the data directory
    is in use or holds no log."""


@dataclass
class ImportReport:
    """What :func:`import_data_dir` copied."""

    records: int = 0
    start_offset: int = 0
    end_offset: int = 0
    segments: int = 0
    record_bytes: int = 0  # payload bytes
    snapshots: int = 0
    snapshot_bytes: int = 0
    skipped_snapshots: list[str] = field(default_factory=list)
    copies: int = 0  # COPY statements
    seconds: float = 0.0

    def line(self) -> str:
        rate = self.records / self.seconds if self.seconds > 0 else 0.0
        span = f"offsets {self.start_offset}..{self.end_offset - 1}" if self.records else "no records"
        skipped = f", {len(self.skipped_snapshots)} damaged snapshot(s) skipped" if self.skipped_snapshots else ""
        return (f"{self.records:,} records in {self.segments} segments ({span}, "
                f"{self.record_bytes / 2**20:.1f} MiB), {self.snapshots} snapshots "
                f"({self.snapshot_bytes / 2**20:.1f} MiB){skipped}, {self.copies} COPY in {self.seconds:.2f} s "
                f"({rate:,.0f} records/s)")


@dataclass(frozen=True)
class _SourceSegment:
    first: int
    path: str
    record_format: int
    size: int  # durable bytes (header + frames)
    records: int


def _lock_data_dir(root: Path) -> int:
    fd = os.open(root / "LOCK", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise ImportRefused(f"{root} is in use by another FlowRank process (its LOCK is held): stop it "
                            "before importing its log") from None
    return fd


def _payloads(data: bytes, seg: _SourceSegment):
    """The payloads of one segment file's bytes, as memoryviews, in order (each frame's CRC checked)."""
    result = parse_frames(data, SEGMENT_HEADER_SIZE, seg.size, seg.records, keep=False, decode=False)
    if len(result.starts) != seg.records:
        raise StorageUnavailable(f"log segment {seg.path}: {len(result.starts)} records read, "
                                 f"{seg.records} expected ({result.problem} at byte offset {result.end})")
    view = memoryview(data)
    unpack = FRAME_HEADER.unpack_from
    for pos in result.starts:
        length, _crc = unpack(data, pos)
        yield view[pos + FRAME_HEADER_SIZE:pos + FRAME_HEADER_SIZE + length]


def _check_empty(conn: psycopg.Connection, names: Names, url_shown: str) -> None:
    """Under the head row's lock: refuse a log that holds anything, or whose lease a node holds."""
    end, start = conn.execute(sql.SQL("SELECT end_offset, start_offset FROM {} FOR UPDATE")
                              .format(names.head)).fetchone() or (0, 0)
    (snaps,) = conn.execute(sql.SQL("SELECT count(*) FROM {}").format(names.snapshots)).fetchone() or (0,)
    (segs,) = conn.execute(sql.SQL("SELECT count(*) FROM {}").format(names.segments)).fetchone() or (0,)
    if end or start or snaps or segs > 1:
        raise ImportRefused(
            f"the PostgreSQL log {url_shown} (tables {names.prefix}_*) is not empty: {end - start} records "
            f"(offsets {start}..{end - 1}), {segs} segments, {snaps} snapshots; import only into an empty log "
            "(a new database, or another table prefix)")
    row = conn.execute(sql.SQL("SELECT holder, extract(epoch FROM now() - renewed_at)::float8 FROM {}")
                       .format(names.lease)).fetchone()
    if row is not None and row[0] is not None and row[1] is not None and row[1] < DEFAULT_LEASE_S:
        raise ImportRefused(f"node {row[0]!r} holds the lease of the PostgreSQL log {url_shown} (renewed "
                            f"{row[1]:.1f} s ago): stop it before importing")


def _shown(url: str) -> str:
    """``url`` without a password."""
    return re.sub(r"(://[^:/@]*):[^@/]*@", r"\1:***@", url)


def import_data_dir(data_dir: str | os.PathLike, url: str, *, prefix: str = "flowrank",
                    chunk_records: int = 20_000, chunk_bytes: int = 16 * 2**20,
                    snapshots: bool = True) -> ImportReport:
    """Copy ``data_dir``'s event log (and, with ``snapshots``, its snapshots) into the empty PostgreSQL log
    at ``url`` (tables ``<prefix>_*``, created if missing), in one transaction, checked before COMMIT.
    ``O(bytes)``; the records' bytes pass through this process once, a segment file at a time.
    Raises :class:`ImportRefused` (nothing done), ``UnsupportedFormat``/``LogCorruption`` for a source
    this FlowRank cannot read, ``StorageUnavailable`` for the database (the transaction rolled back)."""
    if chunk_records < 1 or chunk_bytes < 1:
        raise ValueError("chunk_records and chunk_bytes must be >= 1")
    began = time.monotonic()
    root = Path(data_dir)
    names = Names(prefix)
    shown = _shown(url)
    if not any((root / "log").glob("*.log")):
        raise ImportRefused(f"no event log under {root / 'log'}")
    lock_fd = _lock_data_dir(root)
    try:
        # opened as flowrank serve opens it: every record verified, a torn tail cut, a newer format refused
        with SegmentedFileLog.open(str(root / "log"), record_format=LOG_FORMAT) as source:
            formats = dict(source.record_formats())
            durable = source.durable_offset()
            firsts = [first for first, _p, _b in source.segments()]
            segs = [_SourceSegment(first, path, formats[first], size, (firsts + [durable])[i + 1] - first)
                    for i, (first, path, size) in enumerate(source.segments())]
        report = ImportReport(start_offset=segs[0].first, end_offset=durable)
        with connect(url, autocommit=True) as conn:
            create_schema(conn, names)
        with connect(url) as conn:
            try:
                _copy_all(conn, names, root, segs, report, chunk_records, chunk_bytes, snapshots, shown)
                conn.commit()
            except BaseException:
                conn.rollback()
                raise
    except psycopg.Error as exc:
        raise StorageUnavailable(f"log import into {shown} failed (nothing imported): {exc}".strip()) from exc
    finally:
        os.close(lock_fd)
    _check_committed(url, names, report)
    report.seconds = time.monotonic() - began
    return report


def _copy_all(conn: psycopg.Connection, names: Names, root: Path, segs: list[_SourceSegment],
              report: ImportReport, chunk_records: int, chunk_bytes: int, snapshots: bool, shown: str) -> None:
    """The import's one transaction, before its COMMIT."""
    conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (names.prefix,))
    _check_empty(conn, names, shown)
    for (table,) in conn.execute(sql.SQL("SELECT tbl FROM {}").format(names.segments)).fetchall():
        conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(table)))
    conn.execute(sql.SQL("DELETE FROM {}").format(names.segments))
    last = segs[-1]
    if last.records and last.record_format != LOG_FORMAT:
        # new records go into a segment of today's format, as the file log starts one before its first write
        segs = segs + [_SourceSegment(report.end_offset, "", LOG_FORMAT, SEGMENT_HEADER_SIZE, 0)]
    expected: dict[str, tuple[int, int | None, int | None, int]] = {}
    for seg in segs:
        table = names.segment_table(seg.first)
        _create_segment_table(conn, table)
        conn.execute(sql.SQL("INSERT INTO {} VALUES (%s, %s, %s, %s)").format(names.segments),
                     (seg.first, table, seg.record_format, seg.size))
        nbytes = 0
        if seg.records:
            with open(seg.path, "rb") as f:
                data = f.read(seg.size)
            chunk: list = []
            size, first = 0, seg.first
            for payload in _payloads(data, seg):
                chunk.append(payload)
                size += len(payload)
                if len(chunk) >= chunk_records or size >= chunk_bytes:
                    _copy(conn, table, first, chunk)
                    report.copies += 1
                    first, nbytes, chunk, size = first + len(chunk), nbytes + size, [], 0
            if chunk:
                _copy(conn, table, first, chunk)
                report.copies += 1
                nbytes += size
            del data
        expected[table] = (seg.records, seg.first if seg.records else None,
                           seg.first + seg.records - 1 if seg.records else None, nbytes)
        report.segments += 1
        report.records += seg.records
        report.record_bytes += nbytes
    snaps: dict[str, int] = {}
    if snapshots and (root / "snapshots").is_dir():
        for entry in sorted(os.listdir(root / "snapshots")):
            m = _SNAP_FILE.match(entry)
            if not m:
                continue
            path = root / "snapshots" / entry
            try:
                offset, body = decode_snapshot_body(path.read_bytes())
                if offset != int(m.group(2)):
                    raise SnapshotInvalid(f"envelope offset {offset} != file name offset {int(m.group(2))}")
            except (OSError, SnapshotInvalid) as exc:
                logger.warning("log import: skipping bad snapshot %s: %s", path, exc)
                report.skipped_snapshots.append(str(path))
                continue
            conn.execute(sql.SQL("INSERT INTO {} VALUES (%s, %s, %s, %s)").format(names.snapshots),
                         (m.group(1), offset, body, hashlib.sha256(body).digest()))
            snaps[m.group(1)] = snaps.get(m.group(1), 0) + 1
            report.snapshots += 1
            report.snapshot_bytes += len(body)
    (epoch,) = _one(conn.execute(sql.SQL(
        "UPDATE {} SET end_offset = %s, start_offset = %s, generation = generation + 1, active_first = %s,"
        " active_bytes = %s, epoch = epoch + 1 RETURNING epoch").format(names.head),
        (report.end_offset, report.start_offset, segs[-1].first, segs[-1].size)).fetchone())
    conn.execute(sql.SQL("UPDATE {} SET epoch = %s, holder = NULL, url = NULL, renewed_at = NULL")
                 .format(names.lease), (epoch,))
    # the counts, in the database, before COMMIT
    for table, want in expected.items():
        got = conn.execute(sql.SQL("SELECT count(*), min(off), max(off), coalesce(sum(octet_length(payload)), 0)"
                                   " FROM {}").format(sql.Identifier(table))).fetchone()
        if tuple(got or ()) != want:
            raise StorageUnavailable(f"log import: table {table} holds (rows, first, last, bytes) = {got}, "
                                     f"the source {want}: nothing imported")
    got_snaps = dict(conn.execute(sql.SQL("SELECT name, count(*) FROM {} GROUP BY name").format(names.snapshots))
                     .fetchall())
    if got_snaps != snaps:
        raise StorageUnavailable(f"log import: snapshots {got_snaps} in the database, {snaps} read: nothing imported")


def _copy(conn: psycopg.Connection, table: str, first: int, payloads: list) -> None:
    with conn.cursor() as cur:
        with cur.copy(sql.SQL("COPY {} (off, payload) FROM STDIN (FORMAT BINARY)")
                      .format(sql.Identifier(table))) as copy:
            copy.write(copy_rows(first, payloads))


def _check_committed(url: str, names: Names, report: ImportReport) -> None:
    """After COMMIT: the log as a node will open it reads the same offsets."""
    with PostgresLog.open(url, writer=False, prefix=names.prefix) as log:
        got = (log.start_offset(), log.durable_offset())
    if got != (report.start_offset, report.end_offset):
        raise StorageUnavailable(f"log import: the committed log spans offsets {got}, the source "
                                 f"{(report.start_offset, report.end_offset)}")

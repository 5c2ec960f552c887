"""The event log and the snapshot store in PostgreSQL (docs/api.md §19, docs/storage.md "The log in PostgreSQL").

``flowrank serve --log postgresql://…`` keeps the commit point in a database
that a team already replicates: an event is acknowledged once the transaction
that holds its record has committed (with the operator's ``synchronous_commit``
and ``synchronous_standby_names``, after a Postgres standby has it too). Same
ports as the file log (:mod:`engine.log.port`), same contract tests
(``tests/log``).

Tables (``prefix`` default ``flowrank``):

* ``<prefix>_head``: one row: the writer ``epoch`` (fencing), the log's
  ``end_offset`` (what is committed), ``start_offset`` (retention), the
  ``generation`` (steps when segments are rewritten or deleted: a follower
  scans them again), the active segment's first offset and bytes.
* ``<prefix>_segments``: the catalog: ``(first_offset, tbl, record_format,
  bytes)`` per segment, oldest first. A segment is a table of its own,
  ``<prefix>_seg_<first offset, 20 digits>`` with ``(off bigint primary key,
  payload bytea)``: retention drops whole tables (no VACUUM, no bloat), an
  erasure's rewrite writes a new table and swaps it into the catalog.
* ``<prefix>_snapshots``: ``(name, off, payload, digest)``: what a node needs
  to start without replaying from offset 0, where every node reaches it.

Appends. One writer (the active node) holds an ``epoch``; every append's
transaction ends with ``UPDATE head SET end_offset = end WHERE end_offset =
start AND epoch = mine``: the fence and the order check in the same
transaction as the records. A takeover (:mod:`engine.log.pg_lease`) sets a
higher epoch in the head row, under the same row lock, so once it has
committed no append of the old writer can commit (it finds 0 rows and fails
with :class:`Fenced`), and an append that committed first is in the log
before the new writer reads it. Requests queued together are one
transaction (group commit, :func:`engine.log.segment_log.select_group` as in
the file log); ``in_flight`` transactions (default 2) run at once on their own
connections: the second sends its rows while the first commits, and issues
its head update only after the first has issued its own, so Postgres orders
the commits (the second waits on the head row) and a failed first makes the
second fail too. Records are the payloads the sequencer packed once, written
with one binary COPY per transaction.

A COMMIT whose outcome is unknown (the connection broke during it) is
resolved from the log before anything is answered for it: the batch's rows
are read back on a fresh connection and compared byte for byte; present, it
is acknowledged; absent, it failed. Until that is known the log accepts no
other append.

The fault hook is called as in the file log: ``"write"`` before the rows are
sent, ``"fsync"`` before COMMIT, ``"rewrite.write"`` before a rewritten
segment is swapped in, ``"snapshot.write"`` before a snapshot is stored.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import re
import struct
import threading
import time
from collections.abc import Callable, Iterator, Sequence

import psycopg
from psycopg import sql

from engine.core.errors import NotLeader, StorageUnavailable
from engine.core.formats import LOG_FORMAT
from engine.log.framing import FRAME_HEADER_SIZE, MAX_RECORD_BYTES, SEGMENT_HEADER_SIZE, pack_payload, unpack_payload
from engine.log.memory import check_snapshot_name
from engine.log.port import FaultHook, RewriteStats
from engine.log.segment_log import HOLD_TIMEOUT_S, select_group

logger = logging.getLogger("flowrank.log")

_PREFIX = re.compile(r"^[a-z][a-z0-9_]{0,30}$")
#: how long a writer keeps trying to learn whether a COMMIT whose connection broke took effect
RESOLVE_TIMEOUT_S = 30.0
CONNECT_TIMEOUT_S = 5
TCP_USER_TIMEOUT_MS = 3000


class Fenced(NotLeader):
    """Another node took the log over (its epoch is higher), or this node lost its lease: this writer may
    never append again."""


class CommitUnknown(StorageUnavailable):
    """A COMMIT's outcome could not be learnt from the log in time: the log refuses appends until it is."""


def connect(url: str, *, autocommit: bool = False, application_name: str = "flowrank") -> psycopg.Connection:
    """A connection to ``url`` (libpq's: several hosts, ``target_session_attrs``) for the log."""
    try:
        # a server or link that goes silent (a partition, a machine lost) fails a call within seconds instead of
        # the kernel's TCP retransmission timeout: keepalives for idle connections, tcp_user_timeout for sends
        return psycopg.connect(url, autocommit=autocommit, connect_timeout=CONNECT_TIMEOUT_S,
                               application_name=application_name, keepalives=1, keepalives_idle=2,
                               keepalives_interval=1, keepalives_count=3, tcp_user_timeout=TCP_USER_TIMEOUT_MS)
    except psycopg.Error as exc:
        raise StorageUnavailable(f"event log database unreachable: {exc}".strip()) from exc


class Session:
    """One connection to the log's database for a component's own calls (snapshots, the lease), made
    on first use and again after an error, its calls one at a time; an error is
    :class:`~engine.core.errors.StorageUnavailable` (``what`` names the component)."""

    def __init__(self, url: str, what: str, *, autocommit: bool = False):
        self.url, self.what, self.autocommit = url, what, autocommit
        self._conn: psycopg.Connection | None = None
        self._lock = threading.Lock()

    def run(self, fn):
        """``fn(connection)``, then COMMIT (unless autocommit); its result."""
        with self._lock:
            try:
                if self._conn is None or self._conn.closed:
                    self._conn = connect(self.url, autocommit=self.autocommit)
                out = fn(self._conn)
                if not self.autocommit:
                    self._conn.commit()
                return out
            except psycopg.Error as exc:
                if self._conn is not None:
                    self._conn.close()
                self._conn = None
                raise StorageUnavailable(f"{self.what}: {exc}".strip()) from exc

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None


class Names:
    """The SQL names of one log's tables."""

    def __init__(self, prefix: str = "flowrank"):
        if not _PREFIX.match(prefix):
            raise ValueError(f"unsafe table prefix {prefix!r}: lower-case letters, digits and '_'")
        self.prefix = prefix
        self.head = sql.Identifier(f"{prefix}_head")
        self.segments = sql.Identifier(f"{prefix}_segments")
        self.snapshots = sql.Identifier(f"{prefix}_snapshots")
        self.lease = sql.Identifier(f"{prefix}_lease")
        self.settings = sql.Identifier(f"{prefix}_settings")

    @property
    def writer_application(self) -> str:
        """The ``application_name`` of a writer's append connections: a takeover ends the old writer's
        sessions by it (engine.log.pg_lease), so a paused writer holding the head row cannot stall it."""
        return f"flowrank-writer:{self.prefix}"

    def segment_table(self, first: int, generation: int = 0) -> str:
        return f"{self.prefix}_seg_{first:020d}" + (f"_g{generation}" if generation else "")


def create_schema(conn: psycopg.Connection, names: Names, record_format: int = LOG_FORMAT) -> None:
    """Create the log's tables if they are not there (idempotent; concurrent creators are serialised
    by an advisory lock)."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (names.prefix,))
        conn.execute(sql.SQL(
            "CREATE TABLE IF NOT EXISTS {} (id int PRIMARY KEY CHECK (id = 1), epoch bigint NOT NULL,"
            " end_offset bigint NOT NULL, start_offset bigint NOT NULL, generation bigint NOT NULL,"
            " active_first bigint NOT NULL, active_bytes bigint NOT NULL)").format(names.head))
        conn.execute(sql.SQL(
            "CREATE TABLE IF NOT EXISTS {} (first_offset bigint PRIMARY KEY, tbl text NOT NULL,"
            " record_format int NOT NULL, bytes bigint NOT NULL)").format(names.segments))
        conn.execute(sql.SQL(
            "CREATE TABLE IF NOT EXISTS {} (name text NOT NULL, off bigint NOT NULL, payload bytea NOT NULL,"
            " digest bytea NOT NULL, PRIMARY KEY (name, off))").format(names.snapshots))
        conn.execute(sql.SQL(
            "CREATE TABLE IF NOT EXISTS {} (id int PRIMARY KEY CHECK (id = 1), epoch bigint NOT NULL,"
            " holder text, url text, renewed_at timestamptz)").format(names.lease))
        conn.execute(sql.SQL(
            "CREATE TABLE IF NOT EXISTS {} (name text PRIMARY KEY, value bytea NOT NULL)").format(names.settings))
        if conn.execute(sql.SQL("SELECT 1 FROM {}").format(names.head)).fetchone() is None:
            first = names.segment_table(0)
            _create_segment_table(conn, first)
            conn.execute(sql.SQL("INSERT INTO {} VALUES (0, %s, %s, %s)").format(names.segments),
                         (first, record_format, SEGMENT_HEADER_SIZE))
            conn.execute(sql.SQL("INSERT INTO {} VALUES (1, 0, 0, 0, 1, 0, %s)").format(names.head),
                         (SEGMENT_HEADER_SIZE,))
            conn.execute(sql.SQL("INSERT INTO {} VALUES (1, 0, NULL, NULL, NULL)").format(names.lease))


def _create_segment_table(conn: psycopg.Connection, table: str) -> None:
    # payload kept uncompressed out of line when large (EXTERNAL): records are msgpack, rarely compressible,
    # and a prefix filter (read_where) reads only the first bytes of a toasted value
    conn.execute(sql.SQL("CREATE TABLE IF NOT EXISTS {} (off bigint PRIMARY KEY, payload bytea NOT NULL)"
                         " WITH (fillfactor = 100)").format(sql.Identifier(table)))
    conn.execute(sql.SQL("ALTER TABLE {} ALTER COLUMN payload SET STORAGE EXTERNAL").format(sql.Identifier(table)))


_COPY_HEADER = b"PGCOPY\n\xff\r\n\x00" + struct.pack("!ii", 0, 0)
_COPY_ROW = struct.Struct("!hiqi")  # 2 fields; 8-byte off; payload length
_COPY_TRAILER = struct.pack("!h", -1)


def copy_rows(first: int, payloads: Sequence[bytes]) -> bytes:
    """The binary COPY stream of ``(off, payload)`` rows from offset ``first``: one buffer per batch."""
    parts = [_COPY_HEADER]
    pack = _COPY_ROW.pack
    for i, p in enumerate(payloads):
        parts.append(pack(2, 8, first + i, len(p)))
        parts.append(p)
    parts.append(_COPY_TRAILER)
    return b"".join(parts)


class _Segment:
    __slots__ = ("first", "table", "record_format", "bytes", "ready")

    def __init__(self, first: int, table: str, record_format: int, nbytes: int, ready: bool = True):
        self.first, self.table, self.record_format, self.bytes = first, table, record_format, nbytes
        self.ready = threading.Event()  # its table exists (a group that starts it creates it first)
        if ready:
            self.ready.set()


class _Request:
    __slots__ = ("payloads", "count", "nbytes", "first", "error", "done", "at", "since")

    def __init__(self, payloads: list[bytes], at: int | None):
        self.payloads = payloads
        self.count = len(payloads)
        self.nbytes = sum(len(p) for p in payloads) + FRAME_HEADER_SIZE * len(payloads)
        self.first = -1
        self.error: BaseException | None = None
        self.done = threading.Event()
        self.at = at
        self.since = time.monotonic()


class _Group:
    """One transaction: its requests, offsets, the segment it writes, and whether it starts one."""

    __slots__ = ("requests", "first", "end", "segment", "roll_from", "closed_bytes", "head_updated", "bytes_after")

    def __init__(self, requests: list[_Request], first: int, segment: _Segment, roll_from: _Segment | None,
                 bytes_after: int):
        self.requests = requests
        self.first = first
        self.end = first + sum(r.count for r in requests)
        self.segment = segment
        self.roll_from = roll_from  # the segment this group closes (it starts ``segment``), or None
        self.closed_bytes = 0  # the bytes of roll_from once closed
        self.bytes_after = bytes_after  # the active segment's bytes once this group commits
        self.head_updated = threading.Event()  # this group issued its head update (or gave up before it)


class PostgresLog:
    """:class:`engine.log.EventLog` in PostgreSQL. Create with :meth:`open`.

    ``writer=True``: this process appends, under ``epoch`` (None: take the log
    over now, with the epoch one higher: a single node, tests; a node of a
    cluster gets its epoch from :class:`engine.log.pg_lease.Lease`).
    ``writer=False``: a reader (the log actor, a standby): appends, rewrites and
    retention raise ``ValueError``; reads answer what is committed at the call."""

    def __init__(self, url: str, names: Names, *, writer: bool, epoch: int, segment_bytes: int,
                 fault_hook: FaultHook | None, record_format: int, in_flight: int):
        self.url = url
        self.names = names
        self.writer = writer
        self.epoch = epoch
        self._segment_bytes = segment_bytes
        self._hook = fault_hook
        self._record_format = record_format
        self._lock = threading.Lock()  # guards the catalog copy, _durable, _start, _generation
        self._read_conn: psycopg.Connection | None = None
        self._read_lock = threading.Lock()
        self._segments: list[_Segment] = []
        self._durable = self._start = 0
        self._generation = 0
        self._fenced = False
        self._fenced_why = Fenced("event log: this node's epoch was taken over; it may not append")
        self._closed = False
        self._stats = {"groups": 0, "batches": 0, "records": 0, "commits": 0, "failed_groups": 0,
                       "last_commit_seconds": 0.0, "unknown_commits": 0}
        self.refresh()
        # the writer's side: pending requests, the position after every dispatched group, slots
        self._cond = threading.Condition(threading.Lock())
        self._pending: list[_Request] = []
        self._pos = self._durable
        self._active = self._segments[-1]
        self._active_bytes = self._head_active_bytes
        self._broken = False
        self._resync = False  # a group failed: take no new group until those in flight are done
        self._unknown: CommitUnknown | None = None  # a COMMIT whose outcome stayed unknown: appends refused
        self._paused = 0  # retention or a rewrite's roll holds the writers (no group starts)
        self._committed_active_bytes = self._active_bytes
        self._rewrite_lock = threading.Lock()
        self._inflight = 0
        self._last_group: _Group | None = None
        self._closing = False
        self._threads: list[threading.Thread] = []
        if writer:
            for i in range(in_flight):
                t = threading.Thread(target=self._slot, args=(i,), name=f"flowrank-pglog-writer-{i}", daemon=True)
                t.start()
                self._threads.append(t)

    # ------------------------------------------------------------------ open

    @classmethod
    def open(cls, url: str, *, writer: bool = True, epoch: int | None = None, segment_bytes: int = 64 * 2**20,
             fault_hook: FaultHook | None = None, record_format: int = LOG_FORMAT, in_flight: int = 2,
             prefix: str = "flowrank", **_ignored) -> "PostgresLog":
        """Open (creating the tables if needed) the log in the database at ``url``. ``_ignored``:
        the file log's options that mean nothing here (``fsync``, ``index_interval``, ``mark``)."""
        if segment_bytes < 1 or in_flight < 1:
            raise ValueError("segment_bytes and in_flight must be >= 1")
        names = Names(prefix)
        with connect(url, autocommit=True) as conn:
            create_schema(conn, names, record_format)
            if writer and epoch is None:
                epoch = take_over(conn, names)
        return cls(url, names, writer=writer, epoch=-1 if epoch is None else epoch, segment_bytes=segment_bytes,
                   fault_hook=fault_hook, record_format=record_format, in_flight=in_flight)

    def _reader_conn(self) -> psycopg.Connection:
        """Under ``_read_lock``: the connection reads go through (reconnected after a failure)."""
        if self._read_conn is None or self._read_conn.closed:
            self._read_conn = connect(self.url, autocommit=True)
        return self._read_conn

    def _query(self, query, params=()) -> list[tuple]:
        with self._read_lock:
            try:
                return self._reader_conn().execute(query, params).fetchall()
            except psycopg.Error as exc:  # unreachable, or a table a rewrite or retention dropped meanwhile
                if self._read_conn is not None:
                    self._read_conn.close()
                self._read_conn = None
                raise StorageUnavailable(f"event log read failed: {exc}".strip()) from exc

    def refresh(self) -> None:
        """Read the head row and the catalog again (a reader's view of what is committed)."""
        n = self.names
        head = self._query(sql.SQL("SELECT end_offset, start_offset, generation, active_first, active_bytes, epoch"
                                   " FROM {}").format(n.head))
        segs = self._query(sql.SQL("SELECT first_offset, tbl, record_format, bytes FROM {} ORDER BY first_offset")
                           .format(n.segments))
        end, start, generation, active_first, active_bytes, epoch = head[0]
        with self._lock:
            self._segments = [_Segment(*s) for s in segs if s[0] >= start or s is segs[-1]]
            if self.writer:
                self._durable = max(self._durable, end)
            else:
                self._durable = end
            self._start, self._generation = start, generation
            self._head_active_bytes = active_bytes
            self._head_epoch = epoch

    # --------------------------------------------------------------- queries

    @property
    def generation(self) -> int:
        return self._generation

    def end_offset(self) -> int:
        with self._cond:
            return self._pos if self.writer else self.durable_offset()

    def durable_offset(self) -> int:
        if not self.writer:
            self.refresh()
        with self._lock:
            return self._durable

    def start_offset(self) -> int:
        if not self.writer:
            self.refresh()
        with self._lock:
            return self._start

    def segments(self) -> list[tuple[int, str, int]]:
        if not self.writer:
            self.refresh()
        with self._lock:
            segs = list(self._segments)
        out = [(s.first, f"postgresql:{s.table}", s.bytes) for s in segs[:-1]]
        last = segs[-1]
        with self._cond:
            active = self._active_bytes if self.writer else self._head_active_bytes
        return out + [(last.first, f"postgresql:{last.table}", active)]

    def record_formats(self) -> list[tuple[int, int]]:
        with self._lock:
            return [(s.first, s.record_format) for s in self._segments]

    def stats(self) -> dict:
        with self._lock:
            return dict(self._stats) | {"epoch": self.epoch, "generation": self._generation}

    def fence(self, reason: str, leader: str | None = None) -> None:
        """Refuse every append from now on (this node lost its lease): queued ones fail with
        :class:`Fenced`, naming ``leader`` when known."""
        with self._cond:
            self._fenced = True
            self._fenced_why = Fenced(f"event log: {reason}", leader=leader)
            self._cond.notify_all()

    @property
    def fenced(self) -> bool:
        return self._fenced

    # ---------------------------------------------------------------- append

    def append_batch(self, records: Sequence[object]) -> list[int]:
        return self.append_payloads([pack_payload(r) for r in records])

    def append_payloads(self, payloads: Sequence[bytes], at: int | None = None) -> list[int]:
        """See :meth:`engine.log.EventLog.append_payloads`. The wait is one transaction, shared with the
        requests queued beside it (group commit)."""
        if not self.writer:
            raise ValueError("append to a log opened for reading")
        if self._closed or self._closing:
            raise ValueError("append to a closed log")
        if not payloads:
            return []
        for p in payloads:
            if len(p) > MAX_RECORD_BYTES:
                raise ValueError(f"record of {len(p)} bytes exceeds {MAX_RECORD_BYTES}")
        request = _Request(list(payloads), at)
        with self._cond:
            if self._closing:
                raise ValueError("append to a closed log")
            if self._fenced:
                raise self._fenced_why
            self._pending.append(request)
            self._cond.notify_all()
        request.done.wait()
        if request.error is not None:
            raise request.error
        return list(range(request.first, request.first + request.count))

    def _next_group(self) -> _Group | None:
        """Under ``_cond``: wait for and take the next group (None: closing). Fails what cannot be
        appended (offset passed, the group before failed, held too long, fenced)."""
        while True:
            if self._closing and not self._pending:
                return None
            if self._pending and not (self._resync and self._inflight) and not self._paused:
                group, failed, held = select_group(self._pending, self._pos, self._broken, time.monotonic())
                if self._closing:
                    failed += [(h, "append to a closing log") for h in held]
                    held = []
                if self._fenced or self._unknown is not None:
                    failed += [(r, "this node's epoch was taken over" if self._fenced else str(self._unknown))
                               for r in group]
                    group = []
                self._pending = held
                for r, why in failed:
                    r.error = (self._fenced_why if self._fenced else CommitUnknown(f"event log: {why}")
                               if self._unknown else StorageUnavailable(f"event log: {why}"))
                    r.done.set()
                if group:
                    return self._plan(group)
                if held:
                    self._cond.wait(timeout=1.0)
                    continue
                continue
            self._cond.wait(timeout=1.0)

    def _plan(self, requests: list[_Request]) -> _Group:
        """Under ``_cond``: offsets and the segment of a new group (it starts a segment when the active
        one is full, as the file log rolls)."""
        first = self._pos
        nbytes = sum(r.nbytes for r in requests)
        roll_from, closed = None, 0
        seg = self._active
        if self._active_bytes >= self._segment_bytes and first > seg.first:
            roll_from, closed = seg, self._active_bytes
            seg = _Segment(first, self.names.segment_table(first), self._record_format, SEGMENT_HEADER_SIZE,
                           ready=False)
            self._active_bytes = SEGMENT_HEADER_SIZE
            self._active = seg
        self._active_bytes += nbytes
        group = _Group(requests, first, seg, roll_from, self._active_bytes)
        group.closed_bytes = closed
        self._pos = group.end
        pos = first
        for r in requests:
            r.first = pos
            pos += r.count
        return group

    def _slot(self, i: int) -> None:
        conn: psycopg.Connection | None = None
        while True:
            with self._cond:
                group = self._next_group()
                if group is None:
                    break
                before, self._last_group = self._last_group, group
                self._inflight += 1
            error: BaseException | None = None
            try:
                if conn is None or conn.closed:
                    conn = connect(self.url, application_name=self.names.writer_application)
                self._commit(conn, group, before)
            except (CommitUnknown, Fenced) as exc:
                error = exc
            except (psycopg.Error, OSError, StorageUnavailable) as exc:
                if conn is not None:
                    try:
                        conn.rollback()
                    except psycopg.Error:
                        conn.close()
                error = exc if isinstance(exc, StorageUnavailable) else StorageUnavailable(
                    f"event log append failed: {exc}".strip())
                if isinstance(exc, psycopg.OperationalError):  # a session a takeover ended, or a lost server
                    error = self._fenced_or(error)
            except BaseException as exc:  # never leave a caller waiting
                error = StorageUnavailable(f"event log writer failed: {exc!r}")
                raise
            finally:
                group.head_updated.set()
                with self._cond:
                    self._inflight -= 1
                    if error is None:
                        self._broken = False
                    else:
                        self._note_failure(error)
                    if self._resync and not self._inflight:
                        self._resync_now()
                    self._cond.notify_all()
                if error is not None:
                    for r in group.requests:
                        if not r.done.is_set():
                            r.error = error
                            r.done.set()
        if conn is not None:
            conn.close()

    def _fenced_or(self, error: StorageUnavailable) -> StorageUnavailable:
        """After a broken connection: :class:`Fenced` when another epoch holds the log now, else ``error``."""
        try:
            with connect(self.url, autocommit=True) as conn:
                (epoch,) = _one(conn.execute(sql.SQL("SELECT epoch FROM {}").format(self.names.head)).fetchone())
        except (psycopg.Error, StorageUnavailable):
            return error
        if epoch != self.epoch:
            return Fenced(f"event log: epoch {epoch} took the log over from this node's epoch {self.epoch}")
        return error

    def _note_failure(self, exc: BaseException) -> None:
        """Under ``_cond``: a group failed; the groups after it fail too, then the log goes on from what
        is committed (``_resync_now`` once none is in flight)."""
        self._broken = self._resync = True
        self._stats["failed_groups"] += 1
        if isinstance(exc, Fenced):
            self._fenced, self._fenced_why = True, exc
        if isinstance(exc, CommitUnknown):
            self._unknown = exc

    def _resync_now(self) -> None:
        """Under ``_cond``, none in flight: continue from what is committed."""
        self._resync = False
        with self._lock:
            self._pos = self._durable
            self._active, self._active_bytes = self._segments[-1], self._committed_active_bytes

    def _commit(self, conn: psycopg.Connection, group: _Group, before: _Group | None) -> None:
        n = self.names
        seg = group.segment
        path = f"postgresql:{seg.table}"
        began = time.monotonic()
        if group.roll_from is not None:  # the new segment's table exists (committed) before any row goes in
            try:
                _create_segment_table(conn, seg.table)
                conn.commit()
            finally:
                seg.ready.set()  # (failed: the groups after this one fail too)
        elif not seg.ready.wait(HOLD_TIMEOUT_S):
            raise StorageUnavailable(f"event log: segment {seg.table} was not created in time")
        if self._hook is not None:
            try:
                self._hook("write", path)
            except OSError as exc:
                raise StorageUnavailable(f"event log write failed on {path}: {exc}") from exc
        payloads = [p for r in group.requests for p in r.payloads]
        with conn.cursor() as cur:
            with cur.copy(sql.SQL("COPY {} (off, payload) FROM STDIN (FORMAT BINARY)")
                          .format(sql.Identifier(seg.table))) as copy:
                copy.write(copy_rows(group.first, payloads))
            if group.roll_from is not None:
                cur.execute(sql.SQL("UPDATE {} SET bytes = %s WHERE first_offset = %s").format(n.segments),
                            (group.closed_bytes, group.roll_from.first))
                cur.execute(sql.SQL("INSERT INTO {} VALUES (%s, %s, %s, %s)").format(n.segments),
                            (seg.first, seg.table, seg.record_format, SEGMENT_HEADER_SIZE))
            if before is not None:
                before.head_updated.wait()  # Postgres then orders the commits: this update waits on the head row
            # WHERE id = 1 always matches, so this waits for the head row's lock and then reads its newest
            # version (a WHERE on end_offset would skip a row whose old version does not match, unlocked)
            cur.execute(sql.SQL("UPDATE {} SET end_offset = end_offset + %s, active_first = %s, active_bytes = %s"
                                " WHERE id = 1 RETURNING end_offset, epoch").format(n.head),
                        (group.end - group.first, seg.first, group.bytes_after))
            end, epoch = _one(cur.fetchone())
            group.head_updated.set()
            if end != group.end or epoch != self.epoch:
                conn.rollback()
                if epoch != self.epoch:
                    raise Fenced(f"event log: epoch {epoch} took the log over from this node's epoch {self.epoch}")
                raise StorageUnavailable(f"event log: append at offset {group.first}, but the log is at offset "
                                         f"{end - (group.end - group.first)} (the append before it failed)")
        if self._hook is not None:
            try:
                self._hook("fsync", path)
            except OSError as exc:
                raise StorageUnavailable(f"event log fsync failed on {path}: {exc}") from exc
        try:
            conn.commit()
        except psycopg.OperationalError as exc:
            conn.close()
            self._resolve(group, payloads, exc)
        self._committed(group, time.monotonic() - began)

    def _resolve(self, group: _Group, payloads: list[bytes], cause: BaseException) -> None:
        """A COMMIT broke off: read the batch back from the log (a fresh connection) until its outcome
        is known. Returns when it committed; raises StorageUnavailable when it did not, CommitUnknown
        when the database stays unreachable for RESOLVE_TIMEOUT_S (the log then refuses appends)."""
        with self._lock:
            self._stats["unknown_commits"] += 1
        deadline = time.monotonic() + RESOLVE_TIMEOUT_S
        while True:
            try:
                with connect(self.url, autocommit=True) as conn:
                    rows = conn.execute(
                        sql.SQL("SELECT payload FROM {} WHERE off >= %s AND off < %s ORDER BY off")
                        .format(sql.Identifier(group.segment.table)), (group.first, group.end)).fetchall()
                break
            except (psycopg.Error, StorageUnavailable) as exc:
                if time.monotonic() > deadline:
                    raise CommitUnknown(f"event log: the commit of offsets {group.first}..{group.end - 1} broke "
                                        f"off ({cause}) and the log stayed unreachable: outcome unknown") from exc
                time.sleep(0.2)
        if [bytes(r[0]) for r in rows] != payloads:
            raise StorageUnavailable(f"event log: the commit of offsets {group.first}..{group.end - 1} broke off "
                                     f"({cause}); it is not in the log")
        logger.warning("event log: a commit broke off (%s) and was found in the log: offsets %d..%d acknowledged",
                       cause, group.first, group.end - 1)

    def _committed(self, group: _Group, seconds: float) -> None:
        with self._lock:
            self._durable = max(self._durable, group.end)
            if group.roll_from is not None:
                for s in self._segments:
                    if s.first == group.roll_from.first:
                        s.bytes = group.closed_bytes
                if self._segments[-1].first < group.segment.first:
                    self._segments.append(group.segment)
            self._committed_active_bytes = group.bytes_after
            self._stats["groups"] += 1
            self._stats["commits"] += 1
            self._stats["batches"] += len(group.requests)
            self._stats["records"] += group.end - group.first
            self._stats["last_commit_seconds"] = seconds
        for r in group.requests:
            r.done.set()

    # ------------------------------------------------------------------ reads

    def _segment_list(self, offset: int) -> list[_Segment]:
        with self._lock:
            if offset < self._start:
                raise ValueError(f"offset {offset} precedes the oldest retained offset {self._start}")
            return list(self._segments)

    def read_from(self, offset: int, chunk_records: int = 4096) -> Iterator[tuple[int, object]]:
        if offset < 0 or chunk_records < 1:
            raise ValueError("offset must be >= 0 and chunk_records >= 1")
        if not self.writer:
            self.refresh()
        self._segment_list(offset)
        return self._reader(offset, chunk_records)

    def _reader(self, cur: int, chunk_records: int) -> Iterator[tuple[int, object]]:
        while True:
            rows = self._chunk(cur, chunk_records)
            if not rows:
                return
            for off, payload in rows:
                yield off, unpack_payload(payload)
            cur = rows[-1][0] + 1

    def _chunk(self, cur: int, limit: int) -> list[tuple[int, bytes]]:
        """Up to ``limit`` committed records from ``cur`` (in the segment holding it, then the next)."""
        for attempt in range(2):
            segs = self._segment_list(cur)
            durable = self.durable_offset() if self.writer else None
            i = max(0, _bisect(segs, cur))
            seg = segs[i]
            hi = segs[i + 1].first if i + 1 < len(segs) else None
            q = sql.SQL("SELECT off, payload FROM {} WHERE off >= %s{} ORDER BY off LIMIT %s").format(
                sql.Identifier(seg.table), sql.SQL(" AND off < %s") if durable is not None else sql.SQL(""))
            params = (cur, durable, limit) if durable is not None else (cur, limit)
            try:
                rows = self._query(q, params)
            except StorageUnavailable:
                if attempt:
                    raise
                self.refresh()  # a rewrite or retention swapped the catalog: read it again
                continue
            if not rows and hi is None and not self.writer and attempt == 0:
                self.refresh()  # a reader: a segment the writer started since
                if len(self._segment_list(cur)) > len(segs):
                    continue
            if rows or hi is None or cur >= hi:
                return [(o, bytes(p)) for o, p in rows]
            cur = hi  # past the end of this segment: the next one
            return self._chunk(cur, limit)
        return []

    def read_payloads(self, offset: int, limit: int = 4096) -> list[tuple[int, bytes]]:
        """Up to ``limit`` committed records from ``offset`` as the log holds them (not decoded): what a
        standby follows (engine.runtime.standby). Empty when it has caught up."""
        if offset < 0 or limit < 1:
            raise ValueError("offset must be >= 0 and limit >= 1")
        return self._chunk(offset, limit)

    def read_where(self, offset: int, head: bytes) -> list[tuple[int, object]]:
        """The prefix test runs in Postgres (``substring(payload for n) = head``): only matching rows
        leave the database, and only they are decoded."""
        if offset < 0:
            raise ValueError("offset must be >= 0")
        if not self.writer:
            self.refresh()
        segs = self._segment_list(offset)
        durable = self.durable_offset()
        out: list[tuple[int, object]] = []
        for i, seg in enumerate(segs):
            hi = segs[i + 1].first if i + 1 < len(segs) else durable
            if hi <= offset:
                continue
            rows = self._query(sql.SQL("SELECT off, payload FROM {} WHERE off >= %s AND off < %s AND "
                                       "substring(payload from 1 for %s) = %s ORDER BY off")
                               .format(sql.Identifier(seg.table)), (offset, min(hi, durable), len(head), head))
            out += [(o, unpack_payload(bytes(p))) for o, p in rows]
        return out

    # ------------------------------------------------------- retention, rewrite

    @contextlib.contextmanager
    def _pause_writers(self) -> Iterator[None]:
        """No group in flight, none started, while held (a rewrite's roll)."""
        with self._cond:
            self._paused += 1  # no group starts (_next_group)
            while self._inflight:
                self._cond.wait(0.05)
        try:
            yield
        finally:
            with self._cond:
                self._paused -= 1
                self._cond.notify_all()

    def delete_segments_before(self, offset: int) -> list[str]:
        """Drop the tables of whole segments whose every record is ``< offset`` (never the active one),
        in one transaction with the catalog and the head's start offset."""
        if not self.writer:
            raise ValueError("retention is the writer's")
        n = self.names
        with self._lock:
            segs = list(self._segments)
        gone = [s for s, nxt in zip(segs, segs[1:]) if nxt.first <= offset]
        if not gone:
            return []
        new_start = segs[len(gone)].first
        with connect(self.url) as conn:
            for s in gone:
                conn.execute(sql.SQL("DELETE FROM {} WHERE first_offset = %s").format(n.segments), (s.first,))
                conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(s.table)))
            cur = conn.execute(sql.SQL("UPDATE {} SET start_offset = %s, generation = generation + 1 WHERE epoch = %s")
                               .format(n.head), (new_start, self.epoch))
            if cur.rowcount != 1:  # another node took the log over: its retention, not ours
                conn.rollback()
                raise Fenced(f"event log: this node's epoch {self.epoch} was taken over; retention is the new writer's")
            conn.commit()
        with self._lock:
            self._segments = segs[len(gone):]
            self._start = new_start
            self._generation += 1
        return [f"postgresql:{s.table}" for s in gone]

    def rewrite(self, before: int, fn: Callable[[int, object], object]) -> RewriteStats:
        """See :meth:`engine.log.EventLog.rewrite`. The active segment is closed first when it holds a
        record ``< before``; each segment where ``fn`` changed a record is copied into a new table, and
        all of them are swapped into the catalog in one transaction (old tables dropped in it):
        readers see every affected segment old or every one new, a crash leaves one or the other.
        Appends go on meanwhile. When a segment changed, :func:`scrub_files` follows, so the old
        tables' files and the WAL that carried the old bytes go at once."""
        if not self.writer:
            raise ValueError("rewrite is the writer's")
        if self._closed:
            raise ValueError("rewrite of a closed log")
        n = self.names
        with self._rewrite_lock:
            limit = self._close_active_below(before)
            with self._lock:
                segs = [s for s in self._segments if s.first < limit]
                generation = self._generation + 1
            written: list[tuple[_Segment, str, int, int]] = []
            with connect(self.url) as conn:
                try:
                    for seg in segs:
                        rows = conn.execute(sql.SQL("SELECT off, payload FROM {} ORDER BY off")
                                            .format(sql.Identifier(seg.table))).fetchall()
                        changed, out, size = 0, [], SEGMENT_HEADER_SIZE
                        for off, payload in rows:
                            payload = bytes(payload)
                            if off < limit:
                                record = unpack_payload(payload)
                                new = fn(off, record)
                                if new is not record:
                                    packed = pack_payload(new)
                                    if packed != payload:
                                        payload, changed = packed, changed + 1
                            out.append(payload)
                            size += FRAME_HEADER_SIZE + len(payload)
                        if not changed:
                            continue
                        table = n.segment_table(seg.first, generation)
                        if self._hook is not None:
                            try:
                                self._hook("rewrite.write", f"postgresql:{table}")
                            except OSError as exc:
                                raise StorageUnavailable(f"event log rewrite failed on {table}: {exc}") from exc
                        conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(table)))
                        _create_segment_table(conn, table)
                        with conn.cursor().copy(sql.SQL("COPY {} (off, payload) FROM STDIN (FORMAT BINARY)")
                                                .format(sql.Identifier(table))) as copy:
                            copy.write(copy_rows(rows[0][0] if rows else seg.first, out))
                        written.append((seg, table, changed, size))
                    for seg, table, _c, size in written:
                        conn.execute(sql.SQL("UPDATE {} SET tbl = %s, bytes = %s WHERE first_offset = %s")
                                     .format(n.segments), (table, size, seg.first))
                        conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(seg.table)))
                    if written:
                        cur = conn.execute(sql.SQL("UPDATE {} SET generation = generation + 1 WHERE epoch = %s")
                                           .format(n.head), (self.epoch,))
                        if cur.rowcount != 1:
                            raise Fenced(f"event log: this node's epoch {self.epoch} was taken over; the rewrite "
                                         "is the new writer's")
                    conn.commit()
                except psycopg.Error as exc:
                    conn.rollback()
                    raise StorageUnavailable(f"event log rewrite failed: {exc}".strip()) from exc
                except BaseException:
                    conn.rollback()
                    raise
            if written:
                scrub_files(self.url)  # the dropped tables' files and the WAL that held the old bytes go now
                with self._lock:
                    tables = {seg.first: (table, size) for seg, table, _c, size in written}
                    for s in self._segments:
                        if s.first in tables:
                            s.table, s.bytes = tables[s.first]
                    self._generation += 1
            return RewriteStats(len(written), sum(c for _s, _t, c, _b in written), sum(b for *_x, b in written))

    def _close_active_below(self, before: int) -> int:
        """Roll the active segment when it holds a record ``< before``; the rewrite's limit."""
        with self._pause_writers():
            with self._cond:
                limit = max(self._start, min(before, self._pos))
                active = self._active
                if active.first >= limit or self._pos == active.first:
                    return limit
                first = self._pos
                seg = _Segment(first, self.names.segment_table(first), self._record_format, SEGMENT_HEADER_SIZE)
                closed = self._active_bytes
            n = self.names
            with connect(self.url) as conn:
                _create_segment_table(conn, seg.table)
                conn.execute(sql.SQL("UPDATE {} SET bytes = %s WHERE first_offset = %s").format(n.segments),
                             (closed, active.first))
                conn.execute(sql.SQL("INSERT INTO {} VALUES (%s, %s, %s, %s)").format(n.segments),
                             (seg.first, seg.table, seg.record_format, SEGMENT_HEADER_SIZE))
                cur = conn.execute(sql.SQL("UPDATE {} SET active_first = %s, active_bytes = %s WHERE epoch = %s")
                                   .format(n.head), (seg.first, SEGMENT_HEADER_SIZE, self.epoch))
                if cur.rowcount != 1:
                    conn.rollback()
                    raise Fenced(f"event log: this node's epoch {self.epoch} was taken over")
                conn.commit()
            with self._cond, self._lock:
                active.bytes = closed
                self._segments.append(seg)
                self._active, self._active_bytes = seg, SEGMENT_HEADER_SIZE
                self._committed_active_bytes = SEGMENT_HEADER_SIZE
            return limit

    # ------------------------------------------------------------------ close

    def close(self) -> None:
        """Finish the appends in flight, close the connections. Idempotent."""
        if self._closed:
            return
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        for t in self._threads:
            t.join(timeout=HOLD_TIMEOUT_S)
        self._closed = True
        with self._read_lock:
            if self._read_conn is not None:
                self._read_conn.close()
                self._read_conn = None

    def __enter__(self) -> "PostgresLog":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _one(row: tuple | None) -> tuple:
    if row is None:
        raise StorageUnavailable("event log: the head row is missing (were the log's tables dropped?)")
    return row


def _bisect(segs: list[_Segment], offset: int) -> int:
    lo, hi = 0, len(segs)
    while lo < hi:
        mid = (lo + hi) // 2
        if segs[mid].first <= offset:
            lo = mid + 1
        else:
            hi = mid
    return lo - 1


def take_over(conn: psycopg.Connection, names: Names) -> int:
    """Make the log's epoch one higher (in the head row, under its lock: appends of the old epoch
    that have not committed by then never will) and return it."""
    with conn.transaction():
        (epoch,) = _one(conn.execute(sql.SQL("UPDATE {} SET epoch = epoch + 1 RETURNING epoch").format(names.head))
                        .fetchone())
        conn.execute(sql.SQL("UPDATE {} SET epoch = %s").format(names.lease), (epoch,))
    return epoch


def server_urls(url: str) -> list[str]:
    """One URL per server of a (multi-host) libpq URL, any role (``target_session_attrs=any``)."""
    params = psycopg.conninfo.conninfo_to_dict(url)
    hosts = str(params.get("host", "")).split(",")
    ports = str(params.get("port", "")).split(",")
    out = []
    for i, host in enumerate(hosts):
        one = dict(params, host=host, target_session_attrs="any")
        if ports != [""]:
            one["port"] = ports[i] if i < len(ports) else ports[-1]
        out.append(psycopg.conninfo.make_conninfo(**one))
    return out


def scrub_files(url: str, timeout_s: float = 30.0) -> bool:
    """After an erasure's rewrite (docs/api.md §17): have every server of ``url`` drop the files that held
    the old bytes. On the primary: a WAL switch and a CHECKPOINT, twice (the dropped tables' files go, and
    with ``wal_recycle=off`` the WAL segments written before it are removed, once no replication slot
    needs them); on each standby, once it has replayed that far, a CHECKPOINT (a restartpoint: the same
    there). False when a step was refused or a server did not answer (the files then go at the servers'
    own next checkpoints). WAL archives and base backups are backups: they keep what they hold."""
    ok = True
    lsn = None
    standbys = []
    for one in server_urls(url):
        try:
            with psycopg.connect(one, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S) as conn:
                if conn.execute("SELECT pg_is_in_recovery()").fetchone()[0]:  # type: ignore[index]
                    standbys.append(one)
                    continue
                for _ in range(2):
                    conn.execute("SELECT pg_switch_wal()")
                    conn.execute("CHECKPOINT")
                lsn = conn.execute("SELECT pg_current_wal_lsn()").fetchone()[0]  # type: ignore[index]
        except psycopg.Error as exc:
            logger.warning("erasure: scrubbing the files of %s failed (%s)", one.split("password")[0], exc)
            ok = False
    for one in standbys:
        try:
            with psycopg.connect(one, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S) as conn:
                deadline = time.monotonic() + timeout_s
                while lsn is not None and not conn.execute("SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn",
                                                            (lsn,)).fetchone()[0]:  # type: ignore[index]
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"the standby had not replayed {lsn} after {timeout_s:g} s")
                    time.sleep(0.05)
                conn.execute("CHECKPOINT")
        except (psycopg.Error, TimeoutError) as exc:
            logger.warning("erasure: scrubbing the files of a standby failed (%s)", exc)
            ok = False
    return ok


class PostgresSnapshotStore:
    """:class:`engine.log.SnapshotStore` in the log's database (``<prefix>_snapshots``): every node reads
    the snapshots the active saved, so a standby or a replacement node starts from the newest one."""

    def __init__(self, url: str, keep: int = 3, *, fault_hook: FaultHook | None = None, prefix: str = "flowrank"):
        if keep < 1:
            raise ValueError("keep must be >= 1")
        self.url = url
        self.names = Names(prefix)
        self._keep = keep
        self._hook = fault_hook
        self._session = Session(url, "snapshot store")
        self._run = self._session.run
        with connect(url, autocommit=True) as conn:
            create_schema(conn, self.names)

    def save(self, name: str, offset: int, payload: object) -> str:
        check_snapshot_name(name)
        if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
            raise ValueError(f"snapshot offset must be an int >= 0, got {offset!r}")
        data = pack_payload(payload)
        path = f"postgresql:{self.names.prefix}_snapshots/{name}.{offset:020d}"
        if self._hook is not None:
            try:
                self._hook("snapshot.write", path)
            except OSError as exc:
                raise StorageUnavailable(f"snapshot write failed on {path}: {exc}") from exc
        t = self.names.snapshots

        def save(conn):
            conn.execute(sql.SQL("DELETE FROM {} WHERE name = %s AND off = %s").format(t), (name, offset))
            conn.execute(sql.SQL("INSERT INTO {} VALUES (%s, %s, %s, %s)").format(t),
                         (name, offset, data, hashlib.sha256(data).digest()))
            conn.execute(sql.SQL("DELETE FROM {} WHERE name = %s AND off NOT IN "
                                 "(SELECT off FROM {} WHERE name = %s ORDER BY off DESC LIMIT %s)").format(t, t),
                         (name, name, self._keep))

        self._run(save)
        return path

    def load_latest(self, name: str) -> tuple[int, object] | None:
        check_snapshot_name(name)
        t = self.names.snapshots
        rows = self._run(lambda conn: conn.execute(sql.SQL("SELECT off, payload, digest FROM {} WHERE name = %s "
                                                           "ORDER BY off DESC").format(t), (name,)).fetchall())
        for offset, payload, digest in rows:
            data = bytes(payload)
            if hashlib.sha256(data).digest() != bytes(digest):
                logger.warning("snapshot %s at offset %d does not verify: skipped", name, offset)
                continue
            return offset, unpack_payload(data)
        return None

    def delete_through(self, offset: int) -> list[str]:
        t = self.names.snapshots
        fresh = sql.Identifier(f"{self.names.prefix}_snapshots_new")

        def delete(conn):
            # Not a DELETE: its rows' bytes would stay in the table's file until a vacuum the database's
            # horizons allow (a standby's feedback holds them back). The kept rows go into a new table that
            # replaces the old one, whose file goes at the next checkpoint (an erasure runs one).
            conn.execute(sql.SQL("LOCK TABLE {} IN ACCESS EXCLUSIVE MODE").format(t))
            gone = conn.execute(sql.SQL("SELECT name, off FROM {} WHERE off <= %s").format(t), (offset,)).fetchall()
            if gone:
                conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(fresh))
                conn.execute(sql.SQL("CREATE TABLE {} (LIKE {} INCLUDING ALL)").format(fresh, t))
                conn.execute(sql.SQL("INSERT INTO {} SELECT * FROM {} WHERE off > %s").format(fresh, t), (offset,))
                conn.execute(sql.SQL("DROP TABLE {}").format(t))
                conn.execute(sql.SQL("ALTER TABLE {} RENAME TO {}").format(fresh, t))
                conn.execute(sql.SQL("ALTER INDEX {} RENAME TO {}").format(  # its name free for the next time
                    sql.Identifier(f"{self.names.prefix}_snapshots_new_pkey"),
                    sql.Identifier(f"{self.names.prefix}_snapshots_pkey")))
            return gone

        rows = self._run(delete)
        return [f"postgresql:{self.names.prefix}_snapshots/{n}.{o:020d}" for n, o in sorted(rows)]

    def list(self, name: str) -> list[tuple[int, str]]:
        check_snapshot_name(name)
        t = self.names.snapshots
        rows = self._run(lambda conn: conn.execute(sql.SQL("SELECT off FROM {} WHERE name = %s ORDER BY off")
                                                   .format(t), (name,)).fetchall())
        return [(o, f"postgresql:{self.names.prefix}_snapshots/{name}.{o:020d}") for (o,) in rows]

    def close(self) -> None:
        self._session.close()

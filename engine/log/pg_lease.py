"""The active node's lease in the log's database, and the epoch that fences appends (docs/api.md §19).

One row (``<prefix>_lease``): the holder's node name and URL, the epoch, and
when it was last renewed, by the database's clock (``now()``), so no two
machines' clocks are ever compared. The active node renews it every second;
``lease_s`` after the last renewal another node may take it over. A takeover
sets the epoch one higher in the lease row *and* in the log's head row
(:mod:`engine.log.pg_log`), in one transaction: every append checks the head
row's epoch in its own transaction, so an old active that was paused,
partitioned or slow can never append once a takeover committed.

:func:`may_take_over` is the rule, pure; :class:`Lease` runs it in SQL.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import NamedTuple

import psycopg
from psycopg import sql

from engine.core.errors import StorageUnavailable
from engine.log.pg_log import Names, Session, _one, connect, create_schema

logger = logging.getLogger("flowrank.log")

DEFAULT_LEASE_S = 3.0
RENEW_EVERY_S = 1.0


class Holder(NamedTuple):
    """The lease as read: who holds it (None: nobody yet), their URL, the epoch, and the seconds since
    its last renewal by the database's clock (None: never renewed)."""

    node: str | None
    url: str | None
    epoch: int
    age_s: float | None


def may_take_over(holder: Holder, node: str, lease_s: float) -> bool:
    """Whether ``node`` may take the lease: nobody holds it, it holds it itself (a restart), or the
    holder has not renewed it for ``lease_s`` seconds."""
    return holder.node is None or holder.node == node or holder.age_s is None or holder.age_s >= lease_s


class Lease:
    """The lease of one node (``node``: a name unique among the nodes of one log, ``url``: where
    clients reach it, for ``X-FlowRank-Leader``)."""

    def __init__(self, url: str, node: str, advertise_url: str, *, lease_s: float = DEFAULT_LEASE_S,
                 prefix: str = "flowrank"):
        if lease_s <= 0:
            raise ValueError("lease_s must be > 0")
        self.url = url
        self.node = node
        self.advertise_url = advertise_url
        self.lease_s = lease_s
        self.names = Names(prefix)
        self.epoch: int | None = None  # the epoch this node holds (None: it holds none)
        self.takeovers = 0
        self._session = Session(url, "lease: the log's database is unreachable", autocommit=True)
        self._run = self._session.run
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.on_lost: Callable[[Holder], None] | None = None
        with connect(url, autocommit=True) as conn:
            create_schema(conn, self.names)

    def holder(self) -> Holder:
        n = self.names
        row = self._run(lambda c: c.execute(sql.SQL(
            "SELECT holder, url, epoch, extract(epoch FROM now() - renewed_at)::float8 FROM {}").format(n.lease))
            .fetchone())
        return Holder(*_one(row))

    def try_acquire(self) -> int | None:
        """Take the lease when :func:`may_take_over` allows it: the new epoch (one higher, in the lease
        and the log's head row, one transaction), else None."""
        n = self.names

        def acquire(conn):
            with conn.transaction():
                row = _one(conn.execute(sql.SQL("SELECT holder, url, epoch, extract(epoch FROM now() - renewed_at)"
                                                "::float8 FROM {} FOR UPDATE").format(n.lease)).fetchone())
                holder = Holder(*row)
                if not may_take_over(holder, self.node, self.lease_s):
                    return None
                # The head row's lock waits for the appends of the old epoch in flight: once this commits,
                # none of them can. An old writer that is paused (or cut off) mid-append would hold that
                # lock for as long as it stays so: its sessions are ended first (their open transactions
                # roll back; what they had committed stays), and the wait is bounded.
                conn.execute("SET LOCAL lock_timeout = '2s'")
                if holder.node != self.node:
                    conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE "
                                 "datname = current_database() AND application_name = %s AND pid <> pg_backend_pid()",
                                 (n.writer_application,))
                (epoch,) = _one(conn.execute(sql.SQL("UPDATE {} SET epoch = epoch + 1 RETURNING epoch")
                                             .format(n.head)).fetchone())
                conn.execute(sql.SQL("UPDATE {} SET holder = %s, url = %s, epoch = %s, renewed_at = now()")
                             .format(n.lease), (self.node, self.advertise_url, epoch))
                return epoch

        try:
            epoch = self._run(acquire)
        except StorageUnavailable as exc:
            if isinstance(exc.__cause__, psycopg.errors.LockNotAvailable):
                logger.warning("lease: the old writer still holds the log's head row; trying again")
                return None
            raise
        if epoch is not None:
            self.epoch = epoch
            self.takeovers += 1
            logger.warning("lease: node %s holds the log at epoch %d", self.node, epoch)
        return epoch

    def renew(self) -> bool:
        """Renew the lease this node holds; False (and ``epoch`` None) when another node took it."""
        if self.epoch is None:
            return False
        n, epoch = self.names, self.epoch
        rows = self._run(lambda c: c.execute(sql.SQL("UPDATE {} SET renewed_at = now() WHERE holder = %s AND epoch = %s")
                                             .format(n.lease), (self.node, epoch)).rowcount)
        if rows != 1:
            self.epoch = None
            return False
        return True

    def start_renewing(self, on_lost: Callable[[Holder], None]) -> None:
        """Renew every RENEW_EVERY_S seconds on a thread of its own; ``on_lost(holder)`` once, when the
        lease turns out to be another node's (a database that stays unreachable for ``lease_s`` counts
        as lost too: another node may have taken over meanwhile)."""
        self.on_lost = on_lost

        def loop():
            failing_since = None
            import time  # noqa: PLC0415 - the shell's clock: how long renewals have failed

            while not self._stop.wait(RENEW_EVERY_S):
                try:
                    ok = self.renew()
                    failing_since = None
                except StorageUnavailable:
                    failing_since = failing_since or time.monotonic()
                    ok = time.monotonic() - failing_since < self.lease_s
                    if not ok:
                        self.epoch = None
                if not ok:
                    try:
                        holder = self.holder()
                    except StorageUnavailable:
                        holder = Holder(None, None, -1, None)
                    on_lost(holder)
                    return

        self._thread = threading.Thread(target=loop, name="flowrank-lease", daemon=True)
        self._thread.start()

    def release(self) -> None:
        """Let the lease go at once (a clean stop): another node may take over without waiting ``lease_s``."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2 * RENEW_EVERY_S)
        if self.epoch is not None:
            n, epoch = self.names, self.epoch
            try:
                self._run(lambda c: c.execute(sql.SQL("UPDATE {} SET renewed_at = NULL WHERE holder = %s AND epoch = %s")
                                              .format(n.lease), (self.node, epoch)))
            except StorageUnavailable:
                pass
            self.epoch = None
        self._session.close()

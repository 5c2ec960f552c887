"""Fixtures shared by the storage tests: one factory per port implementation."""

from __future__ import annotations

import os
import threading

import pytest

from engine.log import FileSnapshotStore, InMemoryLog, InMemorySnapshotStore, Outbox, SegmentedFileLog

_PREFIXES = iter(range(1, 10**9))


def pg_prefix() -> str:
    """A table prefix of its own for each PostgreSQL log a test opens (one database for the session)."""
    return f"t{os.getpid()}_{next(_PREFIXES)}"


class FsyncCounter:
    """A fault hook that counts calls per op and can fail or stall chosen ops."""

    def __init__(self):
        self.counts: dict[str, int] = {}
        self.fail: dict[str, OSError] = {}
        self.delay: dict[str, float] = {}
        self._lock = threading.Lock()

    def __call__(self, op: str, path: str) -> None:
        with self._lock:
            self.counts[op] = self.counts.get(op, 0) + 1
            exc = self.fail.get(op)
            delay = self.delay.get(op)
        if delay:
            threading.Event().wait(delay)
        if exc is not None:
            raise exc


@pytest.fixture(params=["file", "memory", "postgres"])
def log_factory(request, tmp_path):
    """``open_log(**kw)`` for each EventLog implementation; all closed at teardown. The PostgreSQL
    log reopens the same tables within one test (as the file log reopens its directory)."""
    opened = []
    prefix = pg_prefix() if request.param == "postgres" else None

    def open_log(**kw):
        if request.param == "file":
            kw.setdefault("index_interval", 8)
            log = SegmentedFileLog.open(os.path.join(tmp_path, "log"), **kw)
        elif request.param == "postgres":
            from engine.log.pg_log import PostgresLog  # noqa: PLC0415 - psycopg for these tests only
            log = PostgresLog.open(request.getfixturevalue("pg_log_url"), prefix=prefix, **kw)
        else:
            log = InMemoryLog.open(None, **kw)
        opened.append(log)
        return log

    open_log.kind = request.param
    yield open_log
    for log in opened:
        log.close()


@pytest.fixture(params=["file", "memory", "postgres"])
def store_factory(request, tmp_path):
    prefix = pg_prefix() if request.param == "postgres" else None

    def open_store(**kw):
        if request.param == "file":
            return FileSnapshotStore(os.path.join(tmp_path, "snapshots"), **kw)
        if request.param == "postgres":
            from engine.log.pg_log import PostgresSnapshotStore  # noqa: PLC0415
            return PostgresSnapshotStore(request.getfixturevalue("pg_log_url"), prefix=prefix, **kw)
        return InMemorySnapshotStore(**kw)

    open_store.kind = request.param
    return open_store


@pytest.fixture
def outbox(tmp_path):
    """An empty webhook outbox (engine.log.outbox), closed at teardown."""
    ob = Outbox.open(str(tmp_path / "outbox"))
    yield ob
    ob.close()


@pytest.fixture(scope="session")
def pg_log_url(pg_cluster):
    """One database of the session's PostgreSQL primary + synchronous standby for the storage tests;
    each log or store in it has tables of its own (``pg_prefix``)."""
    return pg_cluster.create_database("flowrank_log_tests")

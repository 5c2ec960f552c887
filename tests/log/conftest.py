"""Fixtures shared by the storage tests: one factory per port implementation."""

from __future__ import annotations

import os
import threading

import pytest

from engine.log import FileSnapshotStore, InMemoryLog, InMemorySnapshotStore, Outbox, SegmentedFileLog


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


@pytest.fixture(params=["file", "memory"])
def log_factory(request, tmp_path):
    """``open_log(**kw)`` for each EventLog implementation; all closed at teardown."""
    opened = []

    def open_log(**kw):
        if request.param == "file":
            kw.setdefault("index_interval", 8)
            log = SegmentedFileLog.open(os.path.join(tmp_path, "log"), **kw)
        else:
            log = InMemoryLog.open(None, **kw)
        opened.append(log)
        return log

    open_log.kind = request.param
    yield open_log
    for log in opened:
        log.close()


@pytest.fixture(params=["file", "memory"])
def store_factory(request, tmp_path):
    def open_store(**kw):
        if request.param == "file":
            return FileSnapshotStore(os.path.join(tmp_path, "snapshots"), **kw)
        return InMemorySnapshotStore(**kw)

    open_store.kind = request.param
    return open_store


@pytest.fixture
def outbox(tmp_path):
    """An empty webhook outbox (engine.log.outbox), closed at teardown."""
    ob = Outbox.open(str(tmp_path / "outbox"))
    yield ob
    ob.close()

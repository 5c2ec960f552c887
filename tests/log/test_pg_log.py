"""engine.log.pg_log beyond the port contract (which tests/log runs against it too): fencing by epoch,
commits whose outcome was lost, readers in other processes, retention and rewrite as tables."""

from __future__ import annotations

import threading

import psycopg
import pytest

from engine.core.errors import StorageUnavailable
from engine.log.pg_log import Fenced, PostgresLog, connect, take_over

from .conftest import pg_prefix


@pytest.fixture
def open_pg(pg_log_url):
    opened = []
    prefix = pg_prefix()

    def open_log(**kw):
        log = PostgresLog.open(pg_log_url, prefix=prefix, **kw)
        opened.append(log)
        return log

    open_log.url = pg_log_url
    open_log.prefix = prefix
    yield open_log
    for log in opened:
        log.close()


def test_a_takeover_fences_the_old_writer_and_keeps_what_it_committed(open_pg):
    old = open_pg()
    assert old.append_batch(["a", "b"]) == [0, 1]
    new = open_pg()  # takes the log over: epoch one higher
    assert new.epoch == old.epoch + 1
    with pytest.raises(Fenced):
        old.append_batch(["never"])
    with pytest.raises(Fenced):  # and stays fenced, failing fast
        old.append_batch(["never again"])
    assert new.append_batch(["c"]) == [2]
    assert list(new.read_from(0)) == [(0, "a"), (1, "b"), (2, "c")]


def test_a_takeover_during_an_append_waits_for_it_and_the_next_one_is_fenced(open_pg):
    """The takeover's update of the head row waits for the append holding it: the append that got there
    first commits (and is read by the new writer), the one after the takeover fails."""
    entered, release = threading.Event(), threading.Event()

    def hook(op, path):
        if op == "fsync" and not release.is_set():
            entered.set()
            release.wait(10)

    old = open_pg(fault_hook=hook)
    got: dict = {}
    t = threading.Thread(target=lambda: got.setdefault("offsets", old.append_batch(["first"])))
    t.start()
    assert entered.wait(10)  # the append holds the head row, not committed yet
    taken: dict = {}
    with connect(open_pg.url, autocommit=True) as conn:
        from engine.log.pg_log import Names  # noqa: PLC0415
        tk = threading.Thread(target=lambda: taken.setdefault("epoch", take_over(conn, Names(open_pg.prefix))))
        tk.start()
        tk.join(0.5)
        assert tk.is_alive()  # waiting on the head row
        release.set()
        t.join(10)
        tk.join(10)
    assert got["offsets"] == [0]
    assert taken["epoch"] == old.epoch + 1
    with pytest.raises(Fenced):
        old.append_batch(["late"])
    reader = open_pg(writer=False)
    assert list(reader.read_from(0)) == [(0, "first")]


def test_a_commit_whose_connection_broke_is_resolved_from_the_log(open_pg, monkeypatch):
    """COMMIT reached the database, the answer was lost: the batch is found in the log and acknowledged."""
    log = open_pg()
    real_commit = psycopg.Connection.commit
    broken = {"n": 0}

    def commit_then_break(self):
        real_commit(self)
        if threading.current_thread().name.startswith("flowrank-pglog-writer") and broken["n"] == 0:
            broken["n"] += 1
            raise psycopg.OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(psycopg.Connection, "commit", commit_then_break)
    assert log.append_batch(["x", "y"]) == [0, 1]
    assert broken["n"] == 1 and log.stats()["unknown_commits"] == 1
    assert log.append_batch(["z"]) == [2]
    assert list(log.read_from(0)) == [(0, "x"), (1, "y"), (2, "z")]


def test_a_commit_that_broke_before_it_took_effect_fails_and_nothing_is_kept(open_pg, monkeypatch):
    log = open_pg()
    assert log.append_batch(["kept"]) == [0]
    real_commit = psycopg.Connection.commit
    broken = {"n": 0}

    def break_instead(self):
        if threading.current_thread().name.startswith("flowrank-pglog-writer") and broken["n"] == 0:
            broken["n"] += 1
            self.close()  # the server rolls the open transaction back
            raise psycopg.OperationalError("server closed the connection unexpectedly")
        real_commit(self)

    monkeypatch.setattr(psycopg.Connection, "commit", break_instead)
    with pytest.raises(StorageUnavailable, match="not in the log"):
        log.append_batch(["lost"])
    assert log.durable_offset() == 1
    assert log.append_batch(["next"]) == [1]
    assert list(log.read_from(0)) == [(0, "kept"), (1, "next")]


def test_a_reader_sees_what_the_writer_committed_and_its_new_segments(open_pg):
    writer = open_pg(segment_bytes=200)
    reader = open_pg(writer=False)
    assert reader.durable_offset() == 0
    with pytest.raises(ValueError):
        reader.append_batch(["no"])
    it = reader.read_from(0)
    for i in range(30):
        writer.append_batch([["r", i, "x" * 20]])
    assert len(writer.segments()) > 3
    assert [o for o, _ in it] == list(range(30))
    assert reader.durable_offset() == 30
    assert reader.segments()[:-1] == writer.segments()[:-1]


def test_retention_drops_the_segment_tables(open_pg):
    log = open_pg(segment_bytes=200)
    for i in range(40):
        log.append_batch([["d", i, "z" * 10]])
    segs = log.segments()
    gone = log.delete_segments_before(segs[2][0])
    assert gone == [segs[0][1], segs[1][1]]
    with connect(open_pg.url, autocommit=True) as conn:
        tables = {r[0] for r in conn.execute("SELECT tablename FROM pg_tables WHERE tablename LIKE %s",
                                             (f"{open_pg.prefix}\\_seg\\_%",))}
    assert {p.split(":", 1)[1] for p in gone}.isdisjoint(tables)
    assert {p.split(":", 1)[1] for _f, p, _s in log.segments()} <= tables
    reopened = open_pg()
    assert reopened.start_offset() == segs[2][0]
    assert [o for o, _ in reopened.read_from(segs[2][0])] == list(range(segs[2][0], 40))


def test_a_rewrite_leaves_no_table_holding_the_old_bytes(open_pg):
    log = open_pg(segment_bytes=200)
    for i in range(20):
        log.append_batch([["e", i, "secret-player" if i % 3 == 0 else "other"]])
    stats = log.rewrite(20, lambda o, r: ["e", r[1], "pseudonym"] if r[2] == "secret-player" else r)
    assert stats.records_changed == 7
    with connect(open_pg.url, autocommit=True) as conn:
        tables = [r[0] for r in conn.execute("SELECT tablename FROM pg_tables WHERE tablename LIKE %s",
                                             (f"{open_pg.prefix}\\_seg\\_%",))]
        for t in tables:
            n = conn.execute(psycopg.sql.SQL("SELECT count(*) FROM {} WHERE position(%s in payload) > 0")
                             .format(psycopg.sql.Identifier(t)), (b"secret-player",)).fetchone()[0]
            assert n == 0, t
    assert log.append_batch(["after"]) == [20]
    assert [r for _o, r in open_pg(writer=False).read_from(0)][:4] == [
        ["e", 0, "pseudonym"], ["e", 1, "other"], ["e", 2, "other"], ["e", 3, "pseudonym"]]


def test_two_appends_in_flight_commit_in_order_and_a_failed_first_fails_the_second(open_pg):
    """in_flight=2: the second transaction's rows go out while the first commits; when the first fails
    the second fails too and the log goes on from what is committed."""
    failing = threading.Event()
    arrived = threading.Event()

    def hook(op, path):
        if op == "fsync" and failing.is_set():
            arrived.set()
            failing.clear()
            raise OSError(5, "injected")

    log = open_pg(fault_hook=hook)
    assert log.append_payloads([b"\xa1a"], at=0) == [0]
    failing.set()
    results: dict = {}

    def append(name, payload, at):
        try:
            results[name] = log.append_payloads([payload], at=at)
        except StorageUnavailable as exc:
            results[name] = exc

    t1 = threading.Thread(target=append, args=("first", b"\xa1b", 1))
    t2 = threading.Thread(target=append, args=("second", b"\xa1c", 2))
    t1.start()
    t2.start()
    t1.join(10)
    t2.join(10)
    assert arrived.is_set()
    assert isinstance(results["first"], StorageUnavailable)
    assert isinstance(results["second"], StorageUnavailable)
    assert log.durable_offset() == log.end_offset() == 1
    assert log.append_payloads([b"\xa1d"], at=1) == [1]
    assert list(log.read_from(0)) == [(0, "a"), (1, "d")]


def test_a_fenced_writer_can_neither_trim_nor_rewrite_the_log(open_pg):
    old = open_pg(segment_bytes=100)
    for i in range(12):
        old.append_batch([["f", i, "x" * 20]])
    new = open_pg(segment_bytes=100)
    segs = new.segments()
    with pytest.raises(Fenced):
        old.delete_segments_before(segs[-1][0])
    with pytest.raises(Fenced):
        old.rewrite(12, lambda o, r: ["f", r[1], "changed"])
    assert new.segments() == segs
    assert [r for _o, r in new.read_from(0)] == [["f", i, "x" * 20] for i in range(12)]
    assert new.delete_segments_before(segs[-1][0])  # the new writer's retention works

"""engine.log.pg_lease: the rule (pure) and the lease in the log's database (takeover, renewal, fencing)."""

from __future__ import annotations

import threading
import time

import pytest

from engine.log.pg_lease import Holder, Lease, may_take_over
from engine.log.pg_log import Fenced, PostgresLog

from .conftest import pg_prefix


@pytest.mark.parametrize(("holder", "allowed"), [
    (Holder(None, None, 0, None), True),  # nobody ever held it
    (Holder("a", "http://a", 3, 0.5), False),  # another node renewed it recently
    (Holder("a", "http://a", 3, 2.99), False),
    (Holder("a", "http://a", 3, 3.0), True),  # not renewed for lease_s
    (Holder("b", "http://b", 3, 0.1), True),  # this node itself (a restart)
    (Holder("a", "http://a", 3, None), True),  # released by a clean stop
])
def test_may_take_over(holder, allowed):
    assert may_take_over(holder, "b", 3.0) is allowed


def test_a_node_takes_the_lease_only_after_it_expired_and_the_old_writer_is_fenced(pg_log_url):
    prefix = pg_prefix()
    a = Lease(pg_log_url, "node-a", "http://a:8000", lease_s=0.6, prefix=prefix)
    b = Lease(pg_log_url, "node-b", "http://b:8000", lease_s=0.6, prefix=prefix)
    epoch_a = a.try_acquire()
    assert epoch_a is not None and a.holder().node == "node-a" and a.holder().url == "http://a:8000"
    log_a = PostgresLog.open(pg_log_url, epoch=epoch_a, prefix=prefix)
    try:
        assert log_a.append_batch(["from a"]) == [0]
        assert b.try_acquire() is None  # a renewed it just now
        assert a.renew()
        time.sleep(0.8)  # a paused: no renewal for longer than the lease
        epoch_b = b.try_acquire()
        assert epoch_b == epoch_a + 1
        assert not a.renew() and a.epoch is None  # a learns it lost the lease
        with pytest.raises(Fenced):
            log_a.append_batch(["from a, too late"])
        log_b = PostgresLog.open(pg_log_url, epoch=epoch_b, prefix=prefix)
        try:
            assert log_b.append_batch(["from b"]) == [1]
            assert list(log_b.read_from(0)) == [(0, "from a"), (1, "from b")]
        finally:
            log_b.close()
    finally:
        log_a.close()
        a.release()
        b.release()


def test_renewing_keeps_the_lease_and_a_lost_lease_is_reported_once(pg_log_url):
    prefix = pg_prefix()
    a = Lease(pg_log_url, "node-a", "http://a", lease_s=1.5, prefix=prefix)
    b = Lease(pg_log_url, "node-b", "http://b", lease_s=1.5, prefix=prefix)
    assert a.try_acquire() is not None
    lost: list = []
    done = threading.Event()
    a.start_renewing(lambda h: (lost.append(h), done.set()))
    try:
        time.sleep(2.5)  # longer than the lease: the renewals keep it
        assert b.try_acquire() is None
        a._stop.set()  # a stops renewing (paused)
        time.sleep(1.7)
        assert b.try_acquire() is not None
    finally:
        a.release()
        b.release()
    assert not done.is_set()  # the stopped loop reported nothing


def test_a_clean_release_lets_another_node_in_at_once(pg_log_url):
    prefix = pg_prefix()
    a = Lease(pg_log_url, "node-a", "http://a", lease_s=30, prefix=prefix)
    b = Lease(pg_log_url, "node-b", "http://b", lease_s=30, prefix=prefix)
    assert a.try_acquire() is not None
    assert b.try_acquire() is None
    a.release()
    assert b.try_acquire() is not None
    b.release()


def test_the_renewal_loop_reports_a_takeover(pg_log_url):
    prefix = pg_prefix()
    a = Lease(pg_log_url, "node-a", "http://a", lease_s=0.5, prefix=prefix)
    b = Lease(pg_log_url, "node-b", "http://b", lease_s=0.5, prefix=prefix)
    assert a.try_acquire() is not None
    # b takes over while a's loop is between renewals: a forced takeover through an expired lease
    time.sleep(0.6)
    assert b.try_acquire() is not None
    lost: list = []
    done = threading.Event()
    a.start_renewing(lambda h: (lost.append(h), done.set()))
    assert done.wait(5)
    assert lost[0].node == "node-b" and a.epoch is None
    a.release()
    b.release()


def test_a_takeover_ends_a_paused_writer_that_holds_the_head_row(pg_log_url):
    """The old active stopped mid-append (its head update done, COMMIT not sent): the takeover ends its
    session rather than waiting for it, the append fails without being acknowledged (it is not in the
    log), and the old writer is fenced from then on."""
    prefix = pg_prefix()
    a = Lease(pg_log_url, "node-a", "http://a", lease_s=0.5, prefix=prefix)
    b = Lease(pg_log_url, "node-b", "http://b", lease_s=0.5, prefix=prefix)
    stalled, release = threading.Event(), threading.Event()

    def hook(op, path):
        if op == "fsync" and not release.is_set():
            stalled.set()
            release.wait(20)

    log_a = PostgresLog.open(pg_log_url, epoch=a.try_acquire(), prefix=prefix, fault_hook=hook)
    got: dict = {}

    def append():
        try:
            got["ok"] = log_a.append_batch(["stalled"])
        except Exception as exc:  # surfaced below
            got["error"] = exc

    t = threading.Thread(target=append)
    t.start()
    try:
        assert stalled.wait(10)
        time.sleep(0.6)  # the lease expires while a holds the head row
        began = time.monotonic()
        epoch_b = b.try_acquire()
        assert epoch_b is not None and time.monotonic() - began < 3
    finally:
        release.set()
        t.join(30)
    assert "error" in got, got  # never acknowledged
    with pytest.raises(Fenced):
        log_a.append_batch(["late"])
    log_b = PostgresLog.open(pg_log_url, epoch=epoch_b, prefix=prefix)
    try:
        assert list(log_b.read_from(0)) == []
        assert log_b.append_batch(["b"]) == [0]
    finally:
        log_b.close()
        log_a.close()
        a.release()
        b.release()

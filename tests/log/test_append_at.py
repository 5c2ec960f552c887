"""Appends at a named offset (``append_payloads(payloads, at=...)``, engine.log.port):
the log keeps batches in the order their offsets say, holds one that arrives early,
and never keeps a batch whose predecessor it lost (issue 29 item 4: two appends
in flight)."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from engine.core.errors import StorageUnavailable
from engine.log.framing import pack_payload
from engine.log.segment_log import select_group


def _payloads(tag: str, n: int) -> list[bytes]:
    return [pack_payload([tag, i]) for i in range(n)]


class _R:
    """A queued request as select_group sees it."""

    def __init__(self, at, count, since=0.0):
        self.at, self.count, self.since = at, count, since

    def __repr__(self):
        return f"R(at={self.at}, count={self.count})"


# ------------------------------------------------------------ the pure rule


def test_select_group_puts_an_early_arrival_back_in_offset_order():
    a, b, c = _R(10, 2), _R(12, 3), _R(15, 1)
    group, failed, held = select_group([c, b, a], 10, False, 0.0)
    assert group == [a, b, c] and failed == [] and held == []


def test_select_group_holds_what_does_not_fit_yet_and_fails_what_has_passed():
    passed, ahead, now = _R(8, 2), _R(20, 1), _R(10, 1)
    group, failed, held = select_group([passed, ahead, now], 10, False, 0.0)
    assert group == [now] and [r for r, _ in failed] == [passed] and held == [ahead]
    assert "offset 8" in failed[0][1]


def test_select_group_after_a_failed_group_fails_every_later_offset():
    later = _R(14, 2)
    group, failed, held = select_group([later], 10, True, 0.0)
    assert group == [] and [r for r, _ in failed] == [later] and held == []
    assert "before it failed" in failed[0][1]
    # an unconditional append (a new chain's first) still goes
    free = _R(None, 2)
    group, failed, held = select_group([free], 10, True, 0.0)
    assert group == [free] and failed == [] and held == []


def test_select_group_times_a_held_request_out():
    late = _R(14, 1, since=0.0)
    assert select_group([late], 10, False, 1.0, hold_s=5.0)[2] == [late]
    group, failed, held = select_group([late], 10, False, 6.0, hold_s=5.0)
    assert [r for r, _ in failed] == [late] and held == []


def test_select_group_mixes_unconditional_and_positioned_requests():
    free, at = _R(None, 3), _R(13, 2)
    group, failed, held = select_group([at, free], 10, False, 0.0)
    assert group == [free, at] and not failed and not held


# ------------------------------------------------------- both implementations


def test_batches_arriving_out_of_order_are_kept_in_offset_order(log_factory):
    log = log_factory()
    assert log.append_payloads(_payloads("x", 2)) == [0, 1]
    with ThreadPoolExecutor(2) as pool:
        late = pool.submit(log.append_payloads, _payloads("b", 3), 4)  # arrives first, must wait for "a"
        time.sleep(0.05)
        assert not late.done()
        early = pool.submit(log.append_payloads, _payloads("a", 2), 2)
        assert early.result(5) == [2, 3]
        assert late.result(5) == [4, 5, 6]
    assert [r[0] for _, r in log.read_from(0)] == ["x", "x", "a", "a", "b", "b", "b"]


def test_an_append_at_a_passed_offset_fails_and_keeps_nothing(log_factory):
    log = log_factory()
    log.append_payloads(_payloads("x", 3))
    with pytest.raises(StorageUnavailable):
        log.append_payloads(_payloads("y", 1), 1)
    assert log.end_offset() == 3 and [r[0] for _, r in log.read_from(0)] == ["x"] * 3


@pytest.mark.parametrize("second_arrives", ["before the failure", "after the failure"])
def test_when_the_first_of_two_appends_fails_the_second_fails_too(log_factory, second_arrives):
    """The second batch was decided on top of the first: the log must not keep it
    where the first should be, whether it arrived before or after the failure."""
    entered, release = threading.Event(), threading.Event()
    armed = [False]

    def hook(op, path):
        if armed[0] and op == "write":
            armed[0] = False
            entered.set()
            release.wait(5)
            raise OSError(5, "injected write failure")

    log = log_factory(fault_hook=hook)
    log.append_payloads(_payloads("x", 2))
    armed[0] = True
    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(log.append_payloads, _payloads("a", 2), 2)
        assert entered.wait(5)  # the first batch is inside its write (the file log's writer, or the caller)
        if second_arrives == "before the failure":
            second = pool.submit(log.append_payloads, _payloads("b", 1), 4)
            time.sleep(0.05)
            release.set()
        else:
            release.set()
            with pytest.raises(StorageUnavailable):
                first.result(5)
            second = pool.submit(log.append_payloads, _payloads("b", 1), 4)
        with pytest.raises(StorageUnavailable):
            first.result(5)
        with pytest.raises(StorageUnavailable):
            second.result(5)
    assert log.end_offset() == 2 and [r[0] for _, r in log.read_from(0)] == ["x", "x"]
    # the fault cleared: the next chain starts where the log is (unconditional), then at offsets again
    assert log.append_payloads(_payloads("c", 1)) == [2]
    assert log.append_payloads(_payloads("d", 2), 3) == [3, 4]
    assert [r[0] for _, r in log.read_from(0)] == ["x", "x", "c", "d", "d"]


def test_concurrent_appends_at_offsets_share_fsyncs(tmp_path):
    """Group commit: batches waiting while an fsync runs go into the next one."""
    from engine.log import SegmentedFileLog
    from tests.log.conftest import FsyncCounter

    hook = FsyncCounter()
    hook.delay["fsync"] = 0.02
    with SegmentedFileLog.open(str(tmp_path / "log"), fault_hook=hook) as log:
        n, size = 40, 3
        with ThreadPoolExecutor(8) as pool:
            got = list(pool.map(lambda i: log.append_payloads(_payloads(f"b{i}", size), i * size), range(n)))
        assert got == [list(range(i * size, (i + 1) * size)) for i in range(n)]
        assert [r[0] for _, r in log.read_from(0)] == [f"b{i}" for i in range(n) for _ in range(size)]
        assert log.stats()["fsyncs"] < n

"""engine.log.follower: the log read by a process that does not write it.

The follower serves exactly the records the writer made durable (never one
written and not yet fsync'd, never one a failed fsync cut back), follows the
writer across segment rolls, rewrites and retention, and refuses to write.
"""

from __future__ import annotations

import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.core.errors import LogCorruption, StorageUnavailable
from engine.log import SegmentedFileLog
from engine.log.follower import LogFollower
from tests.log.conftest import FsyncCounter


def _all(log) -> list:
    return list(log.read_from(log.start_offset()))


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(st.integers(0, 300), min_size=1, max_size=12), min_size=1, max_size=12),
       st.integers(60, 400), st.integers(1, 5))
def test_a_follower_reads_what_the_writer_appended_across_segment_rolls(tmp_path_factory, batches, segment, interval):
    directory = tmp_path_factory.mktemp("log")
    with SegmentedFileLog.open(directory, segment_bytes=segment, index_interval=interval, mark=True) as log:
        follower = LogFollower(directory, index_interval=interval)
        for i, batch in enumerate(batches):
            log.append_batch([["r", i, v, "x" * (v % 7)] for v in batch])
            if i % 3 == 0:  # read now and then: the follower extends what it knew
                assert _all(follower) == _all(log)
                start = max(0, log.end_offset() - 5)
                assert list(follower.read_from(start, 2)) == list(log.read_from(start, 2))
        assert _all(follower) == _all(log)
        assert follower.end_offset() == follower.durable_offset() == log.durable_offset()
        assert follower.segments() == log.segments()


def test_a_record_written_but_not_yet_durable_is_not_served(tmp_path):
    hook = FsyncCounter()
    gate, entered = threading.Event(), threading.Event()

    def stall(op, path):
        hook(op, path)
        if op == "fsync" and not gate.is_set():
            entered.set()
            gate.wait(10)

    with SegmentedFileLog.open(tmp_path, fault_hook=stall, mark=True) as log:
        gate.set()
        log.append_batch(["a", "b"])
        follower = LogFollower(tmp_path)
        gate.clear()
        t = threading.Thread(target=log.append_batch, args=(["c"],))
        t.start()
        assert entered.wait(10)  # "c" is in the file, its fsync not done
        assert follower.end_offset() == 2 and _all(follower) == [(0, "a"), (1, "b")]
        gate.set()
        t.join()
        assert _all(follower) == [(0, "a"), (1, "b"), (2, "c")]


def test_a_record_a_failed_fsync_cut_back_is_never_served_and_its_offset_is_reused(tmp_path):
    hook = FsyncCounter()
    with SegmentedFileLog.open(tmp_path, fault_hook=hook, mark=True) as log:
        log.append_batch(["a"])
        follower = LogFollower(tmp_path)
        hook.fail["fsync"] = OSError(5, "EIO")
        with pytest.raises(StorageUnavailable):
            log.append_batch(["lost"])
        assert _all(follower) == [(0, "a")]
        del hook.fail["fsync"]
        log.append_batch(["kept"])
        assert _all(follower) == [(0, "a"), (1, "kept")]


def test_a_rewrite_and_retention_make_the_follower_scan_again(tmp_path):
    with SegmentedFileLog.open(tmp_path, segment_bytes=64, index_interval=2, mark=True) as log:
        for i in range(12):
            log.append_batch([f"r{i}", f"s{i}"])
        follower = LogFollower(tmp_path, index_interval=2)
        assert _all(follower) == _all(log)
        log.rewrite(10, lambda offset, rec: rec.upper() if offset % 3 == 0 else rec)
        assert _all(follower) == _all(log) and follower.read_from(0).__next__() == (0, "R0")
        deleted = log.delete_segments_before(9)
        assert deleted and follower.start_offset() == log.start_offset() > 0
        with pytest.raises(ValueError):
            follower.read_from(0)
        log.append_batch(["last"])
        assert _all(follower) == _all(log)


def test_a_follower_does_not_write_and_needs_a_writer_with_a_mark(tmp_path):
    with SegmentedFileLog.open(tmp_path / "plain") as log:
        log.append_batch(["a"])
        with pytest.raises(LogCorruption):
            LogFollower(tmp_path / "plain")
    with SegmentedFileLog.open(tmp_path / "marked", mark=True) as log:
        log.append_batch(["a"])
        follower = LogFollower(tmp_path / "marked")
        for call in (lambda: follower.append_batch(["x"]), lambda: follower.append_payloads([b"x"]),
                     lambda: follower.rewrite(1, lambda o, r: r), lambda: follower.delete_segments_before(1)):
            with pytest.raises(ValueError):
                call()
        assert _all(follower) == [(0, "a")]

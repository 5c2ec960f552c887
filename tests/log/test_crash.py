"""Crash tests: a child process is SIGKILLed at chosen points; the parent
reopens and checks that every acknowledged record survives exactly once."""

from __future__ import annotations

import os
import random
import time

import pytest

from engine.log import FileSnapshotStore, SegmentedFileLog
from tests.child_process import Child

CHILD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "crash_child.py")


def acked_records(lines):
    """{offset: id} for every ACK line that was printed completely."""
    acked = {}
    for line in lines:
        parts = line.split(" ")
        if parts[0] != "ACK" or len(parts) < 3:
            continue
        first = int(parts[1])
        ids = parts[2:]
        for k, ident in enumerate(ids):
            acked[first + k] = ident
    return acked


def check_log_after_crash(directory, acked):
    with SegmentedFileLog.open(directory) as log:
        records = list(log.read_from(0))
        assert [o for o, _ in records] == list(range(len(records)))
        ids = [r[2] for _o, r in records]
        assert len(ids) == len(set(ids)), "a record appears twice"
        by_offset = dict((o, r[2]) for o, r in records)
        for offset, ident in acked.items():
            assert by_offset.get(offset) == ident, (offset, ident)
        # every batch is whole: ids of one batch are contiguous and complete
        for o, ident in by_offset.items():
            r = int(ident.rsplit("-r", 1)[1])
            if r > 0:
                assert by_offset.get(o - 1) == ident.rsplit("-r", 1)[0] + f"-r{r - 1}"
        assert log.append_batch([["s", "board", "after-crash", "p", 0, 0, 0, 0]]) == [len(records)]
        return len(records)


# ------------------------------------------------------ the log in PostgreSQL


def check_pg_log_after_crash(url, acked):
    """The PostgreSQL log after its writer was SIGKILLed: opened again (a takeover, epoch one higher), every
    acknowledged offset holds its record byte for byte, offsets are dense from 0, batches whole, no record
    twice, and appends continue at the end (across segment tables: 4 KiB segments)."""
    from engine.log.framing import pack_payload
    from engine.log.pg_log import PostgresLog

    with PostgresLog.open(url, prefix="crash", segment_bytes=4096) as log:
        records = list(log.read_from(0))
        assert [o for o, _ in records] == list(range(len(records)))
        assert log.durable_offset() == log.end_offset() == len(records)
        ids = [r[2] for _o, r in records]
        assert len(ids) == len(set(ids)), "a record appears twice"
        by_offset = dict(records)
        for offset, ident in acked.items():
            b = int(ident.split("-b")[1].split("-")[0])
            assert pack_payload(by_offset.get(offset)) == pack_payload(["s", "board", ident, "p", b, 0, 0, 0]), offset
        for o, rec in by_offset.items():
            ident = rec[2]
            r = int(ident.rsplit("-r", 1)[1])
            if r > 0:
                assert by_offset[o - 1][2] == ident.rsplit("-r", 1)[0] + f"-r{r - 1}"
        if len(records) > 200:  # about 100 records a 4 KiB segment
            assert len(log.segments()) > 1
        assert log.append_batch([["s", "board", "after-crash", "p", 0, 0, 0, 0]]) == [len(records)]
        assert log.append_batch([["s", "board", "after-crash-2", "p", 0, 0, 0, 0]] * 3) == [
            len(records) + 1, len(records) + 2, len(records) + 3]
    with PostgresLog.open(url, prefix="crash", writer=False) as reader:
        assert reader.durable_offset() == len(records) + 4
        return len(records)


@pytest.mark.parametrize("block_at", [1, 7, 40])
def test_pg_kill_with_a_transaction_open_before_its_commit(pg_url, block_at):
    """SIGKILL while a group's rows are sent and the head row is updated (locked), COMMIT not sent; the
    second group in flight waits on the head row. Postgres aborts both when the connections drop."""
    with Child(CHILD, "pglog", pg_url, "crash", block_at, 3, timeout=30) as child:
        child.read_until(lambda line: line == "BLOCKED")
        time.sleep(0.1)
        child.kill()
    acked = acked_records(child.lines)
    if block_at > 1:
        assert acked
    total = check_pg_log_after_crash(pg_url, acked)
    assert total >= len(acked)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_pg_kill_at_a_random_moment_while_appending(pg_url, seed):
    rng = random.Random(seed)
    with Child(CHILD, "pglog", pg_url, "crash", 0, 4, timeout=30) as child:
        child.read_until(lambda line: line.startswith("ACK"))
        time.sleep(rng.uniform(0.2, 0.8))
        child.kill()
    acked = acked_records(child.lines)
    assert len(acked) > 10, "the child acknowledged almost nothing"
    check_pg_log_after_crash(pg_url, acked)


@pytest.mark.parametrize("block_at", [1, 7, 40])
def test_kill_after_write_before_fsync(tmp_path, block_at):
    with Child(CHILD, "log", tmp_path, block_at, 3) as child:
        child.read_until(lambda line: line == "BLOCKED")
        time.sleep(0.05)
        child.kill()
    acked = acked_records(child.lines)
    if block_at > 1:
        assert acked  # the groups fsync'd before the block were acknowledged
    total = check_log_after_crash(tmp_path, acked)
    assert total >= len(acked)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_kill_at_a_random_moment_while_appending(tmp_path, seed):
    rng = random.Random(seed)
    with Child(CHILD, "log", tmp_path, 0, 4) as child:
        child.read_until(lambda line: line.startswith("ACK"))
        time.sleep(rng.uniform(0.05, 0.4))
        child.kill()
    acked = acked_records(child.lines)
    assert acked, "the child acknowledged nothing"
    check_log_after_crash(tmp_path, acked)


@pytest.mark.parametrize("point, expected", [
    ("snapshot.write", 10), ("snapshot.fsync", 10), ("snapshot.rename", 10), ("snapshot.dirsync", 20),
])
def test_kill_during_snapshot_save_leaves_old_or_new_never_corrupt(tmp_path, point, expected):
    with Child(CHILD, "snap", tmp_path, point) as child:
        child.read_until(lambda line: line == "BLOCKED")
        child.kill()
    assert "SAVED 10" in child.lines
    offset, value = FileSnapshotStore(tmp_path).load_latest("shard-1")
    assert offset == expected
    assert value == {"state": "old" if expected == 10 else "new", "rows": list(range(1000 if expected == 10 else 2000))}
    assert not [n for n in os.listdir(tmp_path) if ".tmp." in n]  # the stale temp was cleaned up

"""EventLog.rewrite (issue 28 item 2): records before a position replaced in
place, offsets kept, atomically.

Contract tests run against both implementations (``log_factory``); the rest
are SegmentedFileLog's: the files (header, framing, index), the manifest
protocol failing at every step (a raised fault, a copy of the directory as a
crash would leave it, a SIGKILLed child), and appends and reads going on
during a rewrite.
"""

from __future__ import annotations

import errno
import os
import shutil
import textwrap
import threading

import pytest

from engine.core.errors import LogCorruption, StorageUnavailable
from engine.log import InMemoryLog, RewriteStats, SegmentedFileLog
from engine.log.framing import SEGMENT_HEADER_SIZE, encode_record, pack_payload, parse_frames
from engine.log.segment_log import REWRITE_MANIFEST, REWRITE_SUFFIX
from tests.child_process import Child

from .conftest import FsyncCounter

N = 60
BEFORE = 40
ERASED = "p3"


def record(i: int) -> list:
    return ["s", "board", f"evt-{i}", f"p{i % 5}", i]


def pseudonymise(offset: int, rec: object) -> object:
    """The erasure of player p3: its id and its events' ids get pseudonyms
    (longer than the originals, so segment sizes change). Idempotent."""
    assert isinstance(rec, list)
    if rec[3] != ERASED:
        return rec
    return ["s", "board", f"anon-evt-{offset:06d}", "anon-7f3a9c", rec[4]]


OLD = [record(i) for i in range(N)]
NEW = [pseudonymise(i, r) if i < BEFORE else r for i, r in enumerate(OLD)]


def fill(log, n: int = N, batch: int = 3) -> None:
    for i in range(0, n, batch):
        log.append_batch(OLD[i:i + batch])


def read_all(log, offset: int = 0, chunk: int = 4096) -> list:
    return list(log.read_from(offset, chunk_records=chunk))


def open_file_log(directory, **kw) -> SegmentedFileLog:
    kw.setdefault("segment_bytes", 300)
    kw.setdefault("index_interval", 4)
    return SegmentedFileLog.open(directory, **kw)


def leftovers(directory) -> list[str]:
    return sorted(n for n in os.listdir(directory) if n.endswith(REWRITE_SUFFIX) or n.startswith(REWRITE_MANIFEST))


def changed_segments(log) -> int:
    """How many of ``log``'s segments hold a record the erasure changes."""
    firsts = [first for first, _path, _size in log.segments()]
    return len({max(f for f in firsts if f <= i) for i in range(BEFORE) if OLD[i] != NEW[i]})


# ------------------------------------------------------------ contract


def test_records_before_are_replaced_and_offsets_kept(log_factory):
    log = log_factory(segment_bytes=300)
    fill(log)
    expected_segments = changed_segments(log)
    stats = log.rewrite(BEFORE, pseudonymise)
    assert isinstance(stats, RewriteStats)
    assert stats.records_changed == sum(a != b for a, b in zip(OLD, NEW)) == 8
    assert stats.segments_rewritten == expected_segments
    assert read_all(log) == list(enumerate(NEW))
    assert read_all(log, chunk=3) == list(enumerate(NEW))
    for offset in (0, 3, 17, 39, 40, 59):
        assert read_all(log, offset) == list(enumerate(NEW))[offset:]
    assert log.end_offset() == log.durable_offset() == N
    # read_where finds the new bytes, not the old
    head = pack_payload(NEW[3])[:16]  # fixarray(5), "s", "board", str(15) "anon-e"
    assert [o for o, _r in log.read_where(0, head)] == [i for i in range(BEFORE) if i % 5 == 3]
    assert log.read_where(0, pack_payload(OLD[3])) == []  # the old record's bytes are gone
    assert log.read_where(0, pack_payload(OLD[43])) == [(43, OLD[43])]  # at or after `before`: kept
    assert log.append_batch(["after"]) == [N]
    assert read_all(log, N - 1) == [(N - 1, NEW[N - 1]), (N, "after")]


def test_fn_sees_every_record_below_before_once_in_order(log_factory):
    log = log_factory(segment_bytes=300)
    fill(log)
    seen = []

    def spy(offset, rec):
        seen.append((offset, rec))
        return rec

    assert log.rewrite(BEFORE, spy) == RewriteStats(0, 0, 0)
    assert seen == list(enumerate(OLD))[:BEFORE]
    seen.clear()
    assert log.rewrite(10**9, spy) == RewriteStats(0, 0, 0)  # clamped to the durable end
    assert seen == list(enumerate(OLD))
    seen.clear()
    assert log.rewrite(0, spy) == RewriteStats(0, 0, 0)
    assert seen == []


def test_unchanged_means_the_same_object_or_the_same_bytes(log_factory):
    log = log_factory(segment_bytes=300)
    fill(log)
    segments = log.segments()
    assert log.rewrite(BEFORE, lambda o, r: list(r)) == RewriteStats(0, 0, 0)  # equal copies: nothing to write
    assert log.segments() == segments
    assert read_all(log) == list(enumerate(OLD))


def test_a_second_rewrite_with_the_same_fn_changes_nothing(log_factory):
    log = log_factory(segment_bytes=300)
    fill(log)
    log.rewrite(BEFORE, pseudonymise)
    assert log.rewrite(BEFORE, pseudonymise) == RewriteStats(0, 0, 0)
    assert read_all(log) == list(enumerate(NEW))


def test_rewrite_inside_the_active_segment_rolls_it_first(log_factory):
    log = log_factory()  # one big segment: the active one holds everything
    fill(log)
    assert len(log.segments()) == 1
    stats = log.rewrite(BEFORE, pseudonymise)
    assert stats.segments_rewritten == 1
    segs = log.segments()
    assert [first for first, _p, _s in segs] == [0, N]  # closed before the rewrite; appends go on in the new one
    assert log.append_batch(["x", "y"]) == [N, N + 1]
    assert read_all(log) == list(enumerate(NEW + ["x", "y"]))
    assert stats.bytes_written == segs[0][2]


def test_records_after_retention_start_at_the_oldest_kept(log_factory):
    log = log_factory(segment_bytes=300)
    fill(log)
    log.delete_segments_before(20)
    start = log.start_offset()
    assert 0 < start <= 20
    seen = []
    log.rewrite(BEFORE, lambda o, r: seen.append(o) or pseudonymise(o, r))
    assert seen == list(range(start, BEFORE))
    assert read_all(log, start) == list(enumerate(NEW))[start:]
    assert log.delete_segments_before(BEFORE) and log.start_offset() <= BEFORE  # retention still works


@pytest.mark.parametrize("failure", ["fn raises", "unencodable"])
def test_a_failing_fn_changes_nothing(log_factory, failure):
    log = log_factory(segment_bytes=300)
    fill(log)

    def fn(offset, rec):
        if offset == 33:
            if failure == "fn raises":
                raise KeyError("boom")
            return object()
        return pseudonymise(offset, rec)

    with pytest.raises(KeyError if failure == "fn raises" else TypeError):
        log.rewrite(BEFORE, fn)
    assert read_all(log) == list(enumerate(OLD))
    assert log.rewrite(BEFORE, pseudonymise).records_changed == 8
    if log_factory.kind == "file":
        assert leftovers(log.directory) == []


def test_a_write_fault_changes_nothing(log_factory):
    hook = FsyncCounter()
    log = log_factory(segment_bytes=300, fault_hook=hook)
    fill(log)
    hook.fail["rewrite.write"] = OSError(errno.ENOSPC, "No space left on device")
    with pytest.raises(StorageUnavailable):
        log.rewrite(BEFORE, pseudonymise)
    assert read_all(log) == list(enumerate(OLD))
    hook.fail.clear()
    assert log.rewrite(BEFORE, pseudonymise).records_changed == 8
    assert read_all(log) == list(enumerate(NEW))


def test_rewrite_of_a_closed_log_is_refused(log_factory):
    log = log_factory()
    fill(log)
    log.close()
    with pytest.raises(ValueError):
        log.rewrite(BEFORE, pseudonymise)


# --------------------------------------------------------------- files


def segment_bytes_on_disk(log) -> dict[int, bytes]:
    out = {}
    for first, path, _size in log.segments():
        with open(path, "rb") as f:
            out[first] = f.read()
    return out


def frames(data: bytes) -> list[bytes]:
    result = parse_frames(data, SEGMENT_HEADER_SIZE, len(data), len(data), keep=False)
    assert result.problem is None
    ends = result.starts[1:] + [result.end]
    return [data[s:e] for s, e in zip(result.starts, ends)]


def test_rewritten_files_keep_header_and_framing(tmp_path):
    with open_file_log(tmp_path) as log:
        fill(log)
        before = segment_bytes_on_disk(log)
        log.rewrite(BEFORE, pseudonymise)
        after = segment_bytes_on_disk(log)
        assert sorted(after) == sorted(before)
        assert [(f, p, s) for f, p, s in log.segments()] == [(f, p, os.path.getsize(p)) for f, p, _s in log.segments()]
        rewritten = 0
        for first, old in before.items():
            new = after[first]
            assert new[:SEGMENT_HEADER_SIZE] == old[:SEGMENT_HEADER_SIZE]
            old_frames, new_frames = frames(old), frames(new)
            assert len(new_frames) == len(old_frames)
            for k, (a, b) in enumerate(zip(old_frames, new_frames)):
                offset = first + k
                assert b == (a if NEW[offset] == OLD[offset] else encode_record(NEW[offset]))
            rewritten += new != old
        assert rewritten == changed_segments(log)
        assert leftovers(tmp_path) == []
    with open_file_log(tmp_path) as log:  # every record verifies on open
        assert read_all(log) == list(enumerate(NEW))


def test_index_and_reads_match_the_new_files(tmp_path):
    with open_file_log(tmp_path, index_interval=3) as log:
        fill(log)
        log.rewrite(BEFORE, pseudonymise)
        expected = list(enumerate(NEW))
        for offset in range(N):
            assert read_all(log, offset, chunk=2) == expected[offset:], offset
        head = b"\x95\xa1s\xa5board"
        for offset in range(0, N, 7):
            assert log.read_where(offset, head) == expected[offset:]
        reopened_segments = log.segments()
    with open_file_log(tmp_path, index_interval=3) as log:
        assert log.segments() == reopened_segments


def test_the_header_keeps_the_segment_record_format(tmp_path):
    with open_file_log(tmp_path, record_format=1) as log:
        fill(log)
    with open_file_log(tmp_path, record_format=2) as log:
        log.rewrite(BEFORE, pseudonymise)
        formats = dict(log.record_formats())
        assert all(fmt == 1 for first, fmt in formats.items() if first < N)
        assert read_all(log) == list(enumerate(NEW))


def test_the_hook_sees_every_step(tmp_path):
    hook = FsyncCounter()
    with open_file_log(tmp_path, fault_hook=hook) as log:
        fill(log)
        n = changed_segments(log)
        hook.counts.clear()
        log.rewrite(BEFORE, pseudonymise)
    assert {op: c for op, c in hook.counts.items() if op.startswith("rewrite.")} == {
        "rewrite.write": n, "rewrite.fsync": n, "rewrite.manifest.write": 1, "rewrite.manifest.fsync": 1,
        "rewrite.dirsync": 4, "rewrite.manifest.rename": 1, "rewrite.rename": n, "rewrite.manifest.delete": 1}


# ---------------------------------------------------------- crash tests


#: Every step of a rewrite of 3+ segments, in order, as (hook op, nth call);
#: ``True`` after the commit point (the manifest's rename).
STEPS = [
    ("rewrite.write", 1, False), ("rewrite.fsync", 1, False), ("rewrite.write", 2, False),
    ("rewrite.fsync", 2, False), ("rewrite.manifest.write", 1, False), ("rewrite.manifest.fsync", 1, False),
    ("rewrite.dirsync", 1, False), ("rewrite.manifest.rename", 1, False),
    ("rewrite.dirsync", 2, True), ("rewrite.rename", 1, True), ("rewrite.rename", 2, True),
    ("rewrite.rename", 3, True), ("rewrite.dirsync", 3, True), ("rewrite.manifest.delete", 1, True),
    ("rewrite.dirsync", 4, True),
]


class FailAt:
    """A fault hook failing the ``nth`` call of ``op`` (and every later one)."""

    def __init__(self, op: str, nth: int):
        self.op, self.nth, self.calls = op, nth, 0

    def __call__(self, op: str, path: str) -> None:
        if op == self.op:
            self.calls += 1
            if self.calls >= self.nth:
                raise OSError(errno.EIO, f"injected {op} #{self.calls}")


def check_reopened(directory, committed: bool) -> None:
    """Reopen (a new SegmentedFileLog.open): the range is all old or all new,
    offsets unchanged, nothing left over; a second rewrite completes."""
    with open_file_log(directory) as log:
        assert leftovers(directory) == []
        got = read_all(log)
        assert [o for o, _r in got] == list(range(N))
        assert [r for _o, r in got] == (NEW if committed else OLD)
        stats = log.rewrite(BEFORE, pseudonymise)
        assert (stats.records_changed == 0) == committed
        assert read_all(log) == list(enumerate(NEW))
        assert log.append_batch(["after"]) == [N]
    with open_file_log(directory) as log:
        assert read_all(log) == list(enumerate(NEW + ["after"]))


@pytest.mark.parametrize("op,nth,committed", STEPS, ids=[f"{op}#{n}" for op, n, _c in STEPS])
def test_fault_at_each_step_then_reopen(tmp_path, op, nth, committed):
    hook = FailAt("none", 1)
    with open_file_log(tmp_path, fault_hook=hook) as log:
        fill(log)
        assert changed_segments(log) >= 3
        hook.op, hook.nth = op, nth
        with pytest.raises(StorageUnavailable):
            log.rewrite(BEFORE, pseudonymise)
        if not committed:  # rolled back in the process too
            assert read_all(log) == list(enumerate(OLD))
            assert leftovers(tmp_path) == []
        else:
            assert os.path.exists(os.path.join(tmp_path, REWRITE_MANIFEST)) == (op != "rewrite.dirsync" or nth < 4)
    check_reopened(tmp_path, committed)


@pytest.mark.parametrize("op,nth,committed", STEPS, ids=[f"{op}#{n}" for op, n, _c in STEPS])
def test_fault_at_each_step_then_rewrite_again_in_the_same_process(tmp_path, op, nth, committed):
    hook = FailAt("none", 1)
    with open_file_log(tmp_path, fault_hook=hook) as log:
        fill(log)
        hook.op, hook.nth = op, nth
        with pytest.raises(StorageUnavailable):
            log.rewrite(BEFORE, pseudonymise)
        hook.op = "none"
        log.rewrite(BEFORE, pseudonymise)  # finishes a committed one first
        assert leftovers(tmp_path) == []
        assert read_all(log) == list(enumerate(NEW))
        for offset in (0, 5, 21, 38):
            assert read_all(log, offset, chunk=2) == list(enumerate(NEW))[offset:]
        assert [s for _f, p, s in log.segments()] == [os.path.getsize(p) for _f, p, _s in log.segments()]
        assert log.append_batch(["after"]) == [N]
    with open_file_log(tmp_path) as log:
        assert read_all(log) == list(enumerate(NEW + ["after"]))


def test_a_crash_at_every_step_leaves_old_or_new(tmp_path):
    """The directory copied at each hook (the disk as a crash there would
    leave it: every earlier step done, this one not), each copy reopened."""
    live = tmp_path / "live"
    copies: list[tuple[str, str]] = []
    armed = [False]

    def snapshot(op, path):
        if armed[0] and op.startswith("rewrite."):
            dest = str(tmp_path / f"crash-{len(copies):02d}")
            shutil.copytree(live, dest)
            copies.append((op, dest))

    with open_file_log(live, fault_hook=snapshot) as log:
        fill(log)
        n = changed_segments(log)
        armed[0] = True
        log.rewrite(BEFORE, pseudonymise)
        armed[0] = False
    ops = [op for op, _d in copies]
    assert ops == (["rewrite.write", "rewrite.fsync"] * n
                   + ["rewrite.manifest.write", "rewrite.manifest.fsync", "rewrite.dirsync", "rewrite.manifest.rename",
                      "rewrite.dirsync"]
                   + ["rewrite.rename"] * n
                   + ["rewrite.dirsync", "rewrite.manifest.delete", "rewrite.dirsync"])
    commit = ops.index("rewrite.manifest.rename")
    for k, (op, dest) in enumerate(copies):
        temps = sum(name.endswith(REWRITE_SUFFIX) for name in os.listdir(dest))
        renamed = ops[:k].count("rewrite.rename")
        created = ops[:k + 1].count("rewrite.write")  # a temp is created (empty) right before its write step
        assert temps == created - renamed, (k, op)
        assert os.path.exists(os.path.join(dest, REWRITE_MANIFEST)) == (commit < k < len(ops) - 1), (k, op)
        check_reopened(dest, committed=k > commit)


def test_a_manifest_naming_a_damaged_temp_refuses_to_open(tmp_path):
    with open_file_log(tmp_path, fault_hook=FailAt("rewrite.rename", 1)) as log:
        fill(log)
        with pytest.raises(StorageUnavailable):
            log.rewrite(BEFORE, pseudonymise)
    temp = sorted(n for n in os.listdir(tmp_path) if n.endswith(REWRITE_SUFFIX))[0]
    with open(tmp_path / temp, "r+b") as f:
        f.seek(SEGMENT_HEADER_SIZE + 10)
        byte = f.read(1)
        f.seek(SEGMENT_HEADER_SIZE + 10)
        f.write(bytes([byte[0] ^ 0xFF]))
    with pytest.raises(LogCorruption, match="rewrite manifest"):
        open_file_log(tmp_path)
    assert temp in os.listdir(tmp_path)  # nothing replaced, nothing deleted: for an operator to look at


def test_an_unreadable_manifest_refuses_to_open(tmp_path):
    with open_file_log(tmp_path) as log:
        fill(log)
    (tmp_path / REWRITE_MANIFEST).write_bytes(b"{not json")
    with pytest.raises(LogCorruption, match="unreadable"):
        open_file_log(tmp_path)


def test_leftover_temps_without_a_manifest_are_deleted(tmp_path):
    with open_file_log(tmp_path) as log:
        fill(log)
        first_path = log.segments()[0][1]
    shutil.copy(first_path, first_path + REWRITE_SUFFIX)
    (tmp_path / (REWRITE_MANIFEST + ".tmp")).write_bytes(b"{")
    with open_file_log(tmp_path) as log:
        assert leftovers(tmp_path) == []
        assert read_all(log) == list(enumerate(OLD))


def test_a_committed_rewrite_of_a_segment_retention_deleted_is_dropped(tmp_path):
    with open_file_log(tmp_path, fault_hook=FailAt("rewrite.rename", 1)) as log:
        fill(log)
        with pytest.raises(StorageUnavailable):
            log.rewrite(BEFORE, pseudonymise)
        deleted = log.delete_segments_before(20)
        assert deleted
        start = log.start_offset()
    with open_file_log(tmp_path) as log:
        assert leftovers(tmp_path) == []
        assert read_all(log, start) == list(enumerate(NEW))[start:]


CHILD = textwrap.dedent("""
    import os, sys, threading, time
    sys.path.insert(0, {root!r})
    from engine.log import SegmentedFileLog

    directory, block_op, block_nth = sys.argv[1], sys.argv[2], int(sys.argv[3])
    calls = [0]
    lock = threading.Lock()

    def say(line):
        with lock:
            sys.stdout.write(line + "\\n")
            sys.stdout.flush()

    def hook(op, path):
        if op == block_op:
            calls[0] += 1
            if calls[0] == block_nth:
                say("BLOCKED")
                time.sleep(3600)

    log = SegmentedFileLog.open(directory, segment_bytes=300, index_interval=4, fault_hook=hook)
    for i in range(0, {n}, 3):
        log.append_batch([["s", "board", f"evt-{{j}}", f"p{{j % 5}}", j] for j in range(i, min(i + 3, {n}))])
    say("FILLED")

    def appender(t):
        b = 0
        while True:
            offsets = log.append_batch([["a", t, b]])
            say(f"ACK {{offsets[0]}} {{t}} {{b}}")
            b += 1
            time.sleep(0.001)

    for t in range(2):
        threading.Thread(target=appender, args=(t,), daemon=True).start()

    def pseudonymise(offset, rec):
        if rec[3] != "p3":
            return rec
        return ["s", "board", f"anon-evt-{{offset:06d}}", "anon-7f3a9c", rec[4]]

    log.rewrite({before}, pseudonymise)
    say("REWRITTEN")
    time.sleep(3600)
""")


@pytest.mark.parametrize("op,nth,committed", [
    ("rewrite.fsync", 2, False),            # a temp written, the next not yet fsync'd
    ("rewrite.manifest.rename", 1, False),  # every temp and the manifest's temp durable
    ("rewrite.rename", 2, True),            # committed, one segment renamed (inside the swap)
    ("rewrite.manifest.delete", 1, True),   # every segment renamed
])
def test_sigkill_during_a_rewrite_with_appends_going_on(tmp_path, op, nth, committed):
    """A real crash: the child blocks at a step while two threads keep
    appending (so the writer is not held by the rewrite, except inside the
    swap: the renames hold the lock the writer publishes under), then is
    SIGKILLed; every acknowledged append is there after reopen, and the
    rewritten range is all old or all new."""
    script = tmp_path / "child.py"
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    script.write_text(CHILD.format(root=root, n=N, before=BEFORE))
    directory = tmp_path / "log"
    with Child(str(script), directory, op, nth, timeout=30) as child:
        child.read_until(lambda line: line == "BLOCKED")
        acks_at_block = sum(line.startswith("ACK") for line in child.lines)
        if op != "rewrite.rename":
            child.read_until(lambda line: line.startswith("ACK") and int(line.split()[1]) > N + acks_at_block + 20)
        child.kill()
    acked = {}
    for line in child.lines:
        if line.startswith("ACK "):
            _ack, offset, t, b = line.split()
            acked[int(offset)] = ["a", int(t), int(b)]
    assert op == "rewrite.rename" or len(acked) > 20
    with open_file_log(directory) as log:
        assert leftovers(directory) == []
        got = dict(read_all(log))
        assert sorted(got) == list(range(len(got)))
        assert [got[o] for o in range(N)] == (NEW if committed else OLD)
        for offset, rec in acked.items():
            assert got[offset] == rec
        log.rewrite(BEFORE, pseudonymise)
        assert [r for _o, r in read_all(log)][:N] == NEW


# ---------------------------------------------------------- concurrency


def test_appends_go_on_while_a_rewrite_is_blocked(tmp_path):
    blocked, release = threading.Event(), threading.Event()

    def hook(op, path):
        if op == "rewrite.write":
            blocked.set()
            assert release.wait(10)

    with open_file_log(tmp_path, fault_hook=hook) as log:
        fill(log)
        result: list = []
        rewriter = threading.Thread(target=lambda: result.append(log.rewrite(N, pseudonymise)))
        rewriter.start()
        assert blocked.wait(10)
        appended = []

        def appender(t):
            for b in range(20):
                appended.append((log.append_batch([["a", t, b]])[0], ["a", t, b]))

        threads = [threading.Thread(target=appender, args=(t,)) for t in range(3)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(10)
            assert not th.is_alive(), "an append waited for the rewrite"
        assert log.durable_offset() == N + 60
        # retention spares what the rewrite holds
        assert log.delete_segments_before(N) == []
        release.set()
        rewriter.join(10)
        assert result and result[0].records_changed == 12
        new_all = [pseudonymise(i, r) for i, r in enumerate(OLD)]
        got = read_all(log)
        assert [r for _o, r in got[:N]] == new_all
        assert sorted(o for o, _r in appended) == list(range(N, N + 60))
        assert all(dict(got)[o] == rec for o, rec in appended)
    with open_file_log(tmp_path) as log:
        assert [r for _o, r in read_all(log)][:N] == new_all


def test_readers_see_old_or_new_records_never_torn(tmp_path):
    """Readers, appenders and repeated rewrites at once: every record read is
    its offset's old or new version, offsets contiguous; a read started after
    a rewrite returned sees every new record."""
    with open_file_log(tmp_path, segment_bytes=200, index_interval=2) as log:
        fill(log)
        stop = threading.Event()
        errors: list = []

        def reader():
            try:
                while not stop.is_set():
                    got = read_all(log, 0, chunk=3)
                    assert [o for o, _r in got] == list(range(len(got)))
                    for o, r in got[:N]:
                        assert r in (OLD[o], pseudonymise(o, OLD[o])), (o, r)
                    for o, r in log.read_where(0, b"\x95\xa1s"):
                        assert r in (OLD[o], pseudonymise(o, OLD[o])), (o, r)
            except BaseException as exc:  # reported below
                errors.append(exc)

        def appender():
            b = 0
            while not stop.is_set():
                log.append_batch([["a", b]])
                b += 1

        threads = [threading.Thread(target=reader) for _ in range(2)] + [threading.Thread(target=appender)]
        for th in threads:
            th.start()
        try:
            for before in (10, 25, BEFORE, N):
                log.rewrite(before, pseudonymise)
                got = read_all(log)
                assert [r for _o, r in got[:before]] == [pseudonymise(o, r) for o, r in enumerate(OLD[:before])]
        finally:
            stop.set()
            for th in threads:
                th.join(10)
        assert not errors, errors[0]


def test_a_reader_started_before_the_swap_finishes_in_order(tmp_path):
    with open_file_log(tmp_path) as log:
        fill(log)
        it = log.read_from(0, chunk_records=5)
        first = [next(it) for _ in range(7)]
        log.rewrite(N, pseudonymise)
        rest = list(it)
        got = first + rest
        assert [o for o, _r in got] == list(range(N))
        assert all(r in (OLD[o], pseudonymise(o, OLD[o])) for o, r in got)
        assert read_all(log) == [(o, pseudonymise(o, r)) for o, r in enumerate(OLD)]


def test_in_memory_rewrite_keeps_emulated_segment_sizes_in_step_with_files(tmp_path):
    """The in-memory twin's byte accounting matches the file log's."""
    mem = InMemoryLog.open(None, segment_bytes=300)
    with open_file_log(tmp_path) as log:
        fill(log)
        fill(mem)
        assert mem.rewrite(BEFORE, pseudonymise) == log.rewrite(BEFORE, pseudonymise)
        assert [(f, s) for f, _p, s in mem.segments()] == [(f, s) for f, _p, s in log.segments()]

"""EventLog contract, run against SegmentedFileLog and InMemoryLog (STYLE §12)."""

from __future__ import annotations

import errno
import random
import threading

import msgpack
import pytest

from engine.core.errors import StorageUnavailable
from engine.log import EventLog, segment_log

from .conftest import FsyncCounter

RECORDS = [
    ["s", "board-1", "evt-1", "p1", 9800, 1_700_000_000_000, 1_700_000_000_001, 0],
    None, True, False, 0, -1, 2**63 - 1, -(2**63), 1.5, "", "ünïcødé", b"", b"\x00\xffbytes",
    [], {}, {"k": [1, {"n": None}], 3: b"x"}, [[[]]], "x" * 70_000,
]


def read_all(log, offset=0, chunk=4096):
    return list(log.read_from(offset, chunk_records=chunk))


def test_implements_port(log_factory):
    assert isinstance(log_factory(), EventLog)


def test_round_trip_all_value_shapes(log_factory):
    log = log_factory()
    offsets = log.append_batch(RECORDS)
    assert offsets == list(range(len(RECORDS)))
    assert read_all(log) == list(enumerate(RECORDS))
    assert log.end_offset() == log.durable_offset() == len(RECORDS)


def test_tuples_read_back_as_lists(log_factory):
    log = log_factory()
    log.append_batch([(1, (2, 3))])
    assert read_all(log) == [(0, [1, [2, 3]])]


def test_offsets_dense_and_increasing_across_batches(log_factory):
    log = log_factory()
    rng = random.Random(7)
    expected = 0
    for _ in range(40):
        n = rng.randint(1, 30)
        offsets = log.append_batch([expected + i for i in range(n)])
        assert offsets == list(range(expected, expected + n))
        expected += n
    assert log.end_offset() == expected
    assert [o for o, _ in read_all(log)] == list(range(expected))
    assert all(o == v for o, v in read_all(log, chunk=3))


def test_empty_batch_is_a_no_op(log_factory):
    log = log_factory()
    assert log.append_batch([]) == []
    assert log.end_offset() == 0
    assert read_all(log) == []


def test_unencodable_record_rejects_the_whole_batch(log_factory):
    log = log_factory()
    log.append_batch(["a"])
    with pytest.raises(TypeError):
        log.append_batch(["b", object()])
    assert log.end_offset() == 1
    assert log.append_batch(["c"]) == [1]
    assert read_all(log) == [(0, "a"), (1, "c")]


def test_read_from_every_offset_and_chunk_size(log_factory):
    log = log_factory(segment_bytes=300)
    values = [["r", i, "x" * (i % 13)] for i in range(200)]
    for i in range(0, 200, 9):
        log.append_batch(values[i:i + 9])
    for chunk in (1, 5, 4096):
        for offset in range(0, 201, 1 if chunk == 5 else 17):
            got = read_all(log, offset, chunk)
            assert got == list(enumerate(values))[offset:], (offset, chunk)
    assert read_all(log, 500) == []


def test_read_from_rejects_bad_arguments(log_factory):
    log = log_factory()
    with pytest.raises(ValueError):
        log.read_from(-1)
    with pytest.raises(ValueError):
        log.read_from(0, chunk_records=0)


def test_reading_while_appending_sees_dense_durable_prefixes(log_factory):
    log = log_factory(segment_bytes=2000)
    stop = threading.Event()
    total = 1000

    def writer():
        for i in range(0, total, 10):
            log.append_batch([["v", j] for j in range(i, i + 10)])
        stop.set()

    t = threading.Thread(target=writer)
    t.start()
    reads = 0
    while not stop.is_set() or reads == 0:
        durable_before = log.durable_offset()
        got = read_all(log, 0, chunk=64)
        assert len(got) >= durable_before
        assert got == [(j, ["v", j]) for j in range(len(got))]
        reads += 1
    t.join()
    assert read_all(log) == [(j, ["v", j]) for j in range(total)]


def test_iterator_started_before_appends_includes_later_durable_records(log_factory):
    log = log_factory()
    log.append_batch([0, 1])
    it = log.read_from(0, chunk_records=1)
    assert next(it) == (0, 0)
    log.append_batch([2])
    assert list(it) == [(1, 1), (2, 2)]


def test_segment_rolling(log_factory):
    log = log_factory(segment_bytes=256)
    for i in range(100):
        log.append_batch([["roll", i, "y" * 20]])
    segs = log.segments()
    assert len(segs) > 5
    firsts = [first for first, _path, _size in segs]
    assert firsts == sorted(firsts) and firsts[0] == 0
    assert all(size > 0 for _f, _p, size in segs)
    assert read_all(log) == [(i, ["roll", i, "y" * 20]) for i in range(100)]


def test_concurrent_appenders_get_disjoint_offsets_and_every_record_once(log_factory):
    log = log_factory(segment_bytes=4096)
    n_threads, n_batches = 8, 40
    acked: dict[tuple[int, int], list[int]] = {}
    errors = []

    def appender(t):
        rng = random.Random(t)
        try:
            for b in range(n_batches):
                size = rng.randint(1, 12)
                offsets = log.append_batch([[t, b, i] for i in range(size)])
                acked[(t, b)] = offsets
        except Exception as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=appender, args=(t,)) for t in range(n_threads)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors
    all_offsets = sorted(o for offs in acked.values() for o in offs)
    assert all_offsets == list(range(len(all_offsets)))
    records = dict(read_all(log))
    assert len(records) == len(all_offsets)
    for (t, b), offsets in acked.items():
        assert offsets == list(range(offsets[0], offsets[0] + len(offsets)))  # a batch is contiguous
        assert [records[o] for o in offsets] == [[t, b, i] for i in range(len(offsets))]


def test_retention_deletes_only_whole_old_segments(log_factory):
    log = log_factory(segment_bytes=200)
    for i in range(60):
        log.append_batch([["ret", i, "z" * 10]])
    segs = log.segments()
    assert len(segs) >= 4
    cut = segs[2][0] + 1  # inside the third segment
    deleted = log.delete_segments_before(cut)
    assert deleted == [segs[0][1], segs[1][1]]
    assert log.start_offset() == segs[2][0]
    assert [o for o, _ in read_all(log, log.start_offset())] == list(range(segs[2][0], 60))
    with pytest.raises(ValueError):
        log.read_from(segs[2][0] - 1)
    # never the active segment, even past the end
    log.delete_segments_before(10**9)
    assert len(log.segments()) == 1
    assert log.segments()[0][0] == segs[-1][0]
    assert log.append_batch(["after"]) == [60]
    assert read_all(log, 60) == [(60, "after")]


@pytest.mark.parametrize("op", ["write", "fsync"])
def test_injected_enospc_fails_the_batch_and_the_log_recovers(tmp_path, log_factory, op):
    hook = FsyncCounter()
    log = log_factory(fault_hook=hook)
    assert log.append_batch(["a", "b"]) == [0, 1]
    hook.fail[op] = OSError(errno.ENOSPC, "No space left on device")
    with pytest.raises(StorageUnavailable) as info:
        log.append_batch(["lost-1", "lost-2"])
    assert op in str(info.value)
    assert log.end_offset() == log.durable_offset() == 2
    assert read_all(log) == [(0, "a"), (1, "b")]
    del hook.fail[op]
    assert log.append_batch(["c"]) == [2]
    assert read_all(log) == [(0, "a"), (1, "b"), (2, "c")]


HEAD = msgpack.packb(["L", 0, 0, 0, 0, 0])[:3]  # a 6-item list whose first item is "L"


@pytest.mark.parametrize("block", [64, 8 << 20])
def test_read_where_finds_exactly_the_records_whose_payload_starts_with_head(log_factory, monkeypatch, block):
    """Only the records whose encoded payload starts with ``head``, in order,
    from every offset; frames longer than a read block, across segments."""
    monkeypatch.setattr(segment_log, "_SCAN_BLOCK", block)  # small blocks: frames cut at every place
    log = log_factory(segment_bytes=600)
    rng = random.Random(3)
    for b in range(30):
        batch = []
        for i in range(rng.randint(1, 6)):
            roll = rng.random()
            if roll < 0.25:
                batch.append(["L", "b", b, i if roll < 0.1 else None, None, "e" * rng.randrange(300)])
            elif roll < 0.35:
                batch.append(["L", "b", b])  # another layout of the same letter: not a match
            else:
                batch.append(["C", "b", b, "x" * rng.randrange(200)])
        log.append_batch(batch)
    everything = read_all(log)
    assert len(log.segments()) > 3
    for start in range(0, len(everything) + 2):
        want = [(o, r) for o, r in everything[start:] if msgpack.packb(r, use_bin_type=True).startswith(HEAD)]
        assert log.read_where(start, HEAD) == want
    assert log.read_where(0, HEAD) and log.read_where(0, b"nothing") == []
    cut = log.segments()[2][0]
    log.delete_segments_before(cut)
    with pytest.raises(ValueError):
        log.read_where(cut - 1, HEAD)
    assert log.read_where(cut, HEAD) == [(o, r) for o, r in everything[cut:] if r[0] == "L" and len(r) == 6]

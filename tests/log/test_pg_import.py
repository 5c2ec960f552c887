"""``flowrank log import`` (engine.log.pg_import): a data directory's file log and snapshots copied into an
empty PostgreSQL log, offsets, bytes, record formats and the retained start kept; a non-empty log, a live
lease holder or a data directory in use refused; a failure part way leaves the log empty. (The golden
fixtures imported and replayed: tests/service/test_golden.py.)"""

from __future__ import annotations

import fcntl
import os
import struct

import psycopg
import pytest
import xxhash

from engine.core.errors import UnsupportedFormat
from engine.core.formats import LOG_FORMAT
from engine.log import FileSnapshotStore, SegmentedFileLog
from engine.log.pg_import import ImportRefused, import_data_dir
from engine.log.pg_lease import Lease
from engine.log.pg_log import PostgresLog, PostgresSnapshotStore
from engine.log.snapshots import DIGEST_SIZE, SNAP_HEADER_SIZE


def _rec(i: int) -> list:
    return ["s", "board", f"e{i}", f"p{i % 7}", i * 3, 1_700_000_000_000 + i, 0, 0]


def make_data_dir(root, *, trimmed: bool = True) -> list[tuple[int, object]]:
    """A data directory with a log of several segments in two record formats (the older first), its first
    segments deleted by retention when ``trimmed``, and snapshots (one of them damaged); returns the
    retained records."""
    with SegmentedFileLog.open(str(root / "log"), segment_bytes=512, record_format=LOG_FORMAT - 1) as log:
        log.append_batch([_rec(i) for i in range(0, 40)])
        for i in range(40, 80, 5):
            log.append_batch([_rec(j) for j in range(i, i + 5)])
    with SegmentedFileLog.open(str(root / "log"), segment_bytes=512, record_format=LOG_FORMAT) as log:
        for i in range(80, 150, 7):
            log.append_batch([_rec(j) for j in range(i, i + 7)])
        if trimmed:
            assert log.delete_segments_before(50)
        records = list(log.read_from(log.start_offset()))
    store = FileSnapshotStore(str(root / "snapshots"))
    store.save("router", 100, {"format": 1, "boards": ["b"], "blob": b"\x00\xff" * 100})
    store.save("router", 140, {"format": 1, "boards": ["b", "c"]})
    store.save("shard-0", 140, {"format": 1, "parts": [[0, 1, {"rows": list(range(50))}]]})
    bad = store.save("shard-1", 140, {"format": 1})
    raw = bytearray(open(bad, "rb").read())
    raw[-1] ^= 0xFF
    open(bad, "wb").write(bytes(raw))
    return records


def test_an_import_keeps_offsets_bytes_formats_and_the_start_and_appends_continue(pg_url, tmp_path):
    records = make_data_dir(tmp_path)
    with SegmentedFileLog.open(str(tmp_path / "log")) as src:
        formats, start, end = src.record_formats(), src.start_offset(), src.end_offset()
        sizes = [(first, size) for first, _p, size in src.segments()]
    assert start > 0 and len({f for _o, f in formats}) == 2
    report = import_data_dir(tmp_path, pg_url, chunk_records=4)
    assert (report.records, report.start_offset, report.end_offset) == (len(records), start, end)
    assert report.segments == len(formats) and report.copies >= len(records) // 4
    assert report.snapshots == 3 and len(report.skipped_snapshots) == 1  # shard-1's does not verify
    with PostgresLog.open(pg_url, writer=False) as log:
        assert (log.start_offset(), log.durable_offset()) == (start, end)
        assert list(log.read_from(start, chunk_records=5)) == records
        assert log.record_formats() == formats
        assert [(first, size) for first, _p, size in log.segments()] == sizes
        with pytest.raises(ValueError):
            list(log.read_from(start - 1))
    snaps = PostgresSnapshotStore(pg_url)
    try:
        assert snaps.load_latest("router") == (140, {"format": 1, "boards": ["b", "c"]})
        assert [o for o, _p in snaps.list("router")] == [100, 140]
        assert snaps.load_latest("shard-0")[1]["parts"][0][2]["rows"] == list(range(50))
        assert snaps.load_latest("shard-1") is None
    finally:
        snaps.close()
    with PostgresLog.open(pg_url) as log:  # a writer: the epoch after the import's, appends at the end
        assert log.epoch >= 2
        assert log.append_batch([_rec(1000), _rec(1001)]) == [end, end + 1]
        assert list(log.read_from(end)) == [(end, _rec(1000)), (end + 1, _rec(1001))]


def test_an_import_of_an_older_active_segment_starts_one_of_todays_format(pg_url, tmp_path):
    with SegmentedFileLog.open(str(tmp_path / "log"), record_format=LOG_FORMAT - 1) as log:
        log.append_batch([_rec(i) for i in range(10)])
    import_data_dir(tmp_path, pg_url)
    with PostgresLog.open(pg_url) as log:
        assert log.record_formats() == [(0, LOG_FORMAT - 1), (10, LOG_FORMAT)]
        assert log.append_batch([_rec(10)]) == [10]
        assert list(log.read_from(0)) == [(i, _rec(i)) for i in range(11)]


def test_a_log_that_is_not_empty_is_refused_and_left_as_it_is(pg_url, tmp_path):
    make_data_dir(tmp_path)
    with PostgresLog.open(pg_url) as log:
        log.append_batch([_rec(0)])
    with pytest.raises(ImportRefused, match="is not empty: 1 records"):
        import_data_dir(tmp_path, pg_url)
    with PostgresLog.open(pg_url, writer=False) as log:
        assert list(log.read_from(0)) == [(0, _rec(0))]


def test_an_import_into_a_log_holding_only_snapshots_is_refused(pg_url, tmp_path):
    make_data_dir(tmp_path)
    store = PostgresSnapshotStore(pg_url)
    store.save("router", 5, {"x": 1})
    store.close()
    with pytest.raises(ImportRefused, match="1 snapshots"):
        import_data_dir(tmp_path, pg_url)


def test_a_live_lease_holder_is_refused(pg_url, tmp_path):
    make_data_dir(tmp_path)
    lease = Lease(pg_url, "node-a", "http://a")
    assert lease.try_acquire() is not None
    try:
        with pytest.raises(ImportRefused, match="node 'node-a' holds the lease"):
            import_data_dir(tmp_path, pg_url)
    finally:
        lease.release()
    import_data_dir(tmp_path, pg_url)  # released: nobody holds it


def test_a_data_directory_in_use_or_without_a_log_is_refused(pg_url, tmp_path):
    with pytest.raises(ImportRefused, match="no event log"):
        import_data_dir(tmp_path, pg_url)
    make_data_dir(tmp_path)
    fd = os.open(tmp_path / "LOCK", os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(ImportRefused, match="in use by another FlowRank process"):
            import_data_dir(tmp_path, pg_url)
    finally:
        os.close(fd)


def test_a_failure_part_way_leaves_the_log_empty_and_a_second_import_succeeds(pg_url, tmp_path):
    records = make_data_dir(tmp_path)
    newer = tmp_path / "snapshots" / "shard-0.00000000000000000140.snap"
    good = newer.read_bytes()
    raw = bytearray(good)
    struct.pack_into("<H", raw, 4, 99)  # the envelope's version: intact, but newer than this FlowRank reads
    digest = xxhash.xxh3_128(bytes(raw[:SNAP_HEADER_SIZE]))
    digest.update(bytes(raw[SNAP_HEADER_SIZE + DIGEST_SIZE:]))
    raw[SNAP_HEADER_SIZE:SNAP_HEADER_SIZE + DIGEST_SIZE] = digest.digest()
    newer.write_bytes(bytes(raw))
    with pytest.raises(UnsupportedFormat):  # after the log's rows were copied: rolled back
        import_data_dir(tmp_path, pg_url)
    with psycopg.connect(pg_url) as conn:
        assert conn.execute("SELECT end_offset, start_offset FROM flowrank_head").fetchone() == (0, 0)
        assert conn.execute("SELECT count(*) FROM flowrank_snapshots").fetchone() == (0,)
        tables = [t for (t,) in conn.execute("SELECT tablename FROM pg_tables WHERE tablename LIKE 'flowrank_seg\\_%'")]
        assert tables == ["flowrank_seg_00000000000000000000"]
    newer.write_bytes(good)
    assert import_data_dir(tmp_path, pg_url).records == len(records)

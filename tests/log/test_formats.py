"""Format numbers in the envelopes: a segment header names its framing version
and the record format of its records; a snapshot envelope its version. Newer
ones are refused (``UnsupportedFormat``), never misread nor skipped as damage."""

from __future__ import annotations

import logging
import struct

import pytest
import xxhash

from engine.core.errors import LogCorruption, UnsupportedFormat
from engine.log import FileSnapshotStore, SegmentedFileLog
from engine.log.framing import SEGMENT_HEADER, SEGMENT_MAGIC, SEGMENT_VERSION, decode_segment_header
from engine.log.snapshots import SNAP_VERSION, encode_snapshot


def header(path) -> tuple[int, int, int]:
    with open(path, "rb") as f:
        h = decode_segment_header(f.read(16))
    assert h is not None
    return h.version, h.record_format, h.first_offset


def test_new_segments_carry_the_record_format(tmp_path):
    with SegmentedFileLog.open(tmp_path, segment_bytes=64, record_format=3) as log:
        for i in range(5):
            log.append_batch([["x", i, "y" * 40]])
        paths = [p for _, p, _ in log.segments()]
        assert len(paths) > 1
        assert [f for _, f in log.record_formats()] == [3] * len(paths)
    assert all(header(p)[:2] == (SEGMENT_VERSION, 3) for p in paths)
    with SegmentedFileLog.open(tmp_path, record_format=3) as log:  # reopen: same format, no new segment
        log.append_batch([["z"]])
        assert len(log.segments()) == len(paths)


def test_a_newer_record_format_refuses_to_open(tmp_path):
    with SegmentedFileLog.open(tmp_path, record_format=2) as log:
        log.append_batch([["x"]])
    with pytest.raises(UnsupportedFormat, match="records in format 2, newer than format 1"):
        SegmentedFileLog.open(tmp_path, record_format=1)


def test_an_older_active_segment_is_closed_before_the_first_write(tmp_path):
    """Records of one segment are all in its header's format."""
    with SegmentedFileLog.open(tmp_path, record_format=0) as log:  # as written before formats were numbered
        log.append_batch([["old", 1], ["old", 2]])
    with SegmentedFileLog.open(tmp_path, record_format=1) as log:
        assert log.record_formats() == [(0, 0)]
        log.append_batch([["new", 3]])
        assert log.record_formats() == [(0, 0), (2, 1)]
        assert [r for _, r in log.read_from(0)] == [["old", 1], ["old", 2], ["new", 3]]
    with SegmentedFileLog.open(tmp_path, record_format=1) as log:
        assert log.record_formats() == [(0, 0), (2, 1)]


def test_an_empty_active_segment_gets_the_new_format_in_place(tmp_path):
    SegmentedFileLog.open(tmp_path, record_format=0).close()
    with SegmentedFileLog.open(tmp_path, record_format=1) as log:
        assert log.record_formats() == [(0, 1)]
        log.append_batch([["a"]])
        assert len(log.segments()) == 1


def test_a_newer_framing_version_is_refused_not_called_corruption(tmp_path):
    with SegmentedFileLog.open(tmp_path) as log:
        log.append_batch([["x"]])
        path = log.segments()[0][1]
    raw = bytearray(open(path, "rb").read())
    SEGMENT_HEADER.pack_into(raw, 0, SEGMENT_MAGIC, SEGMENT_VERSION + 1, 0, 0)
    open(path, "wb").write(bytes(raw))
    with pytest.raises(UnsupportedFormat, match=f"framing version {SEGMENT_VERSION + 1}"):
        SegmentedFileLog.open(tmp_path)
    SEGMENT_HEADER.pack_into(raw, 0, SEGMENT_MAGIC, 0, 0, 0)
    open(path, "wb").write(bytes(raw))
    with pytest.raises(LogCorruption, match="bad segment version 0"):
        SegmentedFileLog.open(tmp_path)


def _envelope(offset: int, payload, version: int) -> bytes:
    """A snapshot file as a writer of envelope ``version`` (same layout) would write it."""
    data = bytearray(encode_snapshot(offset, payload))
    struct.pack_into("<H", data, 4, version)
    digest = xxhash.xxh3_128(bytes(data[:24]))
    digest.update(bytes(data[40:]))
    data[24:40] = digest.digest()
    return bytes(data)


def test_a_newer_snapshot_envelope_refuses_instead_of_falling_back(tmp_path, caplog):
    store = FileSnapshotStore(tmp_path)
    store.save("router", 5, {"old": True})
    with open(store.path_for("router", 9), "wb") as f:
        f.write(_envelope(9, {"new": True}, SNAP_VERSION + 1))
    with pytest.raises(UnsupportedFormat, match=f"envelope version {SNAP_VERSION + 1}"):
        store.load_latest("router")
    # a damaged one (checksum does not verify) is still skipped with a warning
    data = bytearray(_envelope(9, {"new": True}, SNAP_VERSION + 1))
    data[-1] ^= 0xFF
    with open(store.path_for("router", 9), "wb") as f:
        f.write(bytes(data))
    with caplog.at_level(logging.WARNING, logger="flowrank.log"):
        assert store.load_latest("router") == (5, {"old": True})
    assert any("checksum mismatch" in r.getMessage() for r in caplog.records)

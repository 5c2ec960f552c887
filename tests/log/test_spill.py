"""engine.log.spill: an export's spill file holds its blocks in order, is
refused when it is not the named export's, and goes when asked."""

from __future__ import annotations

import os

import pytest

from engine.core.export import Block
from engine.log.spill import SpillReader, read_frame, remove_spills, reset_dir, spill_path, write_spill


def _blocks():
    a = Block.of([-9, -9], [1, 2], [9, 9], [1, 2], ["a", "ü"], [None, b'{"k":1}'])
    b = Block.of([-3], [0], [3], [0], ["😀"])
    return [a, b]


def _rows(b: Block) -> list:
    return list(zip(b.primary.tolist(), b.tie.tolist(), b.value.tolist(), b.player_ids(), b.metadata()))


def test_blocks_come_back_in_order_and_the_name_goes_on_open(tmp_path):
    path = spill_path(str(tmp_path), "tok1", 3)
    write_spill(path, "tok1", 3, _blocks())
    with pytest.raises(FileExistsError):
        write_spill(path, "tok1", 3, _blocks())
    assert SpillReader.open(path, "other") is None  # not that export's file
    reader = SpillReader.open(path, "tok1")
    assert reader is not None and reader.rows == 3 and not os.path.exists(path)
    got = []
    while (b := reader.next()) is not None:
        got.append(_rows(b))
    reader.close()
    assert got == [_rows(b) for b in _blocks()]
    assert SpillReader.open(str(tmp_path / "absent.spill"), "tok1") is None


def test_frames_read_by_offset_as_a_shard_serves_them(tmp_path):
    path = spill_path(str(tmp_path), "tok2", 0)
    write_spill(path, "tok2", 3, _blocks())
    at, got = None, []
    while True:
        raw, at = read_frame(path, "tok2", at)
        if not raw:
            break
        got.append(_rows(Block.decode(raw)))
    assert got == [_rows(b) for b in _blocks()]


def test_a_short_write_leaves_nothing_and_stale_files_go(tmp_path):
    path = spill_path(str(tmp_path), "tok3", 0)
    with pytest.raises(ValueError):
        write_spill(path, "tok3", 5, _blocks())  # announced 5 rows, gave 3
    assert not os.path.exists(path)
    for tok in ("x1", "x2"):
        write_spill(spill_path(str(tmp_path), tok, 0), tok, 3, _blocks())
    (tmp_path / "keep.txt").write_text("not a spill file")
    assert remove_spills(str(tmp_path), "x1") == 1
    reset_dir(str(tmp_path))
    assert sorted(os.listdir(tmp_path)) == ["keep.txt"]

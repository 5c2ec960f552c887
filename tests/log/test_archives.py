"""engine.log.archives: the archive files (docs/storage.md, "Archives"): a save
is whole or absent whatever step fails, leftovers are removed at open, a
damaged file is refused, and both stores read the same bytes alike."""

from __future__ import annotations

import pytest

from engine.core.archive import ArchiveRows, encode
from engine.core.errors import StorageUnavailable
from engine.log.archives import FileArchiveStore, MemoryArchiveStore
from engine.core.model import Policy

BOARD = "g:m:s:ü"


def chunks():
    rows = ArchiveRows.of(["b", "a", "日本"], [3, 5, 5], [1, 2, 1], [1, 2, 1], [1, 1, 2], [True, True, False])
    return encode(BOARD, Policy.BEST_SCORE, 4, rows)


@pytest.mark.parametrize("make", [lambda p: MemoryArchiveStore(), lambda p: FileArchiveStore(p / "archives")])
def test_save_then_open_round_trips(tmp_path, make):
    store = make(tmp_path)
    assert store.open(BOARD) is None
    store.save(BOARD, chunks())
    view = store.open(BOARD)
    assert view.info.version == 4 and [e.player_id for e in view.top(0, 5)] == ["a", "b"]
    assert view.find("日本") == 2 and view.find("x") == -1


@pytest.mark.parametrize("stage", ["archive.write", "archive.fsync", "archive.rename"])
def test_a_failed_save_leaves_no_archive(tmp_path, stage):
    def hook(where, path):
        if where == stage:
            raise OSError("injected")

    store = FileArchiveStore(tmp_path / "a", fault_hook=hook)
    with pytest.raises(StorageUnavailable):
        store.save(BOARD, chunks())
    assert store.open(BOARD) is None
    assert list((tmp_path / "a").iterdir()) == []


def test_leftover_temp_files_are_removed_and_damage_is_refused(tmp_path):
    store = FileArchiveStore(tmp_path / "a")
    store.save(BOARD, chunks())
    path = store.path(BOARD)
    (tmp_path / "a" / "junk.tmp").write_bytes(b"half")
    store = FileArchiveStore(tmp_path / "a")
    assert [p.name for p in (tmp_path / "a").iterdir()] == [path.name]
    data = bytearray(path.read_bytes())
    data[40] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(StorageUnavailable):
        store.open(BOARD)
    path.write_bytes(bytes(data[:-3]))
    with pytest.raises(StorageUnavailable):
        store.open(BOARD)

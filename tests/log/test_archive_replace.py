"""engine.log.archives: replacing an archive to erase players (docs/storage.md,
"Archives"): both stores give the bytes of engine.core.archive.without_players
and a view of them; a failed or killed replace leaves the old file whole when
it stops before the rename and the new one after it; a view of the old file
keeps reading while the new one is written; a store reopened on the directory
reads the new archive and has no temp file left."""

from __future__ import annotations

import os
import textwrap

import pytest

from engine.core.archive import ArchiveRows, ArchiveView, encode, without_players
from engine.core.errors import StorageUnavailable
from engine.core.model import Policy
from engine.log.archives import FileArchiveStore, MemoryArchiveStore
from tests.child_process import Child

BOARD = "g:m:s:\u00fc"
IDS = ["b", "a", "\u65e5\u672c", "c", "d"]
ERASE = ["a", "\u65e5\u672c", "nobody"]  # a ranked player, an INVALIDATED one, an unknown one
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def old_bytes() -> bytes:
    rows = ArchiveRows.of(IDS, [3, 5, 5, 1, 3], [1, 2, 1, 0, 1], [1, 2, 1, 0, 1], [1, 1, 2, 1, 1],
                          [True, True, False, True, True])
    return b"".join(encode(BOARD, Policy.BEST_SCORE, 4, rows))


def new_bytes() -> bytes:
    got = without_players(old_bytes(), ERASE)
    assert got is not None
    return got.data


def file_bytes(store: FileArchiveStore) -> bytes:
    return store.path(BOARD).read_bytes()


@pytest.mark.parametrize("make", [lambda p: MemoryArchiveStore(), lambda p: FileArchiveStore(p / "archives")])
def test_erase_replaces_the_archive_with_one_without_them(tmp_path, make):
    store = make(tmp_path)
    assert store.erase(BOARD, ERASE) is None  # no archive: nothing to rewrite
    store.save(BOARD, [old_bytes()])
    before = store.open(BOARD)
    got = store.erase(BOARD, ERASE)
    assert got is not None
    view, rewrite = got
    assert (rewrite.removed_ranked, rewrite.removed_rows, rewrite.removed_events) == (1, 2, 0)
    assert rewrite.data == new_bytes()
    for v in (view, store.open(BOARD)):
        v._check()
        assert v.info.version == 5 and v.info.rows == 3
        assert [(e.rank, e.player_id) for e in v.top(0, 9)] == [(1, "b"), (2, "d"), (3, "c")]
        assert v.find("a") == v.find("\u65e5\u672c") == -1
    # a view opened before the replace still reads the old archive (its mapping holds the old file)
    assert before.info.version == 4 and [e.player_id for e in before.top(0, 9)] == ["a", "b", "d", "c"]
    assert store.erase(BOARD, ERASE) is None  # already gone: nothing is written
    if isinstance(store, FileArchiveStore):
        assert file_bytes(store) == new_bytes()
        assert FileArchiveStore(tmp_path / "archives").open(BOARD).info.version == 5
        assert [p.name for p in (tmp_path / "archives").iterdir()] == [store.path(BOARD).name]


def test_replace_returns_a_view_of_what_it_wrote(tmp_path):
    store = FileArchiveStore(tmp_path / "a")
    store.save(BOARD, [old_bytes()])
    view = store.replace(BOARD, new_bytes())
    assert isinstance(view, ArchiveView) and bytes(view.buf) == new_bytes() == file_bytes(store)


@pytest.mark.parametrize("stage", ["archive.write", "archive.fsync", "archive.rename"])
def test_a_failed_replace_before_the_rename_keeps_the_old_archive_whole(tmp_path, stage):
    fail = []

    def hook(where, path):
        if where in fail:
            raise OSError("injected")

    store = FileArchiveStore(tmp_path / "a", fault_hook=hook)
    store.save(BOARD, [old_bytes()])
    fail.append(stage)
    with pytest.raises(StorageUnavailable):
        store.erase(BOARD, ERASE)
    assert file_bytes(store) == old_bytes()
    assert store.open(BOARD).info.version == 4
    assert [p.name for p in (tmp_path / "a").iterdir()] == [store.path(BOARD).name]  # no temp file left
    fail.clear()
    assert store.erase(BOARD, ERASE) is not None and file_bytes(store) == new_bytes()  # a retry succeeds


def test_a_failure_after_the_rename_leaves_the_new_archive(tmp_path):
    def hook(where, path):
        if where == "archive.dirsync" and armed:
            raise OSError("injected")

    armed = False
    store = FileArchiveStore(tmp_path / "a", fault_hook=hook)
    store.save(BOARD, [old_bytes()])
    armed = True
    with pytest.raises(StorageUnavailable):
        store.erase(BOARD, ERASE)
    assert file_bytes(store) == new_bytes()
    assert store.erase(BOARD, ERASE) is None  # a retry finds the players gone, and writes nothing


CHILD = """
import sys, time
sys.path.insert(0, {root!r})
from engine.log.archives import FileArchiveStore

directory, stage, board, *ids = sys.argv[1:]

def hook(where, path):
    if where == stage:
        print("BLOCKED", flush=True)
        time.sleep(3600)

FileArchiveStore(directory, fault_hook=hook).erase(board, ids)
print("DONE", flush=True)
time.sleep(3600)
"""


@pytest.mark.parametrize("stage, survives", [
    ("archive.write", "old"), ("archive.fsync", "old"), ("archive.rename", "old"), ("archive.dirsync", "new"),
])
def test_a_replace_killed_at_each_step_leaves_the_old_or_the_new_archive_whole(tmp_path, stage, survives):
    directory = tmp_path / "a"
    FileArchiveStore(directory).save(BOARD, [old_bytes()])
    script = tmp_path / "child.py"
    script.write_text(textwrap.dedent(CHILD.format(root=ROOT)))
    with Child(str(script), directory, stage, BOARD, *ERASE, timeout=120.0) as child:
        child.read_until(lambda line: line == "BLOCKED")
        child.kill()
    store = FileArchiveStore(directory)  # a reopen removes a half-written temp file
    assert [p.name for p in directory.iterdir()] == [store.path(BOARD).name]
    assert file_bytes(store) == (old_bytes() if survives == "old" else new_bytes())
    view = store.open(BOARD)
    view._check()
    assert view.info.version == (4 if survives == "old" else 5)

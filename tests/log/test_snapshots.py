"""SnapshotStore contract (file + memory) and FileSnapshotStore failure handling."""

from __future__ import annotations

import errno
import logging
import os

import pytest

from engine.core.errors import StorageUnavailable
from engine.log import FileSnapshotStore, SnapshotStore

from .conftest import FsyncCounter


def payload(i):
    return {"rows": [[f"p{j}", j * i, 1, 2, 0, 1, f"evt-{j}"] for j in range(5)], "version": i, "b": b"\x00"}


def test_implements_port(store_factory):
    assert isinstance(store_factory(), SnapshotStore)


def test_save_then_load_round_trip(store_factory):
    store = store_factory()
    assert store.load_latest("shard-3") is None
    path = store.save("shard-3", 42, payload(1))
    assert isinstance(path, str) and "shard-3" in path
    assert store.load_latest("shard-3") == (42, payload(1))
    assert store.list("shard-3") == [(42, path)]


def test_newest_offset_wins_and_names_are_independent(store_factory):
    store = store_factory()
    store.save("shard-1", 10, payload(10))
    store.save("shard-1", 30, payload(30))
    store.save("shard-1", 20, payload(20))
    store.save("router", 5, [1, 2])
    assert store.load_latest("shard-1") == (30, payload(30))
    assert store.load_latest("router") == (5, [1, 2])
    assert store.load_latest("shard-10") is None


def test_keep_prunes_to_the_newest_k(store_factory):
    store = store_factory(keep=2)
    for offset in (5, 1, 9, 7):
        store.save("s", offset, offset)
    assert [o for o, _p in store.list("s")] == [7, 9]


def test_loaded_payload_is_a_copy(store_factory):
    store = store_factory()
    value = {"a": [1]}
    store.save("s", 1, value)
    value["a"].append(2)
    assert store.load_latest("s") == (1, {"a": [1]})


@pytest.mark.parametrize("name", ["", "../etc", "a/b", "a.b", ".hidden", "x" * 200, "sp ace", 3])
def test_unsafe_names_are_rejected(store_factory, name):
    with pytest.raises(ValueError):
        store_factory().save(name, 1, 1)


def test_bad_offset_and_unencodable_payload_are_rejected(store_factory):
    store = store_factory()
    with pytest.raises(ValueError):
        store.save("s", -1, 1)
    with pytest.raises(TypeError):
        store.save("s", 1, object())
    assert store.list("s") == []


def test_injected_write_fault_raises_storage_unavailable(tmp_path, store_factory):
    hook = FsyncCounter()
    store = store_factory(fault_hook=hook)
    store.save("s", 1, "old")
    hook.fail["snapshot.write"] = OSError(errno.ENOSPC, "No space left on device")
    with pytest.raises(StorageUnavailable):
        store.save("s", 2, "new")
    assert store.load_latest("s") == (1, "old")


# ------------------------------------------------------------------ file only


def _corrupt(path, how):
    data = bytearray(open(path, "rb").read())
    if how == "flip":
        data[len(data) // 2] ^= 0x01
    elif how == "truncate":
        data = data[: len(data) - 7]
    elif how == "empty":
        data = bytearray()
    elif how == "header":
        data[0:4] = b"XXXX"
    open(path, "wb").write(bytes(data))


@pytest.mark.parametrize("how", ["flip", "truncate", "empty", "header"])
def test_corrupt_newest_falls_back_to_previous_with_a_warning(tmp_path, caplog, how):
    store = FileSnapshotStore(tmp_path)
    store.save("shard-0", 100, payload(100))
    newest = store.save("shard-0", 200, payload(200))
    _corrupt(newest, how)
    with caplog.at_level(logging.WARNING, logger="flowrank.log"):
        assert store.load_latest("shard-0") == (100, payload(100))
    assert any(newest in r.getMessage() for r in caplog.records)


def test_all_bad_returns_none(tmp_path):
    store = FileSnapshotStore(tmp_path)
    for offset in (1, 2, 3):
        _corrupt(store.save("s", offset, payload(offset)), "flip")
    assert store.load_latest("s") is None


def test_renamed_file_with_a_different_offset_is_rejected(tmp_path):
    store = FileSnapshotStore(tmp_path)
    path = store.save("s", 5, "five")
    os.rename(path, store.path_for("s", 6))
    assert store.load_latest("s") is None


def test_fault_at_each_step_keeps_the_old_snapshot_and_leaves_no_temp(tmp_path):
    for step in ("snapshot.write", "snapshot.fsync", "snapshot.rename"):
        hook = FsyncCounter()
        d = tmp_path / step
        store = FileSnapshotStore(d, fault_hook=hook)
        store.save("s", 1, "old")
        hook.fail[step] = OSError(errno.EIO, "Input/output error")
        with pytest.raises(StorageUnavailable, match=step.split(".")[1]):
            store.save("s", 2, "new")
        assert store.load_latest("s") == (1, "old")
        assert sorted(os.listdir(d)) == ["s.00000000000000000001.snap"]


def test_stale_temp_files_are_ignored_and_cleaned(tmp_path):
    store = FileSnapshotStore(tmp_path)
    store.save("s", 1, "old")
    tmp = tmp_path / ".s.00000000000000000002.snap.tmp.999"
    tmp.write_bytes(b"half a snapshot")
    assert store.load_latest("s") == (1, "old")
    FileSnapshotStore(tmp_path)
    assert not tmp.exists()


def test_large_payload_round_trip(tmp_path):
    store = FileSnapshotStore(tmp_path)
    rows = [[f"player-{i}", i * 7, 1_700_000_000_000 + i, 1_700_000_000_500 + i, 0, 3, f"evt-{i}"]
            for i in range(50_000)]
    store.save("shard-1", 123_456, rows)
    assert store.load_latest("shard-1") == (123_456, rows)

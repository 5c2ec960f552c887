"""An erasure's rewrite on the PostgreSQL log leaves no file under the data directory of the primary or of
its synchronous standby holding the erased id (docs/api.md §17, issue 40): the segment tables that held it
are dropped (their files go at the CHECKPOINT), the WAL segments that carried its inserts are removed
(a WAL switch and a checkpoint on the primary, a restartpoint on the standby), and a deleted snapshot's
bytes leave the snapshots table (VACUUM FULL). A cluster of its own: the session's keeps other tests'
WAL."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from benchmarks.pg_cluster import PgCluster
from engine.log.pg_log import PostgresLog, PostgresSnapshotStore

SECRET = b"erase-me-7f3a9c1e"


def files_holding(roots: list[Path], needle: bytes) -> list[str]:
    found = []
    for root in roots:
        for dirpath, _dirs, names in os.walk(root):
            for name in names:
                path = os.path.join(dirpath, name)
                try:
                    with open(path, "rb") as f:
                        if needle in f.read():
                            found.append(path)
                except OSError:
                    pass
    return found


@pytest.fixture
def cluster():
    tmp = tempfile.mkdtemp(prefix="fr-pge-", dir="/tmp")
    os.chmod(tmp, 0o755)
    c = PgCluster(Path(tmp) / "pg")
    try:
        yield c.start()
    finally:
        c.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def test_after_the_rewrite_no_file_of_the_primary_or_the_standby_holds_the_erased_id(cluster):
    url = cluster.create_database("erasure")
    log = PostgresLog.open(url, segment_bytes=2000)
    store = PostgresSnapshotStore(url)
    try:
        for i in range(60):
            log.append_batch([["s", "b", f"e{i}", SECRET.decode() if i % 7 == 0 else f"p{i}", i]])
        store.save("router", 30, {"players": [SECRET.decode(), "p1"]})
        store.save("router", 60, {"players": ["p1"]})
        cluster.wait_replay()
        assert files_holding(cluster.data_dirs(), SECRET)  # the check can find it
        log.rewrite(60, lambda o, r: [*r[:3], "pseudonym", r[4]] if r[3] == SECRET.decode() else r)
        store.delete_through(30)
        log.rewrite(60, lambda o, r: r)  # nothing to change: nothing written
        from engine.log.pg_log import scrub_files  # noqa: PLC0415

        assert scrub_files(url)
        left = files_holding(cluster.data_dirs(), SECRET)
        assert left == []
        assert [r[3] for _o, r in log.read_from(0)][:8] == ["pseudonym", "p1", "p2", "p3", "p4", "p5", "p6",
                                                            "pseudonym"]
        assert store.load_latest("router") == (60, {"players": ["p1"]})
        store.save("router", 90, {"players": ["p2"]})
        assert store.delete_through(60) and store.delete_through(60) == []  # again: the table is made anew each time
        assert store.list("router") == [(90, store.list("router")[0][1])]
    finally:
        store.close()
        log.close()

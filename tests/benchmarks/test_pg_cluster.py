"""benchmarks.pg_cluster against real PostgreSQL servers (never skipped: CI installs them).

Replication is synchronous and readable on the standby; after the primary is SIGKILLed and
the standby promoted, the multi-host URL taken before the kill writes again and every
commit acknowledged before the kill is there; a killed primary restarts by crash recovery;
stop() leaves no process and no directory behind. The kill tests use clusters of their
own, never the session's.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
from pathlib import Path

import psutil
import psycopg
import pytest

from benchmarks import pg_cluster as pgc
from benchmarks.pg_cluster import PgCluster


@pytest.fixture
def pg_root():
    """A directory the postgres OS user may enter (pytest's tmp_path is root-only)."""
    tmp = tempfile.mkdtemp(prefix="fr-pgt-", dir="/tmp")
    os.chmod(tmp, 0o755)
    yield Path(tmp) / "pg"
    shutil.rmtree(tmp, ignore_errors=True)


def _cluster_processes(cluster: PgCluster) -> list[int]:
    """Every live process of the cluster's servers: postmasters and their children."""
    out = []
    for pid in cluster.pids().values():
        out.append(pid)
        out.extend(c.pid for c in psutil.Process(pid).children())
    return out


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_write_on_primary_is_readable_on_standby(pg_cluster, pg_url):
    with psycopg.connect(pg_url, autocommit=True) as conn:
        assert not conn.execute("SELECT pg_is_in_recovery()").fetchone()[0]  # read-write: the primary
        dbname = conn.info.dbname
        conn.execute("CREATE TABLE events (seq bigint PRIMARY KEY, body text)")
        conn.execute("INSERT INTO events SELECT g, 'e' || g FROM generate_series(1, 100) g")
    pg_cluster.wait_replay(10)
    with psycopg.connect(pg_cluster.url_for(dbname, "standby"), autocommit=True) as conn:
        assert conn.execute("SELECT pg_is_in_recovery()").fetchone()[0]
        assert conn.execute("SELECT count(*), max(body) FROM events").fetchone() == (100, "e99")
        with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
            conn.execute("INSERT INTO events VALUES (101, 'no')")


def test_standby_is_synchronous_and_durable(pg_cluster):
    standby = pg_cluster.standby
    with psycopg.connect(pg_cluster.primary_url, autocommit=True) as conn:
        rows = conn.execute("SELECT application_name, state, sync_state FROM pg_stat_replication").fetchall()
        assert rows == [(standby.name, "streaming", "sync")]
        slot = conn.execute("SELECT active FROM pg_replication_slots WHERE slot_name = %s", (standby.slot,)).fetchone()
        assert slot == (True,)
        settings = dict(conn.execute("SELECT name, setting FROM pg_settings WHERE name = ANY(%s)",
                                     (["fsync", "synchronous_commit", "synchronous_standby_names", "wal_level",
                                       "wal_recycle", "listen_addresses"],)).fetchall())
    assert settings == {"fsync": "on", "synchronous_commit": "on", "synchronous_standby_names": f'"{standby.name}"',
                        "wal_level": "replica", "wal_recycle": "off", "listen_addresses": "127.0.0.1"}
    assert set(pg_cluster.pids()) == {"primary", "standby"}
    url = pg_cluster.url
    assert url.startswith(f"postgresql://postgres@127.0.0.1:{pg_cluster.primary.port},127.0.0.1:{standby.port}/flowrank?")
    assert "target_session_attrs=read-write" in url
    assert pg_cluster.primary_url == f"postgresql://postgres@127.0.0.1:{pg_cluster.primary.port}/flowrank"
    pg_cluster.wait_sync(5)


def test_failover_keeps_every_acknowledged_commit(pg_root):
    with PgCluster(pg_root).start() as pg:
        url = pg.create_database("failover")  # taken before the kill, kept after it
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE TABLE events (seq bigint PRIMARY KEY)")
            conn.execute("INSERT INTO events VALUES (0)")

        # one writer commits seq 1, 2, ... (synchronous commit: each ack means the standby flushed it)
        acked: list[int] = []
        stopped = threading.Event()

        def write() -> None:
            try:
                with psycopg.connect(url, autocommit=True) as conn:
                    seq = 1
                    while not stopped.is_set():
                        conn.execute("INSERT INTO events VALUES (%s)", (seq,))
                        acked.append(seq)
                        seq += 1
            except psycopg.OperationalError:
                pass  # the primary went away mid-commit

        writer = threading.Thread(target=write)
        writer.start()
        deadline = time.monotonic() + 10
        while len(acked) < 50 and writer.is_alive() and time.monotonic() < deadline:
            time.sleep(0.01)
        old = pg.primary
        old_procs = [old.proc.pid] + [c.pid for c in psutil.Process(old.proc.pid).children()]
        pg.kill_primary()
        stopped.set()
        writer.join(10)
        assert not writer.is_alive()
        assert len(acked) >= 50, "the writer made too little progress before the kill"
        assert not any(_alive(p) for p in old_procs), "kill_primary left processes of the primary"

        t0 = time.monotonic()
        pg.promote_standby(timeout=30)
        promote_s = time.monotonic() - t0
        assert pg.primary is not old and set(pg.pids()) == {"primary"}
        with psycopg.connect(url, autocommit=True) as conn:  # the multi-host URL finds the new primary
            assert conn.info.port == pg.primary.port
            assert not conn.execute("SELECT pg_is_in_recovery()").fetchone()[0]
            assert conn.execute("SHOW synchronous_standby_names").fetchone()[0] == ""
            present = {r[0] for r in conn.execute("SELECT seq FROM events").fetchall()}
            missing = sorted(set(acked) - present)
            assert not missing, f"acknowledged commits lost in the failover: {missing[:10]}"
            assert 0 in present
            conn.execute("INSERT INTO events VALUES (-1)")  # writes again, without a standby to wait for
            assert conn.execute("SELECT count(*) FROM events WHERE seq = -1").fetchone()[0] == 1
        print(f"acknowledged before the kill: {len(acked)}; promote: {promote_s:.2f} s")
        assert pg.url == f"postgresql://postgres@127.0.0.1:{pg.primary.port}/flowrank?target_session_attrs=read-write&connect_timeout=5"
        with pytest.raises(RuntimeError):
            pg.standby_url


def test_crash_restart_and_stop_leave_nothing(pg_root):
    pg = PgCluster(pg_root).start()
    try:
        with psycopg.connect(pg.primary_url, autocommit=True) as conn:
            conn.execute("CREATE TABLE t (a int)")
            conn.execute("INSERT INTO t VALUES (1)")
        pg.kill_primary()
        assert set(pg.pids()) == {"standby"}
        pg.restart_primary()  # crash recovery from the WAL; the standby is sync again
        with psycopg.connect(pg.url, autocommit=True) as conn:
            assert conn.execute("SELECT a FROM t").fetchall() == [(1,)]
            conn.execute("INSERT INTO t VALUES (2)")
        pg.wait_sync(10)

        procs = _cluster_processes(pg)
        dirs = pg.data_dirs()
        assert len(dirs) == 2 and all((d / "PG_VERSION").is_file() for d in dirs)
        assert len(procs) >= 2 * 4  # two postmasters and their auxiliary processes
    finally:
        pg.stop()
    assert not [p for p in procs if _alive(p)], "stop() left processes of the cluster"
    assert not any(d.exists() for d in dirs) and not pg_root.exists()
    assert pg.pids() == {} and pg.data_dirs() == []
    pg.stop()  # idempotent


def test_missing_binaries_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(pgc.shutil, "which", lambda name: None)
    monkeypatch.setattr(pgc.glob, "glob", lambda pattern: [])
    with pytest.raises(RuntimeError, match="install Debian's postgresql"):
        pgc.find_bindir()
    with pytest.raises(RuntimeError, match="binaries not found"):
        PgCluster("/nonexistent/never-made").start()
    assert not Path("/nonexistent/never-made").exists()


def test_a_killed_primary_is_rebuilt_as_the_standby_and_the_pair_fails_over_again(pg_root):
    """kill_primary, promote_standby, rebuild_standby (the old primary re-cloned on its old port), twice:
    the URL taken at the start writes through both failovers and every committed row survives."""
    with PgCluster(pg_root) as cluster:
        url = cluster.url
        ports = sorted([cluster.primary.port, cluster.standby.port])
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE TABLE t (i int)")
        for i in range(2):
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute("INSERT INTO t VALUES (%s)", (i,))
            cluster.kill_primary()
            cluster.promote_standby()
            cluster.rebuild_standby()
            assert sorted([cluster.primary.port, cluster.standby.port]) == ports
        with psycopg.connect(url, autocommit=True) as conn:
            assert [r[0] for r in conn.execute("SELECT i FROM t ORDER BY i")] == [0, 1]
        with psycopg.connect(cluster.standby_url, autocommit=True) as conn:
            cluster.wait_replay()
            assert [r[0] for r in conn.execute("SELECT i FROM t ORDER BY i")] == [0, 1]


def test_listen_adds_addresses_and_trusted_networks_a_rebuilt_standby_keeps(pg_root):
    """listen=[...]: both servers listen there too (node.conf), pg_hba.conf trusts the networks for normal
    and replication connections, url_for(host=...) names both servers at that address; a standby rebuilt
    after a failover gets the same."""
    with PgCluster(pg_root, listen=["127.0.0.2"], trust=["127.0.0.2/32"]) as cluster:
        assert cluster.trust == ["127.0.0.2/32"]
        url = cluster.url_for(host="127.0.0.2")
        assert url.startswith(f"postgresql://postgres@127.0.0.2:{cluster.primary.port},127.0.0.2:{cluster.standby.port}/")
        with pytest.raises(ValueError, match="do not listen"):
            cluster.url_for(host="127.0.0.3")
        hba = (cluster.primary.data / "pg_hba.conf").read_text()
        assert "host    all             all         127.0.0.2/32" in hba
        assert "host    replication     all         127.0.0.2/32" in hba
        cluster.kill_primary()
        cluster.promote_standby()
        cluster.rebuild_standby()
        for node in (cluster.primary, cluster.standby):
            with psycopg.connect(node.url("postgres", "127.0.0.2"), autocommit=True) as conn:
                assert conn.execute("SHOW listen_addresses").fetchone()[0] == "127.0.0.1,127.0.0.2"
                assert conn.info.host == "127.0.0.2"
            assert "127.0.0.2/32" in (node.data / "pg_hba.conf").read_text()
        with psycopg.connect(url, autocommit=True) as conn:
            assert not conn.execute("SELECT pg_is_in_recovery()").fetchone()[0]
    assert PgCluster(pg_root, listen=["10.231.7.1"]).trust == ["10.231.7.0/24"]  # by default each address's /24

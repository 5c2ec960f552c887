"""A private PostgreSQL primary and synchronous hot standby for tests and benchmarks.

Issue 40 moves the event log into PostgreSQL, with a hot standby and failover. Its tests
and benchmarks need a real pair of servers they own: :class:`PgCluster` makes one under a
directory it is given, on free loopback ports, and takes it down again, so that a test can
kill the primary the way a machine loss would, promote the standby, and check that every
commit acknowledged before the kill is still there.

What it starts:

* a **primary** (``initdb`` with trust auth on the unix socket and 127.0.0.1, replication
  included, and on the networks of ``listen``, see below; ``wal_level=replica``, ``synchronous_commit=on``, ``fsync=on``,
  ``wal_recycle=off``, small ``shared_buffers`` and ``max_wal_size``) holding a database
  ``flowrank``;
* unless ``standby=False``, a **synchronous streaming standby**: ``pg_basebackup -R -X
  stream -S <slot>`` from the primary through a physical replication slot, ``hot_standby=on``,
  named by its ``application_name`` in the primary's ``synchronous_standby_names``. ``start()``
  returns once ``pg_stat_replication`` on the primary shows it ``streaming`` and ``sync``, so
  from then on a commit is acknowledged only after the standby has flushed it.

Servers listen on 127.0.0.1; ``listen=[addr, ...]`` adds addresses that both servers (a rebuilt
standby too) listen on, in each node's ``node.conf``, and ``pg_hba.conf`` trusts their networks
(``trust``, by default each address's /24) for normal and replication connections: the nemesis gives
it the host side of the veth pairs of its FlowRank nodes' network namespaces (benchmarks/netns.py),
and each node a URL naming both servers at its own address (``url_for(host=addr)``). The addresses
must exist before :meth:`PgCluster.start` (a server binds those it can and logs the others).

Its use::

    with PgCluster(tmp_dir).start() as pg:
        url = pg.create_database("log_test")   # multi-host, target_session_attrs=read-write
        ...                                    # write through url
        pg.kill_primary()                      # SIGKILL the postmaster and all its children
        pg.promote_standby()                   # the standby is now the primary
        ...                                    # the same url reaches it

Postgres will not run as root: when this process is root, every server program runs as
the ``postgres`` OS user and the directories are given to it (the root directory's parents
must let that user in: a directory under /tmp made for the purpose will do); otherwise they
run as the current user. Every wait is bounded, and a server that fails to start raises a
RuntimeError carrying the tail of its log. ``stop()`` (also on ``__exit__`` and at
interpreter exit) stops every server immediately and removes the directories it made.

Binaries come from ``pg_config --bindir`` or else the newest /usr/lib/postgresql/*/bin;
CI installs Debian's ``postgresql`` (.ci/run). Only the standard library and psycopg 3.
"""

from __future__ import annotations

import atexit
import glob
import ipaddress
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import psycopg

OS_USER = "postgres"  # who runs the servers when we are root
SUPERUSER = "postgres"  # the database superuser initdb creates (-U), whoever runs it
DEFAULT_DB = "flowrank"
_NAME_RE = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
_SOCKET_PATH_MAX = 100  # sun_path is 108 bytes; the socket file adds "/.s.PGSQL.NNNNN"

# Settings for a test server: durable (fsync, synchronous commit), small, loopback only.
_PRIMARY_CONF = """
# --- benchmarks/pg_cluster.py ---
listen_addresses = '127.0.0.1'
max_connections = 100
shared_buffers = 64MB
wal_level = replica
max_wal_senders = 10
max_replication_slots = 10
hot_standby = on
hot_standby_feedback = on
fsync = on
synchronous_commit = on
full_page_writes = on
wal_recycle = off
max_wal_size = 256MB
min_wal_size = 80MB
wal_receiver_status_interval = 1s
wal_sender_timeout = 10s
wal_receiver_timeout = 10s
wal_retrieve_retry_interval = 200ms
logging_collector = off
log_line_prefix = '%m [%p] '
log_min_messages = warning
# port, socket directory, listen_addresses: this node's own, in node.conf (a base backup copies this file)
include_if_exists = 'node.conf'
"""

_HBA = """\
# benchmarks/pg_cluster.py: trust on the unix socket and loopback, replication included
local   all             all                         trust
host    all             all         127.0.0.1/32    trust
local   replication     all                         trust
host    replication     all         127.0.0.1/32    trust
"""


def _hba(trust: Sequence[str]) -> str:
    """pg_hba.conf: the unix socket and loopback, and every network of ``trust``, replication included."""
    extra = "".join(f"host    all             all         {net:<15} trust\n"
                    f"host    replication     all         {net:<15} trust\n" for net in trust)
    return _HBA + (f"# the networks of PgCluster(listen=...)\n{extra}" if extra else "")


def find_bindir() -> Path:
    """The directory of the PostgreSQL server programs: ``pg_config --bindir`` when it names
    one that holds ``initdb``, else the newest ``/usr/lib/postgresql/<version>/bin``.
    Raises RuntimeError when there is none."""
    pg_config = shutil.which("pg_config")
    if pg_config:
        try:
            out = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True, timeout=10).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            out = ""
        if out and (Path(out) / "initdb").is_file():
            return Path(out)

    def version(path: str) -> tuple[int, ...]:
        part = Path(path).parent.name
        return tuple(int(x) for x in re.findall(r"\d+", part)) or (0,)

    found = [d for d in glob.glob("/usr/lib/postgresql/*/bin") if (Path(d) / "initdb").is_file()]
    if found:
        return Path(max(found, key=version))
    raise RuntimeError("PostgreSQL server binaries not found (no pg_config --bindir with initdb, nothing in "
                       "/usr/lib/postgresql/*/bin): install Debian's postgresql package (.ci/run does)")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# --------------------------------------------------------------------------- processes (/proc)

def _alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie (an exited child nobody reaped)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rindex(b")") + 2:][:1] not in (b"Z", b"X")


def _children(pid: int) -> list[int]:
    """The live processes whose parent is ``pid`` (a postmaster's backends, walsender, ...)."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(b")") + 2:].split()
        if int(fields[1]) == pid and fields[0] not in (b"Z", b"X"):
            out.append(int(entry))
    return out


def _signal(pids: list[int], sig: int) -> None:
    for p in pids:
        try:
            os.kill(p, sig)
        except ProcessLookupError:
            pass


def _wait_gone(pids: list[int], timeout: float) -> list[int]:
    """Wait until none of ``pids`` is alive; returns those still alive at the deadline."""
    deadline = time.monotonic() + timeout
    left = [p for p in pids if _alive(p)]
    while left and time.monotonic() < deadline:
        time.sleep(0.02)
        left = [p for p in left if _alive(p)]
    return left


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


# --------------------------------------------------------------------------- one server

@dataclass
class _Node:
    """One PostgreSQL server: its directory (data/, server.log, sockets), port and postmaster."""

    name: str
    dir: Path
    port: int
    pid: int | None = None  # the postmaster's
    proc: subprocess.Popen | None = None

    @property
    def data(self) -> Path:
        return self.dir / "data"

    @property
    def log(self) -> Path:
        return self.dir / "server.log"

    @property
    def slot(self) -> str:
        return f"slot_{self.name}"

    def conninfo(self, dbname: str) -> str:
        return f"host=127.0.0.1 port={self.port} user={SUPERUSER} dbname={dbname} connect_timeout=5"

    def url(self, dbname: str, host: str = "127.0.0.1") -> str:
        return f"postgresql://{SUPERUSER}@{host}:{self.port}/{dbname}"

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


class PgCluster:
    """A PostgreSQL primary and (``standby=True``, the default) a synchronous streaming hot
    standby under ``root``, on free 127.0.0.1 ports. See the module docstring.

    Roles move: after :meth:`promote_standby` the old standby is ``primary`` and there is no
    standby; the old primary stays in :meth:`data_dirs` and is removed by :meth:`stop`.
    """

    def __init__(self, root: str | Path, *, standby: bool = True, start_timeout: float = 60.0,
                 listen: Sequence[str] = (), trust: Sequence[str] | None = None):
        self.root = Path(root).absolute()
        self.listen = [str(ipaddress.ip_address(a)) for a in listen]  # besides 127.0.0.1
        self.trust = [str(ipaddress.ip_network(n, strict=False)) for n in (
            trust if trust is not None else dict.fromkeys(f"{a}/24" for a in self.listen))]
        self.with_standby = standby
        self.start_timeout = start_timeout
        self.bindir: Path | None = None
        self._nodes: list[_Node] = []  # every node made, for data_dirs() and stop()
        self._primary: _Node | None = None
        self._standby: _Node | None = None
        self._made_root = False
        self._started = False
        self._sockdir: Path | None = None  # the socket directory when root's path is too long for one

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> "PgCluster":
        """initdb and start the primary, create database ``flowrank``; then base-backup and
        start the standby and wait until it is a ``sync`` standby. On any failure everything
        started so far is stopped and removed before the error propagates. Returns self."""
        if self._started:
            return self
        self.bindir = find_bindir()
        self._started = True
        atexit.register(self.stop)
        try:
            if not self.root.exists():
                self.root.mkdir(parents=True)
                self.root.chmod(0o755)
                self._made_root = True
            primary = self._new_node()
            self._initdb(primary)
            self._start_node(primary)
            self._primary = primary
            with self._connect(primary) as conn:
                conn.execute(f"CREATE DATABASE {DEFAULT_DB}")
            if self.with_standby:
                self._add_standby()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop every server this cluster started (immediate shutdown: SIGQUIT, then SIGKILL
        of the postmaster and its children if it lingers), then remove the node directories
        (and ``root`` if start() made it). Idempotent."""
        atexit.unregister(self.stop)
        for node in self._nodes:
            self._stop_node(node)
        for node in self._nodes:
            shutil.rmtree(node.dir, ignore_errors=True)
        if self._sockdir is not None:
            shutil.rmtree(self._sockdir, ignore_errors=True)
            self._sockdir = None
        if self._made_root:
            shutil.rmtree(self.root, ignore_errors=True)
            self._made_root = False
        self._nodes.clear()
        self._primary = self._standby = None
        self._started = False

    def __enter__(self) -> "PgCluster":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ addresses

    @property
    def primary(self) -> _Node:
        if self._primary is None:
            raise RuntimeError("PgCluster is not started")
        return self._primary

    @property
    def standby(self) -> _Node:
        if self._standby is None:
            raise RuntimeError("PgCluster has no standby (standby=False, or it was promoted)")
        return self._standby

    def url_for(self, dbname: str = DEFAULT_DB, role: str | None = None, host: str = "127.0.0.1") -> str:
        """A libpq URL for ``dbname``. ``role=None``: every live role's host in one
        multi-host URL, primary first, ``target_session_attrs=read-write`` (a client that
        keeps it reaches whichever is primary after a failover); ``"primary"`` or
        ``"standby"``: that server alone. A promoted-away old primary is never listed.
        ``host``: the address to reach the servers at, 127.0.0.1 or one of ``listen``."""
        if host != "127.0.0.1" and host not in self.listen:
            raise ValueError(f"the servers do not listen on {host!r} (listen={self.listen})")
        if role == "primary":
            return self.primary.url(dbname, host)
        if role == "standby":
            return self.standby.url(dbname, host)
        if role is not None:
            raise ValueError(f"role must be None, 'primary' or 'standby', not {role!r}")
        hosts = ",".join(f"{host}:{n.port}" for n in (self._primary, self._standby) if n is not None)
        if not hosts:
            raise RuntimeError("PgCluster is not started")
        return f"postgresql://{SUPERUSER}@{hosts}/{dbname}?target_session_attrs=read-write&connect_timeout=5"

    @property
    def url(self) -> str:
        return self.url_for(DEFAULT_DB)

    @property
    def primary_url(self) -> str:
        return self.url_for(DEFAULT_DB, "primary")

    @property
    def standby_url(self) -> str:
        return self.url_for(DEFAULT_DB, "standby")

    def data_dirs(self) -> list[Path]:
        """The data directory of every server this cluster made (old primaries included)."""
        return [n.data for n in self._nodes]

    def pids(self) -> dict[str, int]:
        """Postmaster pid of each running server by role: ``primary``, ``standby``, and
        ``old_primary`` for a promoted-away primary that still runs."""
        out = {}
        for node in self._nodes:
            if node.proc is not None and node.proc.poll() is None:
                role = "primary" if node is self._primary else "standby" if node is self._standby else "old_primary"
                out[role] = node.proc.pid
        return out

    # ------------------------------------------------------------------ operations

    def create_database(self, name: str, timeout: float = 30.0) -> str:
        """Create the empty database ``name`` on the primary; with a standby, wait until the
        standby has replayed it. Returns its multi-host URL."""
        if not _NAME_RE.match(name):
            raise ValueError(f"database name must match {_NAME_RE.pattern}: {name!r}")
        with self._connect(self.primary) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        if self._standby is not None:
            self.wait_replay(timeout)
        return self.url_for(name)

    def wait_sync(self, timeout: float = 30.0) -> None:
        """Wait until the primary's ``pg_stat_replication`` shows the standby ``streaming``
        with ``sync_state='sync'``. TimeoutError (with what it saw and the standby's log tail)
        otherwise."""
        standby = self.standby
        deadline = time.monotonic() + timeout
        seen: object = None
        while True:
            try:
                with self._connect(self.primary) as conn:
                    seen = conn.execute("SELECT state, sync_state FROM pg_stat_replication WHERE application_name = %s",
                                        (standby.name,)).fetchall()
                if ("streaming", "sync") in seen:
                    return
            except psycopg.OperationalError as e:
                seen = e
            if time.monotonic() >= deadline:
                raise TimeoutError(f"standby {standby.name} not a streaming sync standby after {timeout}s "
                                   f"(pg_stat_replication: {seen!r}); its log:\n{_tail(standby.log)}")
            time.sleep(0.05)

    def wait_replay(self, timeout: float = 30.0) -> None:
        """Wait until the standby has replayed everything the primary has written so far
        (synchronous commit guarantees the standby flushed a commit, not that a query there
        sees it yet)."""
        standby = self.standby
        with self._connect(self.primary) as conn:
            lsn = conn.execute("SELECT pg_current_wal_lsn()").fetchone()[0]
        deadline = time.monotonic() + timeout
        while True:
            with self._connect(standby) as conn:
                if conn.execute("SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", (lsn,)).fetchone()[0]:
                    return
            if time.monotonic() >= deadline:
                raise TimeoutError(f"standby {standby.name} has not replayed up to {lsn} after {timeout}s")
            time.sleep(0.02)

    def kill_primary(self, timeout: float = 10.0) -> None:
        """SIGKILL the primary's postmaster and every child process at once, as a machine
        loss would: nothing is flushed or shut down cleanly. The roles do not change (the
        primary is down until :meth:`restart_primary` or :meth:`promote_standby`)."""
        node = self.primary
        proc = node.proc
        if proc is None or proc.poll() is not None:
            raise RuntimeError(f"primary {node.name} is not running")
        _signal([proc.pid], signal.SIGSTOP)  # no new children between listing and killing
        victims = _children(proc.pid)
        _signal([proc.pid] + victims, signal.SIGKILL)
        proc.wait(timeout)
        left = _wait_gone(victims, timeout)
        if left:
            raise RuntimeError(f"primary processes {left} still alive {timeout}s after SIGKILL")
        node.proc = node.pid = None

    def promote_standby(self, timeout: float = 30.0) -> None:
        """``pg_ctl promote`` the standby and wait until it accepts read-write transactions.
        It becomes ``primary`` with ``synchronous_standby_names`` empty (it has no standby,
        and a commit must not wait for one); the old primary is left as it is (killed, or
        still running: split brain is the caller's to test) and no longer in :attr:`url`."""
        node = self.standby
        self._run([self._bin("pg_ctl"), "promote", "-D", str(node.data), "-w", "-t", str(int(timeout)), "-s"],
                  timeout=timeout + 5, node=node)
        deadline = time.monotonic() + timeout
        while True:
            try:
                with self._connect(node) as conn:
                    if not conn.execute("SELECT pg_is_in_recovery()").fetchone()[0]:
                        conn.execute("ALTER SYSTEM SET synchronous_standby_names = ''")
                        conn.execute("SELECT pg_reload_conf()")
                        with conn.transaction():
                            conn.execute("SELECT pg_current_xact_id()")  # a transaction id: read-write
                        break
            except psycopg.OperationalError:
                pass
            if time.monotonic() >= deadline:
                raise TimeoutError(f"promoted standby {node.name} not read-write after {timeout}s; its log:\n{_tail(node.log)}")
            time.sleep(0.05)
        self._primary, self._standby = node, None

    def restart_primary(self, timeout: float = 60.0) -> None:
        """Start the primary again: after :meth:`kill_primary` this is crash recovery from
        its WAL; a running primary is shut down (fast) first. With a standby, waits until it
        is a sync standby again."""
        node = self.primary
        self._stop_node(node, signal.SIGINT, timeout)  # fast shutdown, if it runs
        self._start_node(node, timeout=timeout)
        if self._standby is not None:
            self.wait_sync(timeout)

    def rebuild_standby(self) -> None:
        """After :meth:`promote_standby` of a killed primary: the old primary comes back as the new
        primary's synchronous standby, on its old port, from a fresh base backup (as an operator or
        Patroni re-clones a lost member), so a multi-host URL given before names both servers again
        and the pair can fail over once more."""
        if self._standby is not None:
            raise RuntimeError("the cluster has a standby already")
        old = next((n for n in reversed(self._nodes) if n is not self._primary and not n.running()), None)
        if old is None:
            raise RuntimeError("no stopped old primary to rebuild as the standby")
        shutil.rmtree(old.data, ignore_errors=True)
        self._add_standby(old)

    # ------------------------------------------------------------------ internals

    def _bin(self, name: str) -> str:
        assert self.bindir is not None
        return str(self.bindir / name)

    def _as_root(self) -> bool:
        return os.geteuid() == 0

    def _owner_ids(self) -> tuple[int, int]:
        if not self._as_root():
            return os.getuid(), os.getgid()
        import pwd

        try:
            pw = pwd.getpwnam(OS_USER)
        except KeyError:
            raise RuntimeError(f"running as root, and there is no {OS_USER!r} OS user to run PostgreSQL as") from None
        return pw.pw_uid, pw.pw_gid

    def _owner_kw(self, node: _Node) -> tuple[dict, dict]:
        """Popen keywords and environment for a server program: run as the servers' owner,
        in the node's directory, with no PG* variables of ours leaking in."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        env["LC_ALL"] = "C"
        kw: dict = {"cwd": node.dir}
        if self._as_root():
            uid, gid = self._owner_ids()
            kw.update(user=uid, group=gid, extra_groups=[])
            env["HOME"] = str(node.dir)
        return kw, env

    def _run(self, argv: list[str], *, timeout: float, node: _Node) -> str:
        """Run a server program to completion; its output, or RuntimeError with the output
        and the node's log tail."""
        kw, env = self._owner_kw(node)
        try:
            done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout, **kw)
        except subprocess.TimeoutExpired as e:
            raise RuntimeError(f"{Path(argv[0]).name} timed out after {timeout}s; {node.name} log:\n{_tail(node.log)}") from e
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} failed ({done.returncode}):\n{done.stdout}{done.stderr}\n"
                               f"{node.name} log ({node.log}):\n{_tail(node.log)}")
        return done.stdout

    def _spawn(self, argv: list[str], node: _Node) -> subprocess.Popen:
        """Start a long-running server program, output appended to the node's log, in a
        session of its own (a Ctrl-C meant for the tests does not reach it; stop() does)."""
        kw, env = self._owner_kw(node)
        with open(node.log, "ab") as log:
            return subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True, **kw)

    def _new_node(self) -> _Node:
        name = f"n{len(self._nodes)}"
        node = _Node(name, self.root / name, free_port())
        node.dir.mkdir(mode=0o700)
        self._nodes.append(node)
        uid, gid = self._owner_ids()
        os.chown(node.dir, uid, gid)
        if self._as_root():
            probe = subprocess.run(["test", "-w", str(node.dir), "-a", "-x", str(node.dir)], user=uid, group=gid,
                                   extra_groups=[], timeout=10)
            if probe.returncode != 0:
                raise RuntimeError(f"the {OS_USER!r} OS user cannot reach {node.dir}: give PgCluster a root whose "
                                   f"parent directories it may enter (e.g. a directory made under /tmp, mode 0755)")
        return node

    def _socket_dir(self, node: _Node) -> Path:
        if len(str(node.dir)) + 16 <= _SOCKET_PATH_MAX:
            return node.dir
        if self._sockdir is None:
            import tempfile

            self._sockdir = Path(tempfile.mkdtemp(prefix="frpg-", dir="/tmp"))
            self._sockdir.chmod(0o755)
            os.chown(self._sockdir, *self._owner_ids())
        return self._sockdir

    def _write_node_conf(self, node: _Node) -> None:
        sock = str(self._socket_dir(node)).replace("'", "''")
        path = node.data / "node.conf"
        listen = ",".join(["127.0.0.1", *self.listen])
        path.write_text(f"# this node's own settings (benchmarks/pg_cluster.py)\nport = {node.port}\n"
                        f"unix_socket_directories = '{sock}'\nlisten_addresses = '{listen}'\n")
        os.chown(path, *self._owner_ids())

    def _initdb(self, node: _Node) -> None:
        self._run([self._bin("initdb"), "-D", str(node.data), "-U", SUPERUSER, "--auth=trust", "-E", "UTF8",
                   "--locale=C", "--no-instructions"], timeout=120, node=node)
        with open(node.data / "postgresql.conf", "a") as f:
            f.write(_PRIMARY_CONF)
        (node.data / "pg_hba.conf").write_text(_hba(self.trust))
        self._write_node_conf(node)

    def _start_node(self, node: _Node, timeout: float | None = None) -> None:
        """Start the postmaster (our child: we reap it) and wait until it accepts connections;
        a port lost to another process in the meantime is replaced by a new free one (three
        tries). RuntimeError with the log tail if it exits or is not ready in time."""
        timeout = self.start_timeout if timeout is None else timeout
        for attempt in range(3):
            log_size = node.log.stat().st_size if node.log.exists() else 0
            proc = self._spawn([self._bin("postgres"), "-D", str(node.data)], node)
            node.proc, node.pid = proc, proc.pid
            deadline = time.monotonic() + timeout
            while proc.poll() is None and time.monotonic() < deadline:
                try:
                    with self._connect(node):
                        return
                except psycopg.OperationalError:
                    time.sleep(0.05)
            with open(node.log, "rb") as f:
                f.seek(log_size)
                fresh = f.read().decode(errors="replace")
            self._stop_node(node)
            if attempt < 2 and "could not bind" in fresh:
                node.port = free_port()
                self._write_node_conf(node)
                continue
            why = f"exited with {proc.returncode}" if proc.returncode is not None else f"not ready after {timeout}s"
            raise RuntimeError(f"PostgreSQL {node.name} ({node.data}, port {node.port}) {why}; its log:\n{_tail(node.log)}")

    def _stop_node(self, node: _Node, sig: int = signal.SIGQUIT, timeout: float = 15.0) -> None:
        """Stop the node's postmaster: SIGQUIT (immediate shutdown) by default, SIGINT for a
        fast one; SIGKILL of it and its children if it lingers past ``timeout``."""
        proc, node.proc, node.pid = node.proc, None, None
        if proc is None:
            return
        if proc.poll() is None:
            victims = _children(proc.pid)
            _signal([proc.pid], sig)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                _signal([proc.pid] + _children(proc.pid), signal.SIGKILL)
                proc.wait(5.0)
            _signal([p for p in victims if _alive(p)], signal.SIGKILL)
            _wait_gone(victims, 5.0)
        proc.wait(5.0)

    def _connect(self, node: _Node, dbname: str = "postgres") -> psycopg.Connection:
        return psycopg.connect(node.conninfo(dbname), autocommit=True)

    def _add_standby(self, node: _Node | None = None) -> None:
        primary = self.primary
        node = node or self._new_node()
        with self._connect(primary) as conn:
            if not conn.execute("SELECT 1 FROM pg_replication_slots WHERE slot_name = %s", (node.slot,)).fetchone():
                conn.execute("SELECT pg_create_physical_replication_slot(%s)", (node.slot,))
        self._run([self._bin("pg_basebackup"), "-D", str(node.data), "-h", "127.0.0.1", "-p", str(primary.port),
                   "-U", SUPERUSER, "-R", "-X", "stream", "-S", node.slot, "-c", "fast"], timeout=120, node=node)
        # -R wrote primary_conninfo and primary_slot_name into postgresql.auto.conf; ours names the
        # standby (application_name), which synchronous_standby_names refers to
        auto = node.data / "postgresql.auto.conf"
        kept = [ln for ln in auto.read_text().splitlines() if not ln.startswith(("primary_conninfo", "primary_slot_name"))]
        kept += [f"primary_conninfo = 'host=127.0.0.1 port={primary.port} user={SUPERUSER} application_name={node.name}'",
                 f"primary_slot_name = '{node.slot}'"]
        auto.write_text("\n".join(kept) + "\n")
        self._write_node_conf(node)
        self._start_node(node)
        self._standby = node
        with self._connect(primary) as conn:
            conn.execute(f"ALTER SYSTEM SET synchronous_standby_names = '\"{node.name}\"'")
            conn.execute("SELECT pg_reload_conf()")
        self.wait_sync(self.start_timeout)

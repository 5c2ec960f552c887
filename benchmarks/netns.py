"""Network namespaces joined to the host by veth pairs: a partition that a test can cut and restore.

The nemesis (benchmarks/nemesis.py, issue 40) partitions the active FlowRank node from PostgreSQL.
Every node runs in a network namespace of its own, joined to the host by one veth pair::

    host namespace                          namespace frns-<pid>-<k>
    <host_if> 10.231.N.1/24  <==== veth ====>  eth0 10.231.N.2/24  (lo up)

A process in the namespace (``link.argv([...])``: ``ip netns exec``) reaches servers on the host
that listen on ``10.231.N.1``, and the host reaches servers in the namespace on ``10.231.N.2``;
nothing else (the namespace has no default route and the host does not forward). :meth:`Link.cut`
sets the namespace's end of the veth down: the namespace loses its route to the host at once and
the host's packets to it are dropped at the veth (the host side stays up, so its connected route
stays there and nothing to 10.231.N.0/24 ever leaves by the default route). :meth:`Link.restore`
sets it up again; addresses and listening sockets survive a cut.

Names carry this process's pid (``frns-<pid>-<k>``, host side ``frv<pid>-<k>``, at most 15
characters), and the N of each 10.231.N.0/24 is one no address on the host uses yet, chosen under an
exclusive lock, so runs in parallel never collide. :meth:`Netns.stop` (also on ``__exit__`` and at
interpreter exit) deletes every veth and namespace it made; :func:`sweep_stale` removes those of
processes that no longer run (an owner killed with SIGKILL). Needs root (CAP_NET_ADMIN) and the
``ip`` program (iproute2); :func:`unavailable` says why not when it cannot work here.
"""

from __future__ import annotations

import atexit
import fcntl
import itertools
import os
import re
import shutil
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

NETNS_PREFIX = "frns-"
VETH_PREFIX = "frv"
SUBNET = "10.231"  # 10.231.N.0/24, N in 1..254
NODE_IF = "eth0"
LOCK_PATH = Path("/run/lock/flowrank-netns.lock") if Path("/run/lock").is_dir() else Path("/tmp/flowrank-netns.lock")
_NETNS_RE = re.compile(rf"^{re.escape(NETNS_PREFIX)}(\d+)-(\d+)$")
_VETH_RE = re.compile(rf"^{re.escape(VETH_PREFIX)}(\d+)-(\d+)$")
_counter = itertools.count()
_counter_lock = threading.Lock()
_probe: list[str | None] = []  # the cached answer of unavailable()


class NetnsError(RuntimeError):
    """An ``ip`` command failed."""


def ip(*args: str, check: bool = True, timeout: float = 15.0) -> subprocess.CompletedProcess:
    """Run ``ip <args>``; NetnsError with its output if it fails and ``check``."""
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=timeout)
    if check and done.returncode != 0:
        raise NetnsError(f"ip {' '.join(args)} failed ({done.returncode}): {(done.stderr or done.stdout).strip()}")
    return done


def unavailable() -> str | None:
    """None when namespaces and veth pairs can be made here (Linux, root, ``ip``, and a probe namespace
    with a veth pair was made and removed), else why not. Probed once per process."""
    if _probe:
        return _probe[0]
    why: str | None = None
    if not sys.platform.startswith("linux"):
        why = f"network namespaces are Linux only (this is {sys.platform})"
    elif os.geteuid() != 0:
        why = "network namespaces need root (CAP_NET_ADMIN)"
    elif shutil.which("ip") is None:
        why = "the ip program (iproute2) is not installed"
    else:
        try:
            with Netns(1) as probe:
                probe.links[0].cut()
                probe.links[0].restore()
        except (NetnsError, OSError, subprocess.SubprocessError) as exc:
            why = f"making a network namespace with a veth pair failed: {exc}"
    _probe.append(why)
    return why


def _names() -> tuple[list[str], list[str]]:
    """Every network namespace and host link name that looks like one of ours (any pid)."""
    namespaces = [ln.split()[0] for ln in ip("netns", "list", check=False).stdout.splitlines() if ln.strip()]
    links = [m.group(1).split("@")[0] for m in re.finditer(r"^\d+:\s+(\S+):", ip("-o", "link", "show", check=False).stdout,
                                                           re.MULTILINE)]
    return ([n for n in namespaces if _NETNS_RE.match(n)], [x for x in links if _VETH_RE.match(x)])


def leftovers(pid: int | None = None) -> list[str]:
    """The namespaces and host-side veths of ours that exist now: those of process ``pid`` (default:
    this one), or of any process when ``pid`` is 0."""
    pid = os.getpid() if pid is None else pid
    namespaces, links = _names()
    mine = [n for n in namespaces if pid == 0 or int(_NETNS_RE.match(n).group(1)) == pid]  # type: ignore[union-attr]
    mine += [x for x in links if pid == 0 or int(_VETH_RE.match(x).group(1)) == pid]  # type: ignore[union-attr]
    return mine


def sweep_stale() -> list[str]:
    """Delete the namespaces and veths of ours whose owning process no longer runs; returns their names."""
    namespaces, links = _names()
    gone = []
    for x in links:
        if not Path(f"/proc/{int(_VETH_RE.match(x).group(1))}").exists():  # type: ignore[union-attr]
            ip("link", "del", x, check=False)
            gone.append(x)
    for n in namespaces:
        if not Path(f"/proc/{int(_NETNS_RE.match(n).group(1))}").exists():  # type: ignore[union-attr]
            ip("netns", "del", n, check=False)
            gone.append(n)
    return gone


@dataclass
class Link:
    """One namespace and its veth pair (see the module docstring)."""

    netns: str
    host_if: str
    n: int

    @property
    def host_ip(self) -> str:
        return f"{SUBNET}.{self.n}.1"

    @property
    def node_ip(self) -> str:
        return f"{SUBNET}.{self.n}.2"

    @property
    def network(self) -> str:
        return f"{SUBNET}.{self.n}.0/24"

    def argv(self, argv: list[str]) -> list[str]:
        """``argv`` run inside the namespace (``ip netns exec`` execs it: same pid, same environment)."""
        return ["ip", "netns", "exec", self.netns, *argv]

    def cut(self) -> None:
        """The namespace's end of the veth down: nothing passes between the namespace and the host."""
        ip("-n", self.netns, "link", "set", NODE_IF, "down")

    def restore(self) -> None:
        """The namespace's end up again (its address and route come back with it)."""
        ip("-n", self.netns, "link", "set", NODE_IF, "up")

    def is_cut(self) -> bool:
        shown = ip("-n", self.netns, "-o", "link", "show", NODE_IF).stdout
        return "UP" not in shown.split("<", 1)[-1].split(">", 1)[0].split(",")


class Netns:
    """``count`` namespaces, each joined to the host by a veth pair on a 10.231.N.0/24 of its own."""

    def __init__(self, count: int):
        self.count = count
        self.links: list[Link] = []
        self._made: list[tuple[str, str]] = []  # (kind, name) in the order made: removed in reverse

    def start(self) -> "Netns":
        atexit.register(self.stop)
        try:
            sweep_stale()
            LOCK_PATH.parent.mkdir(parents=True, exist_ok=True)
            with open(LOCK_PATH, "a") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)  # no other run picks the same N between our look and our add
                used = {int(m.group(1)) for m in re.finditer(rf"\binet {re.escape(SUBNET)}\.(\d+)\.",
                                                             ip("-o", "-4", "addr", "show").stdout)}
                free = [n for n in range(1, 255) if n not in used]
                if len(free) < self.count:
                    raise NetnsError(f"fewer than {self.count} free {SUBNET}.N.0/24 networks on this host")
                for n in free[:self.count]:
                    self.links.append(self._make(n))
        except BaseException:
            self.stop()
            raise
        return self

    def _make(self, n: int) -> Link:
        with _counter_lock:
            k = next(_counter) % 10_000
        pid = os.getpid()
        link = Link(netns=f"{NETNS_PREFIX}{pid}-{k}", host_if=f"{VETH_PREFIX}{pid}-{k}", n=n)
        ip("netns", "add", link.netns)
        self._made.append(("netns", link.netns))
        ip("link", "add", link.host_if, "type", "veth", "peer", "name", NODE_IF, "netns", link.netns)
        self._made.append(("link", link.host_if))
        ip("addr", "add", f"{link.host_ip}/24", "dev", link.host_if)
        ip("link", "set", link.host_if, "up")
        ip("-n", link.netns, "addr", "add", f"{link.node_ip}/24", "dev", NODE_IF)
        ip("-n", link.netns, "link", "set", NODE_IF, "up")
        ip("-n", link.netns, "link", "set", "lo", "up")
        return link

    def stop(self) -> None:
        """Delete every veth (both ends go together) and namespace made, newest first. Processes still
        running in a namespace keep it alive after its name is gone: stop them first. Idempotent."""
        atexit.unregister(self.stop)
        errors = []
        for kind, name in reversed(self._made):
            done = ip(*(("link", "del", name) if kind == "link" else ("netns", "del", name)), check=False)
            if done.returncode != 0 and "Cannot find" not in done.stderr and "No such" not in done.stderr:
                errors.append(f"{kind} {name}: {done.stderr.strip()}")
        self._made.clear()
        self.links.clear()
        if errors:
            raise NetnsError("could not remove " + "; ".join(errors))

    def __enter__(self) -> "Netns":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

"""benchmarks.netns: namespaces joined to the host by veth pairs, cut and restored, and nothing left
behind. Needs root and iproute2 (the nemesis falls back to loopback without them; so do these tests:
they skip, saying why)."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading

import pytest

from benchmarks import netns
from benchmarks.netns import Netns

why = netns.unavailable()
pytestmark = pytest.mark.skipif(why is not None, reason=f"no network namespaces here: {why}")


def _echo_server(host: str) -> tuple[socket.socket, int]:
    srv = socket.socket()
    srv.bind((host, 0))
    srv.listen()

    def serve() -> None:
        while True:
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            with conn:
                conn.sendall(b"hi")

    threading.Thread(target=serve, daemon=True).start()
    return srv, srv.getsockname()[1]


def _from_inside(link: netns.Link, host: str, port: int) -> subprocess.CompletedProcess:
    code = f"import socket; s = socket.create_connection(({host!r}, {port}), timeout=3); print(s.recv(2).decode())"
    return subprocess.run(link.argv([sys.executable, "-c", code]), capture_output=True, text=True, timeout=30)


def test_namespaces_reach_the_host_over_their_veth_until_cut_and_leave_nothing():
    with Netns(2) as net:
        a, b = net.links
        assert a.n != b.n and a.netns != b.netns and len(a.host_if) <= 15
        assert (a.host_ip, a.node_ip) == (f"10.231.{a.n}.1", f"10.231.{a.n}.2")
        assert set(netns.leftovers()) == {a.netns, b.netns, a.host_if, b.host_if}
        srv, port = _echo_server(a.host_ip)
        try:
            assert _from_inside(a, a.host_ip, port).stdout.strip() == "hi"
            a.cut()
            assert a.is_cut() and not b.is_cut()
            cut = _from_inside(a, a.host_ip, port)
            assert cut.returncode != 0 and "unreachable" in cut.stderr, cut.stderr
            with pytest.raises(OSError):  # the host's packets to it are dropped, not sent anywhere else
                socket.create_connection((a.node_ip, 9), timeout=0.5)
            a.restore()
            assert not a.is_cut()
            assert _from_inside(a, a.host_ip, port).stdout.strip() == "hi"
        finally:
            srv.close()
    assert netns.leftovers() == []
    net.stop()  # idempotent


def test_a_dead_owners_namespaces_are_swept():
    dead = subprocess.Popen(["true"])
    dead.wait()
    name = f"{netns.NETNS_PREFIX}{dead.pid}-0"
    netns.ip("netns", "add", name)
    try:
        assert name in netns.leftovers(0) and name not in netns.leftovers()
        assert name in netns.sweep_stale()
        assert name not in netns.leftovers(0)
    finally:
        netns.ip("netns", "del", name, check=False)

"""Process hygiene (issue 14 item 5): a run that fails, is interrupted or gets
SIGTERM leaves no process behind. Every process of a run carries a marker
in its environment (inherited by all descendants, even ones that left the
process group), so "nothing left" is checked by scanning /proc for it."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import httpx
import psutil
import pytest

from benchmarks.processes import Owned, Terminated, kill_marked, processes_with_marker, sigterm_raises
from tests.loopback import free_port

ROOT = Path(__file__).resolve().parents[2]
RUN_ENV = "FR_TEST_RUN"
needs_redis = pytest.mark.skipif(shutil.which("redis-server") is None, reason="redis-server not installed")


def _run_child(mode: str, env_extra: dict | None = None, *args):
    """Start the child run with a unique marker; returns (proc, marker)."""
    marker = uuid.uuid4().hex
    env = dict(os.environ, **{RUN_ENV: marker}, **(env_extra or {}))
    proc = subprocess.Popen([sys.executable, "-m", "tests.benchmarks.process_child", mode, *map(str, args)],
                            cwd=ROOT, env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return proc, marker


def _ready(proc) -> int:
    line = proc.stdout.readline()
    assert line.startswith("ready"), (line, proc.stderr.read() if proc.poll() is not None else "")
    return int(line.split()[1])


def _tree(proc, marker: str, at_least: int, timeout: float = 60.0) -> list[psutil.Process]:
    """The run's processes: the child's descendants plus every carrier of the
    marker (redis-server rewrites its environ for its title, so it is found
    through the tree; a process that left the tree is found by the marker)."""
    deadline = time.monotonic() + timeout
    while True:
        root = psutil.Process(proc.pid)
        procs = {p.pid: p for p in [root, *root.children(recursive=True)]}
        for pid in processes_with_marker(marker, RUN_ENV):
            with contextlib.suppress(psutil.Error):
                procs.setdefault(pid, psutil.Process(pid))
        if len(procs) >= at_least:
            return list(procs.values())
        assert time.monotonic() < deadline, procs
        time.sleep(0.05)


def _left_over(marker: str, seen: list[psutil.Process] = ()) -> list[str]:
    """Processes of the run still alive: any marker carrier, and any process
    seen in the run's tree (same pid and start time: not a reused pid)."""
    alive = {pid: None for pid in processes_with_marker(marker, RUN_ENV)}
    for p in seen:
        with contextlib.suppress(psutil.Error):
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                alive[p.pid] = p
    out = []
    for pid in alive:
        with contextlib.suppress(OSError):
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            out.append(f"{pid}: {cmdline}")
    return out


@needs_redis
@pytest.mark.parametrize("how", ["raise", "SIGTERM", "SIGINT"])
def test_a_failed_or_stopped_run_leaves_no_process(how):
    proc, marker = _run_child("raise" if how == "raise" else "wait")
    seen: list[psutil.Process] = []
    try:
        redis_pid = _ready(proc)
        # the child, redis-server, sh, its sleep and the setsid'd sleep (in a session of its own)
        seen = _tree(proc, marker, 5)
        assert redis_pid in {p.pid for p in seen}
        assert len({os.getsid(p.pid) for p in seen}) >= 3
        if how == "raise":
            proc.stdin.write("go\n")
            proc.stdin.flush()
        else:
            proc.send_signal(getattr(signal, how))
        code = _wait_or_dump(proc, 60, lambda: _cleanup(proc, marker, seen))
        err = proc.stderr.read()
        assert code != 0
        assert {"raise": "a scenario failed", "SIGTERM": "Terminated", "SIGINT": "KeyboardInterrupt"}[how] in err
        assert _left_over(marker, seen) == []
    finally:
        _cleanup(proc, marker, seen)


def _wait_or_dump(proc, timeout: float, stop_all) -> int:
    """The child's exit code; if it has not exited in ``timeout``, fail with where its
    threads are (faulthandler on SIGUSR1, process_child) so a hang names its place.
    ``stop_all`` kills the run's processes first: they hold the child's stderr open."""
    sigs: list[str] = []
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(OSError):  # its signal state: pending, blocked, ignored, caught
            sigs = [x for x in Path(f"/proc/{proc.pid}/status").read_text().splitlines() if x.startswith(("Sig", "Shd"))]
        proc.send_signal(signal.SIGUSR1)
        time.sleep(1.0)
        stop_all()
        pytest.fail(f"the run did not exit {timeout} s after the signal ({sigs}); its stacks:\n{proc.stderr.read()}")


def _cleanup(proc, marker: str, seen: list[psutil.Process]) -> None:
    """Whatever the assertions found, this test leaves nothing behind either."""
    proc.kill()
    proc.wait()
    for p in seen:
        with contextlib.suppress(psutil.Error):
            p.kill()
    kill_marked(marker, RUN_ENV)


def _redis_on(port: int) -> list[int]:
    """redis-server processes whose title names ``port`` (its title overwrites its environ)."""
    found = []
    for p in psutil.process_iter(["cmdline"]):
        cmd = " ".join(p.info["cmdline"] or ())
        if "redis-server" in cmd and f":{port}" in cmd:
            found.append(p.pid)
    return found


@needs_redis
def test_redis_server_is_stopped_when_its_start_fails_after_spawning():
    """The run of issue 14: the ``redis`` module was missing, the scenario
    failed after redis-server started, and the server stayed."""
    port = free_port()
    proc, marker = _run_child("no-redis-module", None, port)
    try:
        _ready(proc)
        assert proc.wait(timeout=60) != 0
        assert "ModuleNotFoundError" in proc.stderr.read()
        assert _left_over(marker) == []
        assert _redis_on(port) == []
    finally:
        _cleanup(proc, marker, [])
        for pid in _redis_on(port):
            os.kill(pid, signal.SIGKILL)


def test_owned_stops_the_group_and_escaped_descendants():
    with Owned(["sh", "-c", "setsid sleep 600 & sleep 600"], grace_s=2) as owned:
        deadline = time.monotonic() + 10
        while len(processes_with_marker(owned.marker)) < 3:  # sh, sleep, setsid'd sleep
            assert time.monotonic() < deadline
            time.sleep(0.02)
        leader = owned.pid
    assert processes_with_marker(owned.marker) == []
    assert owned.proc is None and not Path(f"/proc/{leader}/cmdline").exists()


def test_owned_stops_even_when_the_block_raises_and_restores_sigterm():
    # Start from the default policy: an owner released off the main thread by
    # an earlier test leaves the deferring handler installed (by design).
    saved = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        owned = Owned(["sleep", "600"])
        with pytest.raises(ZeroDivisionError):
            with owned:
                assert signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL  # SIGTERM now unwinds
                1 / 0
        assert processes_with_marker(owned.marker) == []
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
    finally:
        signal.signal(signal.SIGTERM, saved)


def test_sigterm_unwinds_like_ctrl_c():
    with pytest.raises(Terminated), sigterm_raises():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler raises before this ends


@pytest.mark.cluster
def test_an_owned_ray_is_gone_after_sigterm():
    tmp = tempfile.mkdtemp(prefix="frp-", dir="/tmp")
    proc, marker = _run_child("ray", {"RAY_TMPDIR": tmp, "RAY_AUTH_MODE": "disabled", "RAY_ADDRESS": ""})
    seen: list[psutil.Process] = []
    try:
        _ready(proc)
        seen = _tree(proc, marker, 3)  # the driver, GCS, raylet (and more)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=90) != 0
        assert _left_over(marker, seen) == []
    finally:
        _cleanup(proc, marker, seen)
        shutil.rmtree(tmp, ignore_errors=True)


def test_flowrank_serve_of_the_http_benchmarks_is_stopped_on_success_and_on_a_failed_start():
    from benchmarks.http_load import Server

    server = Server("local", 1)
    try:
        assert httpx.get(f"{server.url}/readyz", timeout=5).status_code == 200
        pid, marker = server.proc.pid, server.owned.marker
    finally:
        server.stop()
    assert processes_with_marker(marker) == [] and not Path(f"/proc/{pid}/cmdline").exists()
    with pytest.raises(RuntimeError, match="flowrank serve exited"):
        Server("local", 1, ["--delta-retention", "-5"])  # refused at start
    left = [p for p in psutil.process_iter(["cmdline"]) if "--delta-retention -5" in " ".join(p.info["cmdline"] or ())]
    assert left == []


def test_an_owner_stopped_from_another_thread_leaves_sigterm_to_the_default_again():
    import threading

    before = signal.getsignal(signal.SIGTERM)
    owned = Owned(["sleep", "600"])
    owned.start()
    t = threading.Thread(target=owned.stop)
    t.start()
    t.join(30)
    assert processes_with_marker(owned.marker) == []
    with Owned(["sleep", "600"]):  # the next owner takes the handler over on the main thread
        pass
    assert signal.getsignal(signal.SIGTERM) == before


def _line_starting(proc, prefix: str, timeout: float) -> list[str]:
    """The child's output lines up to and including the first that starts
    with ``prefix`` (read in a thread, so a silent child fails the test)."""
    import queue
    import threading

    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in iter(proc.stdout.readline, "")], daemon=True).start()
    got: list[str] = []
    deadline = time.monotonic() + timeout
    while True:
        try:
            got.append(lines.get(timeout=max(0.01, deadline - time.monotonic())))
        except queue.Empty:
            raise AssertionError(f"no line starting {prefix!r} within {timeout} s: {got}") from None
        if got[-1].startswith(prefix):
            return got


@pytest.mark.parametrize("how", ["SIGINT", "SIGTERM", "SIGINT twice"])
def test_an_interrupted_soak_stops_its_server_and_its_load(how, tmp_path):
    """Ctrl-C or SIGTERM in the steady phase of ``python -m benchmarks soak``:
    it exits promptly with 128 + the signal, and neither the server it started
    nor anything else of the run is left. A second Ctrl-C while it stops (an
    impatient user) does not cut the stopping short."""
    marker = uuid.uuid4().hex
    env = dict(os.environ, **{RUN_ENV: marker}, PYTHONUNBUFFERED="1")
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "benchmarks", "soak", "--engine", "local", "--minutes", "10",
                             "--players", "200", "--batch", "20", "--writers", "2", "--readers", "1",
                             "--subscribers", "1", "--sample-s", "1", "--calibrate-s", "1", "--out", str(out)],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seen: list[psutil.Process] = []
    try:
        _line_starting(proc, "soak: t=", timeout=120)  # a sample of the steady phase: load and server running
        seen = _tree(proc, marker, 2)  # the soak and its flowrank serve
        assert any("gateway" in " ".join(p.cmdline()) for p in seen)
        signum = getattr(signal, how.split()[0])
        proc.send_signal(signum)
        if how.endswith("twice"):
            time.sleep(0.05)
            proc.send_signal(signum)
        code = proc.wait(timeout=60)
        assert code == 128 + signum
        assert _left_over(marker, seen) == []
        assert not (out / "soak.json").exists()  # an interrupted run writes no result
    finally:
        _cleanup(proc, marker, seen)

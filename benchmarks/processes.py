"""Owned child processes: whatever a benchmark or test starts, it stops, on
every exit path (success, exception, Ctrl-C, SIGTERM).

Issue 14: a ``python -m benchmarks run --quick`` whose Redis scenarios failed
left nine ``redis-server`` processes running. Three things make a child
"owned" here:

* **Its own session** (``start_new_session=True``): the child and everything
  it forks share a process group that can be signalled as one.
* **A marker in its environment** (``FLOWRANK_OWNER=<token>``): inherited by
  every descendant, including ones that left the group (daemons, Ray workers
  started by a raylet), so a sweep of ``/proc`` finds them. (A process that
  writes its title over its environment, as ``redis-server`` does, hides the
  marker: it is found through its group.)
* **A stop that cannot be skipped**: :class:`Owned` is a context manager, and
  while any child is owned a SIGTERM raises :class:`Terminated` (a
  ``KeyboardInterrupt``) in the main thread instead of killing the process
  outright, so ``finally`` blocks and ``__exit__`` run as they do on Ctrl-C.

Stopping is: ``stop_signal`` (default SIGTERM) to the group, up to
``grace_s`` for the leader to exit, SIGKILL to the group, then SIGKILL to any
process still carrying the marker. SIGKILL of the *owner* cannot be caught;
:func:`kill_marked` with the same token cleans up after one (tests do).

>>> with owned_process(["sleep", "60"]) as proc:     # doctest: +SKIP
...     proc.pid
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import threading
import time
import uuid
from typing import Iterator, Sequence

OWNER_ENV = "FLOWRANK_OWNER"


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived: unwinds like Ctrl-C so every owned child is stopped."""


# ------------------------------------------------------------------- SIGTERM

_lock = threading.Lock()
_depth = 0
_previous = None


def _raise_terminated(signum, frame):
    if _depth == 0:  # nothing owned any more (the last owner let go off the main thread)
        previous = _previous if _previous is not None else signal.SIG_DFL
        _restore(previous)
        if callable(previous):
            return previous(signum, frame)
        if previous == signal.SIG_DFL:
            os.kill(os.getpid(), signum)  # die of it, as without us
        return None
    raise Terminated(f"signal {signum}")


def _restore(previous) -> None:
    global _previous
    signal.signal(signal.SIGTERM, previous)
    _previous = None


def _enter_sigterm_guard() -> bool:
    """While at least one child is owned, SIGTERM raises Terminated (main
    thread only; a handler someone else installed is left alone)."""
    global _depth, _previous
    if threading.current_thread() is not threading.main_thread():
        return False
    with _lock:
        if _depth == 0:
            current = signal.getsignal(signal.SIGTERM)
            if current is not _raise_terminated:  # (still ours if released off the main thread)
                if current not in (signal.SIG_DFL, None):
                    return False  # the program has its own SIGTERM policy (e.g. uvicorn)
                _previous = current
                signal.signal(signal.SIGTERM, _raise_terminated)
        _depth += 1
        return True


def _leave_sigterm_guard() -> None:
    """The handler goes back when the last owner lets go; off the main thread
    it stays installed and defers to the previous policy (see above)."""
    global _depth
    with _lock:
        _depth -= 1
        if _depth == 0 and threading.current_thread() is threading.main_thread():
            _restore(_previous if _previous is not None else signal.SIG_DFL)


@contextlib.contextmanager
def sigterm_raises() -> Iterator[None]:
    """SIGTERM raises :class:`Terminated` inside the block (main thread)."""
    entered = _enter_sigterm_guard()
    try:
        yield
    finally:
        if entered:
            _leave_sigterm_guard()


class Interrupted(Exception):
    """SIGINT or SIGTERM stopped an asyncio run (see :func:`signals_cancel`)."""

    def __init__(self, signum: int):
        super().__init__(f"signal {signal.Signals(signum).name}")
        self.signum = signum


@contextlib.contextmanager
def signals_cancel(task: "asyncio.Task | None" = None,
                   signals: Sequence[int] = (signal.SIGINT, signal.SIGTERM)) -> Iterator[list[int]]:
    """Inside a running event loop: the first SIGINT or SIGTERM cancels
    ``task`` (default: the current one); later signals are only recorded, so
    the task's ``finally`` (which stops what it started) is not interrupted
    in turn, as a second Ctrl-C under ``asyncio.run`` would. Yields the list
    of signals received: the task turns its ``CancelledError`` into
    :class:`Interrupted` when it is not empty; from then on SIGINT and SIGTERM
    stay ignored (the program is stopping; a caller that goes on restores
    them). Off the main thread (no signal handlers there) it does nothing. A signal that arrives while the loop is
    blocked in synchronous code takes effect when the loop runs again."""
    loop = asyncio.get_running_loop()
    task = task or asyncio.current_task()
    received: list[int] = []

    def on_signal(signum: int) -> None:
        received.append(signum)
        if len(received) == 1:
            task.cancel()

    installed = []
    if threading.current_thread() is threading.main_thread():
        for sig in signals:
            previous = signal.getsignal(sig)
            loop.add_signal_handler(sig, on_signal, sig)
            installed.append((sig, previous))
    try:
        yield received
    finally:
        # Once a signal came, the program is on its way out: later SIGINT/SIGTERM
        # are ignored, not raised into its last steps (writing its output, exiting).
        # Blocked while the handlers change, so none falls in between.
        if installed:
            signal.pthread_sigmask(signal.SIG_BLOCK, [sig for sig, _ in installed])
            try:
                for sig, previous in installed:
                    loop.remove_signal_handler(sig)
                    signal.signal(sig, signal.SIG_IGN if received
                                  else previous if previous is not None else signal.SIG_DFL)
            finally:
                signal.pthread_sigmask(signal.SIG_UNBLOCK, [sig for sig, _ in installed])


# ------------------------------------------------------------------- markers


def new_marker(prefix: str = "fr") -> str:
    return f"{prefix}-{os.getpid()}-{uuid.uuid4().hex[:12]}"


def processes_with_marker(marker: str, env_name: str = OWNER_ENV) -> list[int]:
    """Pids of live (non-zombie) processes whose environment has
    ``env_name=marker``, this process excluded. Reads ``/proc`` directly."""
    needle = f"{env_name}={marker}".encode()
    me = os.getpid()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                if needle not in f.read().split(b"\0"):
                    continue
            with open(f"/proc/{name}/stat", "rb") as f:
                if f.read().rsplit(b")", 1)[1].split()[0] == b"Z":
                    continue
        except OSError:  # gone, or not ours to read
            continue
        found.append(int(name))
    return found


def kill_marked(marker: str, env_name: str = OWNER_ENV, timeout_s: float = 10.0) -> int:
    """SIGKILL every process carrying the marker until none is left; returns
    how many were signalled."""
    killed = 0
    deadline = time.monotonic() + timeout_s
    while True:
        pids = processes_with_marker(marker, env_name)
        if not pids or time.monotonic() > deadline:
            return killed
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
                killed += 1
        time.sleep(0.02)


# ------------------------------------------------------------------- children


class Owned:
    """One child process (restartable) in its own session, carrying a marker.

    ``start()`` may be called again after ``stop()`` (a server restarted on the
    same data); the marker stays, so one sweep at the end finds everything
    any incarnation left. Extra keyword arguments go to ``subprocess.Popen``.
    """

    def __init__(self, argv: Sequence[str], *, env: dict | None = None, marker: str | None = None,
                 stop_signal: int = signal.SIGTERM, grace_s: float = 10.0, **popen_kw):
        self.argv = [str(a) for a in argv]
        self.marker = marker or new_marker()
        self.env = dict(os.environ if env is None else env)
        self.env[OWNER_ENV] = self.marker
        self.stop_signal = stop_signal
        self.grace_s = grace_s
        self.popen_kw = popen_kw
        self.proc: subprocess.Popen | None = None
        self._guarded = False

    def start(self) -> subprocess.Popen:
        if self.proc is not None and self.proc.poll() is None:
            raise RuntimeError(f"already running: pid {self.proc.pid}")
        if not self._guarded:
            self._guarded = _enter_sigterm_guard()
        try:
            self.proc = subprocess.Popen(self.argv, env=self.env, start_new_session=True, **self.popen_kw)
        except BaseException:
            self._release_guard()
            raise
        return self.proc

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def stop(self, grace_s: float | None = None, sig: int | None = None) -> int | None:
        """Stop the child and everything it started; returns its exit code.
        Safe to call twice, and from ``finally`` after a failed start."""
        proc, code = self.proc, None
        try:
            if proc is not None:
                code = _stop_group(proc, self.stop_signal if sig is None else sig,
                                   self.grace_s if grace_s is None else grace_s)
            kill_marked(self.marker)
        finally:
            self.proc = None
            self._release_guard()
        return code

    def kill(self) -> int | None:
        """SIGKILL at once (a crash, for chaos and recovery tests)."""
        return self.stop(grace_s=0, sig=signal.SIGKILL)

    def _release_guard(self) -> None:
        if self._guarded:
            self._guarded = False
            _leave_sigterm_guard()

    def __enter__(self) -> "Owned":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def _stop_group(proc: subprocess.Popen, sig: int, grace_s: float) -> int | None:
    pgid = proc.pid  # start_new_session: the child leads its own group
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, sig)
        if grace_s > 0:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=grace_s)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)  # the leader if it ignored us, and whatever else is in the group
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        if stream is not None:
            with contextlib.suppress(OSError):
                stream.close()
    return proc.returncode


@contextlib.contextmanager
def owned_process(argv: Sequence[str], **kw) -> Iterator[subprocess.Popen]:
    """``with owned_process([...]) as proc:`` — see :class:`Owned`."""
    owned = Owned(argv, **kw)
    owned.start()
    try:
        yield owned.proc
    finally:
        owned.stop()


@contextlib.contextmanager
def owned_ray(**init_kw) -> Iterator[object]:
    """An embedded local Ray owned by this block: its processes (GCS, raylet,
    workers) inherit a marker; on exit ``ray.shutdown()`` and then a sweep
    kills anything of it still alive. Ray's own SIGTERM/SIGINT handlers are
    not kept (RAY_NOTES), so SIGTERM unwinds this block like Ctrl-C."""
    import ray

    marker = new_marker("fr-ray")
    saved_env = os.environ.get(OWNER_ENV)
    with sigterm_raises():
        saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
        os.environ[OWNER_ENV] = marker
        try:
            try:
                from engine.cluster.ray_start import embedded_head

                # the head FlowRank's embedded start runs (no API server, log or autoscaler monitor
                # unless the dashboard is asked for)
                with embedded_head(bool(init_kw.get("include_dashboard"))):
                    ray.init(address="local", **init_kw)
            finally:
                for s, h in saved.items():
                    if h is not None:
                        signal.signal(s, h)
            yield ray
        finally:
            try:
                if ray.is_initialized():
                    ray.shutdown()
            finally:
                if saved_env is None:
                    os.environ.pop(OWNER_ENV, None)
                else:
                    os.environ[OWNER_ENV] = saved_env
                kill_marked(marker)

"""A child process to SIGKILL at a chosen point, reading its stdout lines.

Crash tests (tests/log, tests/service) run a script that prints one line per
acknowledgement *after* the acknowledged call returned; the parent kills it
and counts only complete lines (a torn last line is no acknowledgement).
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import time

from benchmarks.processes import Owned


class Child:
    """``with Child(script, *args) as child:`` — owned (benchmarks.processes):
    whatever happens in the block, the child is SIGKILLed at its end."""

    def __init__(self, script: str, *args, timeout: float = 10.0):
        self.owned = Owned([sys.executable, script, *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.proc = self.owned.start()
        self.lines: list[str] = []
        self.timeout = timeout
        self._buf = b""

    def read_until(self, predicate, timeout: float | None = None) -> str:
        """Collect stdout lines until ``predicate(line)``; fail on timeout or death."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        fd = self.proc.stdout.fileno()
        poller = select.poll()  # not select.select: a test process may hold more than 1,024 descriptors
        poller.register(fd, select.POLLIN | select.POLLHUP)
        while time.monotonic() < deadline:
            ready = poller.poll(50)
            if not ready:
                if self.proc.poll() is not None:
                    raise AssertionError(f"child died: {self.proc.stderr.read().decode()[-2000:]}")
                continue
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                break
            self._buf += chunk
            *complete, self._buf = self._buf.split(b"\n")
            for raw in complete:
                line = raw.decode()
                self.lines.append(line)
                if predicate(line):
                    return line
        raise AssertionError(f"timed out; last lines {self.lines[-3:]}")

    def kill(self) -> None:
        """SIGKILL, then keep every complete line written before the kill."""
        if self.owned.proc is None:
            return  # already killed
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        rest = self.proc.stdout.read()
        *complete, _fragment = (self._buf + rest).split(b"\n")  # a torn last line is no ack
        self.lines.extend(raw.decode() for raw in complete)
        self.owned.kill()  # reaped; closes the pipes, sweeps the marker

    def __enter__(self) -> "Child":
        return self

    def __exit__(self, *exc) -> None:
        self.kill()

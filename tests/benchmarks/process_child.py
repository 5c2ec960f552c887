"""A benchmark-like run that owns processes and then fails (tests/benchmarks/test_processes.py).

``python -m tests.benchmarks.process_child MODE [PORT]``: starts a private
redis-server (benchmarks.redis_peer.RedisServer) and a shell whose child
escapes into its own session (``setsid sleep``), both through
benchmarks.processes, prints ``ready <redis pid>`` and then:

* ``raise``: a scenario fails with an exception (once a line arrives on stdin);
* ``wait``: sleeps until the parent sends SIGTERM or SIGINT;
* ``no-redis-module``: the ``redis`` module is missing, so RedisServer.start
  fails after spawning redis-server on PORT (the run of issue 14 that left
  nine behind);
* ``ray``: an embedded Ray (benchmarks.processes.owned_ray), then waits.
"""

from __future__ import annotations

import faulthandler
import signal
import sys
import time

from benchmarks.processes import owned_process, owned_ray
from benchmarks.redis_peer import RedisServer


def _wait(seconds: float) -> None:
    """Sleep in short slices: a signal the kernel hands to another thread of this process (the
    redis client's, Ray's) only sets Python's flag, and the main thread raises it at its next
    step, not when one long sleep ends (a CI run waited the whole 60 s that way)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(0.05)


def main(mode: str) -> None:
    faulthandler.register(signal.SIGUSR1)  # the test asks where a run that does not stop is stuck
    # Ctrl-C raises here however the suite was started: a shell's background job (`cmd &`) starts with
    # SIGINT ignored, Python then keeps it ignored, and every child inherits that (a hang, not a finding)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGINT, signal.SIGTERM])  # nor blocked by an inherited mask
    if mode == "no-redis-module":
        sys.modules["redis"] = None  # `import redis` now raises ImportError
        srv = RedisServer()
        srv.port = int(sys.argv[2])  # the parent finds the server by this port in its title
        print("ready 0", flush=True)
        srv.start()
        return
    if mode == "ray":
        with owned_ray(num_cpus=1, include_dashboard=False, log_to_driver=False):
            print("ready 0", flush=True)
            _wait(600)
        return
    with RedisServer() as srv, owned_process(["sh", "-c", "setsid sleep 600 & sleep 600"]):
        print(f"ready {srv.pid}", flush=True)
        if mode == "raise":
            sys.stdin.readline()
            raise RuntimeError("a scenario failed")
        _wait(600)


if __name__ == "__main__":
    main(sys.argv[1])

"""Starting Ray for a FlowRank process: an embedded local instance, or a joined cluster.

:func:`init_ray` starts (or joins) Ray in the calling thread. :func:`begin` starts it
on a thread of its own, so that ``flowrank serve`` spends the seconds an embedded
``ray.init`` waits on its daemons (the GCS, the raylet and its agents, about 5 s on
a 2-core machine) importing the gateway and loading its kernels instead (issue 29,
item 1): the next :func:`init_ray` waits for that start and returns its outcome.

The thread that runs ``ray.init`` stays alive, blocked, for as long as the process:
Ray starts its daemons with ``PR_SET_PDEATHSIG``, which the kernel fires when the
*thread* that started them ends (the GCS dies with it, and the driver with the GCS).

This module imports Ray only when called: importing it costs nothing.
"""

from __future__ import annotations

import logging
import os
import signal
import threading

#: Ray settings of an embedded instance (a joined cluster keeps its own).
#: ``task_events_max_num_task_in_gcs``: the GCS keeps an event record of the
#: last N tasks (every actor call is a task) for Ray's state API and
#: dashboard; at Ray's default (100,000) the gcs_server grew by ~240 MiB
#: before reaching it under steady ingest (the soak, docs/performance.md).
#: 1,000 holds it flat at ~65 MiB; `ray list tasks` then shows the last 1,000.
EMBEDDED_SYSTEM_CONFIG = {"task_events_max_num_task_in_gcs": 1_000}


class _Start:
    """One Ray start on its own thread: its outcome once ``done`` is set."""

    def __init__(self, address: str | None, dashboard: bool) -> None:
        self.address = address
        self.dashboard = dashboard
        self.done = threading.Event()
        self.started = False
        self.error: BaseException | None = None


_pending: _Start | None = None


def _ray_init(address: str | None, num_cpus: int | None, dashboard: bool) -> None:
    import ray  # noqa: PLC0415

    if address is None:
        os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # loopback-only embedded instance
    ray.init(address=address or "local", num_cpus=num_cpus if address is None else None,
             include_dashboard=bool(dashboard),
             _system_config=EMBEDDED_SYSTEM_CONFIG if address is None else None,
             ignore_reinit_error=True, log_to_driver=False)


class _NotMainThread(logging.Filter):
    """Drops Ray's warning that a ``ray.init`` off the main thread sets no SIGTERM handler:
    FlowRank keeps its own handlers on purpose (graceful shutdown), wherever Ray starts."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "current thread is not the main thread" not in record.getMessage()


_NOT_MAIN_THREAD = _NotMainThread()


def begin(address: str | None = None, dashboard: bool = False) -> None:
    """Start Ray (``address`` None: an embedded local instance; else join that cluster) on a
    thread of its own and return at once; the next :func:`init_ray` waits for it. A second
    call while one is pending does nothing."""
    global _pending
    if _pending is not None:
        return
    start = _pending = _Start(address, dashboard)
    said_by = logging.getLogger("ray._private.worker")  # the logger that says it
    if _NOT_MAIN_THREAD not in said_by.filters:
        said_by.addFilter(_NOT_MAIN_THREAD)

    def run() -> None:
        try:
            import ray  # noqa: PLC0415

            if not ray.is_initialized():
                _ray_init(address, None, dashboard)
                start.started = True
        except BaseException as exc:  # noqa: BLE001 - re-raised by init_ray in the caller's thread
            start.error = exc
        finally:
            start.done.set()
        if start.started:
            threading.Event().wait()  # forever: Ray's daemons die with the thread that started them

    threading.Thread(target=run, name="flowrank-ray-start", daemon=True).start()


def init_ray(address: str | None = None, num_cpus: int | None = None, dashboard: bool = False) -> bool:
    """Start an embedded local Ray (no address) or join a cluster; returns
    whether this call (or the :func:`begin` it waited for) started Ray. Keeps the
    caller's SIGTERM/SIGINT handlers (ray.init installs its own, which defeats
    graceful shutdown).

    An embedded Ray runs without the dashboard (web UI, job/state/metrics
    head modules) unless ``dashboard`` is true. Ray 2.60 still starts its
    API-server process (usage stats only), the raylet's dashboard and
    runtime-env agents, the log monitor and the autoscaler monitor: ray.init
    has no switch for those (docs/http.md, "Lean embedded Ray")."""
    global _pending
    start, _pending = _pending, None
    if start is not None:
        start.done.wait()
        if start.error is not None:
            raise start.error
        if (start.address, start.dashboard) != (address, bool(dashboard)):
            raise RuntimeError(f"Ray was started for address={start.address!r}, dashboard={start.dashboard}; "
                               f"asked again for address={address!r}, dashboard={bool(dashboard)}")
        return start.started
    import ray  # noqa: PLC0415

    if ray.is_initialized():
        return False
    main = threading.current_thread() is threading.main_thread()
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)} if main else {}
    try:
        _ray_init(address, num_cpus, dashboard)
    finally:
        for s, h in saved.items():
            if h is not None:
                signal.signal(s, h)
    return True

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

import contextlib
import logging
import os
import signal
import threading
from collections.abc import Iterator

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


#: What a lean embedded head leaves out (``RayParams`` fields set before Ray's node reads them):
#: the autoscaler monitor (a fixed one-machine instance never scales) and the log monitor
#: (it forwards workers' output to drivers; FlowRank's driver runs ``log_to_driver=False``,
#: and the files stay in Ray's session folder).
LEAN_HEAD_PARAMS = {"no_monitor": True, "include_log_monitor": False}


@contextlib.contextmanager
def lean_embedded_head() -> Iterator[list[str]]:
    """For the ``ray.init`` inside it: an embedded head without Ray's three Python daemons
    that an instance without the dashboard does not use — the autoscaler monitor, the log
    monitor, and the API server (with the dashboard off it loads only the usage-stats module,
    and FlowRank turns usage stats off). Measured on the 2-core VM: ``ray.init`` 4.2-5.2 s
    with them, 2.1-2.3 s without (docs/performance.md, "Stop 33").

    ``ray.init`` has no switch for these, so this wraps two methods of Ray's private
    ``ray._private.node.Node`` for the duration of the call. Each piece is used only if Ray
    still has the names it wraps; what it cannot find is left to Ray's default (a full head,
    slower, equally correct), and the yielded list names what was left out, for the log and
    for the test that notices a Ray upgrade."""
    left_out: list[str] = []
    try:
        from ray._private import node as ray_node  # noqa: PLC0415
    except ImportError:  # pragma: no cover - a Ray without the private module: the full head
        yield left_out
        return
    node_cls = getattr(ray_node, "Node", None)
    saved = {name: node_cls.__dict__[name] for name in ("__init__", "start_api_server")
             if node_cls is not None and name in node_cls.__dict__}
    if "__init__" in saved:
        real_init = saved["__init__"]

        def init(self, ray_params, *args, **kwargs):  # type: ignore[no-untyped-def]
            head = kwargs.get("head", args[0] if args else False)
            if head and all(hasattr(ray_params, k) for k in LEAN_HEAD_PARAMS):
                for k, v in LEAN_HEAD_PARAMS.items():
                    setattr(ray_params, k, v)
            return real_init(self, ray_params, *args, **kwargs)

        setattr(node_cls, "__init__", init)  # noqa: B010 - a class attribute, wrapped for the call
        left_out += ["autoscaler monitor", "log monitor"]
    if "start_api_server" in saved:
        real_api = saved["start_api_server"]

        def start_api_server(self, *args, include_dashboard=None, **kwargs):  # type: ignore[no-untyped-def]
            if include_dashboard:
                return real_api(self, *args, include_dashboard=include_dashboard, **kwargs)
            return None

        setattr(node_cls, "start_api_server", start_api_server)  # noqa: B010
        left_out.append("API server")
    try:
        yield left_out
    finally:
        for name, fn in saved.items():
            setattr(node_cls, name, fn)


def embedded_head(dashboard: bool) -> contextlib.AbstractContextManager[list[str]]:
    """What an embedded ``ray.init`` runs inside: the lean head (:func:`lean_embedded_head`),
    or Ray's full one when the dashboard is asked for (it uses the API server and monitors)."""
    return contextlib.nullcontext([]) if dashboard else lean_embedded_head()


def _ray_init(address: str | None, num_cpus: int | None, dashboard: bool) -> None:
    import ray  # noqa: PLC0415

    kwargs = {"address": address or "local", "num_cpus": num_cpus if address is None else None,
              "include_dashboard": bool(dashboard),
              "_system_config": EMBEDDED_SYSTEM_CONFIG if address is None else None,
              "ignore_reinit_error": True, "log_to_driver": False}
    if address is not None:  # a joined cluster: its head is whatever its operator started
        ray.init(**kwargs)
        return
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # loopback-only embedded instance
    with embedded_head(dashboard) as left_out:
        ray.init(**kwargs)
    logging.getLogger(__name__).debug("embedded Ray started without: %s", ", ".join(left_out) or "nothing")


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
    head modules) unless ``dashboard`` is true, and then also without the API
    server, the log monitor and the autoscaler monitor (:func:`lean_embedded_head`);
    the raylet's dashboard and runtime-env agents still run (docs/http.md,
    "Lean embedded Ray")."""
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

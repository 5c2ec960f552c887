"""engine.cluster.ray_start: Ray started on a thread of its own while serve imports (issue 29).

``ray.init`` is replaced here (the real one is the session's Ray, tests/conftest.py): what is
checked is the hand-over between :func:`begin` and :func:`init_ray`."""

from __future__ import annotations

import signal
import threading

import pytest
import ray

from engine.cluster import ray_start


@pytest.fixture
def fake_ray(monkeypatch):
    calls: list[dict] = []
    gate = threading.Event()

    def init(**kw):
        calls.append(kw | {"thread": threading.current_thread().name})
        gate.wait(5)
        if kw["address"] == "bad:1":
            raise ConnectionError("nothing at bad:1")

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", init)
    monkeypatch.setattr(ray_start, "_pending", None)
    return calls, gate


def test_init_ray_waits_for_the_start_begin_made_and_returns_its_outcome(fake_ray):
    calls, gate = fake_ray
    handler = signal.getsignal(signal.SIGTERM)
    ray_start.begin()
    waiter = threading.Thread(target=lambda: got.append(ray_start.init_ray()))
    got: list[bool] = []
    waiter.start()
    waiter.join(0.2)
    assert waiter.is_alive() and got == []  # ray.init has not returned yet: init_ray waits for it
    gate.set()
    waiter.join(5)
    assert got == [True] and len(calls) == 1  # one ray.init, made by begin's thread
    assert calls[0]["thread"] == "flowrank-ray-start" and calls[0]["address"] == "local"
    assert calls[0]["_system_config"] == ray_start.EMBEDDED_SYSTEM_CONFIG
    # the thread that started Ray outlives the start: Ray's daemons die with the thread that started them
    assert any(t.name == "flowrank-ray-start" and t.is_alive() for t in threading.enumerate())
    assert signal.getsignal(signal.SIGTERM) is handler
    gate.clear()
    ray_start.init_ray()  # the hand-over is used once: a later call starts Ray itself
    assert len(calls) == 2 and calls[1]["thread"] == threading.current_thread().name


def test_a_failed_start_is_raised_by_init_ray_and_a_different_ask_is_refused(fake_ray):
    _calls, gate = fake_ray
    gate.set()
    ray_start.begin("bad:1")
    with pytest.raises(ConnectionError, match="nothing at bad:1"):
        ray_start.init_ray("bad:1")
    ray_start.begin()
    with pytest.raises(RuntimeError, match="asked again"):
        ray_start.init_ray(dashboard=True)


class _FakeNode:
    """Stands in for ``ray._private.node.Node``: records what the wrapped methods see."""

    seen: list[tuple] = []

    def __init__(self, ray_params, head=False, shutdown_at_exit=True):
        _FakeNode.seen.append(("init", head, ray_params.no_monitor, ray_params.include_log_monitor))

    def start_api_server(self, *, include_dashboard, raise_on_failure):
        _FakeNode.seen.append(("api", include_dashboard))


class _Params:
    def __init__(self):
        self.no_monitor = False
        self.include_log_monitor = None


def test_the_lean_head_drops_monitors_and_the_api_server_only_for_a_head_and_only_inside(monkeypatch):
    from ray._private import node as ray_node

    monkeypatch.setattr(ray_node, "Node", _FakeNode)
    _FakeNode.seen = []
    real_init, real_api = _FakeNode.__init__, _FakeNode.start_api_server
    with ray_start.lean_embedded_head() as left_out:
        head = ray_node.Node(_Params(), head=True)
        ray_node.Node(_Params(), False)  # a worker node (positional head) keeps Ray's defaults
        ray_node.Node(_Params(), True, False)  # positional head
        head.start_api_server(include_dashboard=False, raise_on_failure=False)  # left out
        head.start_api_server(include_dashboard=True, raise_on_failure=True)  # the dashboard asked for: started
    assert left_out == ["autoscaler monitor", "log monitor", "API server"]
    assert _FakeNode.seen == [("init", True, True, False), ("init", False, False, None),
                              ("init", True, True, False), ("api", True)]
    assert _FakeNode.__init__ is real_init and _FakeNode.start_api_server is real_api  # restored on exit
    _FakeNode.seen = []
    ray_node.Node(_Params(), head=True).start_api_server(include_dashboard=False, raise_on_failure=False)
    assert _FakeNode.seen == [("init", True, False, None), ("api", False)]  # outside it: Ray's own behaviour


def test_a_ray_without_the_wrapped_names_gets_its_default_head(monkeypatch):
    from ray._private import node as ray_node

    class Renamed:  # a later Ray that renamed the methods: nothing wrapped, nothing said left out
        pass

    monkeypatch.setattr(ray_node, "Node", Renamed)
    with ray_start.lean_embedded_head() as left_out:
        assert "start_api_server" not in Renamed.__dict__ and "__init__" not in Renamed.__dict__
    assert left_out == []


_EMBEDDED_START = """
import os, psutil, ray
from engine.cluster import ray_start
ray_start.init_ray(num_cpus=1)

@ray.remote
def pid():
    return os.getpid()

worker = ray.get(pid.remote(), timeout=60)
names = [" ".join(p.cmdline()[:3]) for p in psutil.Process().children(recursive=True) if p.pid != worker]
print("|".join(names))
ray.shutdown()
"""


def test_an_embedded_start_runs_without_the_monitors_and_the_api_server_and_serves(tmp_path):
    """The real thing in a process of its own (this one runs the session's Ray): a Ray upgrade
    that renames what the lean head wraps shows here, not as a silently slower start."""
    import os
    import subprocess
    import sys

    env = dict(os.environ, RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0")
    env.pop("RAY_ADDRESS", None)
    out = subprocess.run([sys.executable, "-c", _EMBEDDED_START], env=env, capture_output=True, text=True,
                         timeout=180, cwd=os.getcwd())
    assert out.returncode == 0, out.stderr[-2000:]
    children = out.stdout.strip().splitlines()[-1]
    assert "gcs_server" in children and "raylet" in children  # a real head
    for left_out in ("autoscaler/_private/monitor.py", "log_monitor.py", "dashboard/dashboard.py"):
        assert left_out not in children, children


_IMPORTS = """
import sys
import {module}
heavy = sorted(m for m in ("numba", "httpx", "engine.core.records", "engine.runtime.recovery") if m in sys.modules)
print(",".join(heavy))
"""


@pytest.mark.parametrize("module", ["gateway.cli", "engine.cluster.log_actor"])
def test_what_runs_before_ray_starts_and_the_log_actor_import_no_heavy_modules(module):
    """``flowrank serve`` begins Ray once gateway.cli is imported and the flags are checked: the
    admin commands' httpx and numba imports wait until one runs. Ray imports the log actor's
    module in its process, which runs no kernel: no numba, no engine core (issue 29 item 1)."""
    import os
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", _IMPORTS.format(module=module)], capture_output=True,
                         text=True, timeout=120, cwd=os.getcwd())
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "", f"{module} imports {out.stdout.strip()}"

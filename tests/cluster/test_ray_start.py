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

"""Short fault-injection runs for CI (long runs: ``python -m benchmarks chaos --kills 100``).

A ``flowrank serve`` subprocess on a loopback port, concurrent HTTP writers
with recorded acknowledgements, a nemesis that SIGKILLs the server's whole
session (and, on Ray, single shard actor processes) and restarts it on the
same data directory; then the checker of :mod:`tests.chaos.harness`.
The seed is printed; rerun one with ``--seed`` in the benchmark.
"""

from __future__ import annotations

import asyncio
import os

import pytest

from tests.chaos.harness import run

SEED = int(os.environ.get("FLOWRANK_CHAOS_SEED", "7"))


def _run(tmp_path, **kw):
    rep = asyncio.run(run(tmp_path, seed=SEED, **kw))
    print(rep.line())
    assert rep.anomalies == [], "\n".join(rep.anomalies[:20])
    return rep


def test_local_engine_survives_sigkills(tmp_path):
    rep = _run(tmp_path, engine="local", kills=3, duration=300.0, writers=4, min_gap=0.8, max_gap=1.6)
    assert rep.server_kills == 3 and [k.n for k in rep.kills] == [1, 2, 3]
    assert all(k.kind == "server" and k.recovery_s > 0 for k in rep.kills)
    assert rep.events_acked > 20
    assert rep.replays_compared == 2


def test_ray_engine_survives_server_and_shard_kills(tmp_path):
    pytest.importorskip("ray")
    # by count, not by time: a slow start (a loaded 2-core machine) used to leave room for one kill
    rep = _run(tmp_path, engine="ray", kills=2, duration=300.0, writers=3, min_gap=2.0, max_gap=3.0)
    assert rep.shard_kills == 1 and rep.server_kills == 1 and [k.kind for k in rep.kills] == ["shard", "server"]
    assert rep.events_acked > 20
    assert rep.replays_compared == 2


def test_a_server_that_does_not_come_back_is_an_anomaly(tmp_path, monkeypatch):
    """The nemesis's restart failing ends the run with that finding (it used to
    leave the writers running until the time cap, reporting nothing)."""
    from tests.chaos import harness

    def broken_start(self, timeout=90.0, attempts=3):
        if self.starts:
            raise RuntimeError("server exited with 1")
        return real_start(self, timeout, attempts)

    real_start = harness.Server.start
    monkeypatch.setattr(harness.Server, "start", broken_start)
    rep = asyncio.run(run(tmp_path, engine="local", kills=3, duration=120.0, writers=2, min_gap=0.3, max_gap=0.6))
    assert rep.server_kills == 0 and len(rep.anomalies) == 1
    assert rep.anomalies[0].startswith("the server did not come back after kill 1: RuntimeError")

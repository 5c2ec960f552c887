"""Seed scenarios A-K through HTTP: the real app over ClusterEngine (two Ray
shard actors on the session Ray), friends from the scenario through the
app's --friends-file provider. Plus Test I's ``--delta-retention 2`` variant.

Each runs with one gateway (the app holds the engine) and with two gateway
workers taking the requests in turn, each holding a RemoteEngine to one
engine host actor on the session Ray (``flowrank serve --workers 2``)."""

from __future__ import annotations

import asyncio
import json
import uuid

import pytest

from gateway.app import create_app
from tests import seed_scenarios as seeds
from tests.gateway.conftest import settings
from tests.gateway.http_driver import HttpDriver

pytestmark = pytest.mark.cluster
DATA = seeds.load()


class _HostedEngine:
    """The engine host actor, closed like an engine."""

    def __init__(self, actor):
        self.actor = actor

    async def close(self) -> None:
        import ray  # noqa: PLC0415

        await self.actor.close.remote()
        ray.kill(self.actor)


@pytest.fixture(params=[1, 2], ids=["1-worker", "2-workers"])
def open_driver(request, ray_session, tmp_path):
    """``open_driver(friends, **engine options)``: an HttpDriver over a fresh ClusterEngine
    (in the app, or in an engine host actor behind two apps); closed at teardown."""
    from engine.cluster import ClusterEngine  # noqa: PLC0415
    from engine.cluster.host_actor import remote_engine, start_host  # noqa: PLC0415

    loop = asyncio.new_event_loop()
    opened = []

    def make(friends: dict, **engine_kw) -> HttpDriver:
        friends_file = tmp_path / "friends.json"
        friends_file.write_text(json.dumps(friends))
        kw = dict(data_dir=str(tmp_path / "data"), n_shards=2, **engine_kw)
        if request.param == 1:
            eng = loop.run_until_complete(ClusterEngine.open(**kw))
            apps, remotes = [create_app(settings(friends_file=str(friends_file)), eng)], []
        else:
            # no warm round: kernels load from the session's shared cache on first use (test_warm tests warming)
            actor = loop.run_until_complete(start_host(kw, name=f"flowrank-engine-{uuid.uuid4().hex[:8]}",
                                                       warm_kernels=False))
            eng = _HostedEngine(actor)
            remotes = [loop.run_until_complete(remote_engine(actor)) for _ in range(request.param)]
            apps = [create_app(settings(friends_file=str(friends_file)), r, token_secret=b"s" * 32) for r in remotes]
        driver = HttpDriver(loop, apps, board_shards=2)
        opened.append((eng, apps, remotes, driver))
        return driver

    yield make
    for eng, apps, remotes, driver in opened:
        driver.close()
        for app in apps:
            loop.run_until_complete(app.state.gateway.friends.aclose())
        for r in remotes:
            loop.run_until_complete(r.close())
        loop.run_until_complete(eng.close())
    loop.close()


@pytest.mark.parametrize("test_id", seeds.scenario_ids())
def test_seed_scenario_over_http(open_driver, test_id):
    scenario = next(s for s in DATA["scenarios"] if s["test"] == test_id)
    driver = open_driver(scenario.get("friends", {}))
    seeds.load_initial(driver, DATA)
    assert seeds.run_scenario(driver, scenario) == len(scenario["steps"])


def test_i_beyond_delta_retention_answers_snapshot_over_http(open_driver):
    driver = open_driver({}, delta_retention=2)
    board_id = "arena-clash:solo:S7:test-i"
    driver.create_board({"board_id": board_id, "policy": "best_score"})
    results = driver.events(seeds.improvement_events(board_id, 46))
    assert results[-1]["version"] == 46
    ch = driver.changes(board_id, 42)
    assert ch["kind"] == "snapshot" and ch["version"] == 46
    assert [e["player_id"] for e in ch["entries"]] == ["p-gen"] and ch["entries"][0]["rank"] == 1
    assert "deltas" not in ch
    ch = driver.changes(board_id, 44)
    assert ch["kind"] == "deltas" and [d["version"] for d in ch["deltas"]] == [45, 46] and ch["from_version"] == 44

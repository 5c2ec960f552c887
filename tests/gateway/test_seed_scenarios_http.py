"""Seed scenarios A-K through HTTP: the real app over ClusterEngine (two Ray
shard actors on the session Ray), friends from the scenario through the
app's --friends-file provider. Plus Test I's ``--delta-retention 2`` variant."""

from __future__ import annotations

import asyncio
import json

import pytest

from gateway.app import create_app
from tests import seed_scenarios as seeds
from tests.gateway.conftest import settings
from tests.gateway.http_driver import HttpDriver

pytestmark = pytest.mark.cluster
DATA = seeds.load()


@pytest.fixture
def open_driver(ray_session, tmp_path):
    """``open_driver(friends, **engine options)``: an HttpDriver over a fresh ClusterEngine; closed at teardown."""
    from engine.cluster import ClusterEngine  # noqa: PLC0415

    loop = asyncio.new_event_loop()
    opened = []

    def make(friends: dict, **engine_kw) -> HttpDriver:
        friends_file = tmp_path / "friends.json"
        friends_file.write_text(json.dumps(friends))
        eng = loop.run_until_complete(ClusterEngine.open(data_dir=str(tmp_path / "data"), n_shards=2, **engine_kw))
        app = create_app(settings(friends_file=str(friends_file)), eng)
        driver = HttpDriver(loop, app, board_shards=2)
        opened.append((eng, app, driver))
        return driver

    yield make
    for eng, app, driver in opened:
        driver.close()
        loop.run_until_complete(app.state.gateway.friends.aclose())
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

"""Runs the worked examples A-K of tests/conformance/seed_scenarios.json.

The file is the design documents' test vectors as data (docs/api.md is the
contract they exercise). ``run_scenario`` drives any :class:`Driver` (the
in-process engine, the local service, the HTTP gateway) with the same steps
and asserts every expectation exactly, so all layers are held to one source
of truth.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Protocol

#: The conformance vectors, inside the repository (a fresh clone needs nothing beside it).
VECTORS = Path(__file__).resolve().parent / "conformance" / "seed_scenarios.json"


def load() -> dict:
    return json.loads(VECTORS.read_text(encoding="utf-8"))


def scenario_ids() -> list[str]:
    return [s["test"] for s in load()["scenarios"]]


class Driver(Protocol):
    """API-shaped operations; every return value is the JSON the API answers."""

    def create_board(self, board: dict) -> dict: ...
    def events(self, events: list[dict]) -> list[dict]: ...
    def top(self, board_id: str, limit: int) -> dict: ...
    def player(self, board_id: str, player_id: str) -> dict: ...
    def board(self, board_id: str) -> dict: ...
    def friends(self, board_id: str, player_id: str) -> dict: ...
    def around(self, board_id: str, player_id: str, radius: int) -> dict: ...
    def invalidate(self, board_id: str, event_id: str, reason: str, moderator: str) -> dict: ...
    def state(self, board_id: str, state: str) -> dict: ...
    def quarantine(self, board_id: str) -> dict: ...
    def changes(self, board_id: str, since_version: int) -> dict: ...


def improvement_events(board_id: str, count: int) -> list[dict]:
    """``count`` events that each change the ranking (Test I's generator)."""
    return [
        {"event_id": f"gen-{board_id}-{i}", "board_id": board_id, "player_id": "p-gen",
         "value": 1000 + i, "achieved_at": 1_793_527_200_000 + i}
        for i in range(count)
    ]


def load_initial(driver: Driver, data: dict) -> None:
    init = data["initial"]
    for b in init["boards"]:
        driver.create_board(b)
    results = driver.events(init["events"])
    assert all(r["outcome"].startswith("APPLIED") for r in results), results
    board_id = init["boards"][0]["board_id"]
    top = driver.top(board_id, len(init["expect_top"]))
    assert [e["player_id"] for e in top["entries"]] == init["expect_top"]
    assert top["version"] == init["expect_version"]


def _subset(actual: dict, expected: dict) -> None:
    for k, v in expected.items():
        assert actual.get(k) == v, f"{k}: expected {v!r}, got {actual.get(k)!r} in {actual}"


def _entries(actual: list[dict], expected: list[dict]) -> None:
    assert len(actual) == len(expected), f"expected {expected}, got {actual}"
    for a, e in zip(actual, expected):
        _subset(a, e)


def run_scenario(driver: Driver, scenario: dict) -> int:
    """Run every step, asserting its expectations; returns how many ran."""
    checked = 0
    for i, step in enumerate(scenario["steps"]):
        try:
            _run_step(driver, step)
        except AssertionError as exc:
            raise AssertionError(f"Test {scenario['test']} step {i} ({step['op']}): {exc}") from None
        checked += 1
    return checked


def _run_step(d: Driver, step: dict) -> None:
    op = step["op"]
    if op == "events":
        results = d.events(step["events"])
        assert [r["outcome"] for r in results] == step["expect_outcomes"], results
        if "expect_version" in step:
            assert results[-1]["version"] == step["expect_version"], results
    elif op == "top":
        page = d.top(step["board_id"], step["limit"])
        assert [e["player_id"] for e in page["entries"]] == step["expect_players"], page
        assert [e["rank"] for e in page["entries"]] == list(range(1, len(page["entries"]) + 1))
    elif op == "player":
        _subset(d.player(step["board_id"], step["player_id"]), step["expect"])
    elif op == "board":
        _subset(d.board(step["board_id"]), step["expect"])
    elif op == "friends":
        _entries(d.friends(step["board_id"], step["player_id"])["entries"], step["expect_entries"])
    elif op == "around":
        _entries(d.around(step["board_id"], step["player_id"], step["radius"])["entries"], step["expect_entries"])
    elif op == "invalidate":
        _subset(d.invalidate(step["board_id"], step["event_id"], step["reason"], step["moderator"]), step["expect"])
    elif op == "create_board":
        d.create_board(step["board"])
    elif op == "state":
        assert d.state(step["board_id"], step["state"])["state"] == step["state"]
    elif op == "quarantine":
        assert [e["event_id"] for e in d.quarantine(step["board_id"])["events"]] == step["expect_event_ids"]
    elif op == "generate_improvements":
        results = d.events(improvement_events(step["board_id"], step["count"]))
        assert results[-1]["version"] == step["expect_version"], results[-1]
    elif op == "changes":
        ch = d.changes(step["board_id"], step["since_version"])
        assert ch["kind"] == step["expect_kind"], ch
        assert [x["version"] for x in ch["deltas"]] == step["expect_versions"]
        assert ch["from_version"] == step["since_version"]
    else:
        raise AssertionError(f"unknown op {op!r}: the runner must know every op in the file")

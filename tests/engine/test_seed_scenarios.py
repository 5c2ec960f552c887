"""Seed scenarios A-K against the in-process engine (engine.core.board.Board)."""

from __future__ import annotations

import pytest

from engine.core.board import Board
from engine.core.errors import FlowRankError
from engine.core.model import BoardSpec, BoardState, Outcome, Policy
from engine.core.timefmt import format_timestamp
from tests import seed_scenarios as seeds
from tests.client_driver import entry_json, event_from_json

DATA = seeds.load()


class BoardDriver:
    """Seed-scenario driver over a dict of in-process boards."""

    def __init__(self, friends: dict, delta_retention: int = 10_000):
        self.boards: dict[str, Board] = {}
        self.friend_map = friends
        self.delta_retention = delta_retention

    def create_board(self, board: dict) -> dict:
        spec = BoardSpec(board["board_id"], Policy(board["policy"]))
        self.boards[spec.board_id] = Board(spec, delta_retention=self.delta_retention)
        return self.board(spec.board_id)

    def events(self, events: list[dict]) -> list[dict]:
        out = []
        for e in events:
            ev = event_from_json(e)
            board = self.boards.get(ev.board_id)
            if board is None:
                out.append({"event_id": ev.event_id, "outcome": Outcome.REJECTED_UNKNOWN_SEASON.value, "version": 0})
                continue
            r = board.apply(ev)
            out.append({"event_id": r.event_id, "outcome": r.outcome.value, "version": r.version})
            board._check()
        return out

    def top(self, board_id, limit):
        page = self.boards[board_id].top(0, limit)
        return {"version": page.version, "entries": [entry_json(e) for e in page.entries]}

    def player(self, board_id, player_id):
        v = self.boards[board_id].player(player_id)
        return {"version": v.version, "player_id": v.player_id, "rank": v.rank, "value": v.value,
                "achieved_at": format_timestamp(v.achieved_at), "status": v.status.value}

    def board(self, board_id):
        i = self.boards[board_id].info()
        return {"board_id": i.board_id, "policy": i.policy.value, "state": i.state.value, "version": i.version,
                "size": i.size, "shards": i.shards}

    def friends(self, board_id, player_id):
        page = self.boards[board_id].ranked_subset(self.friend_map.get(player_id, []))
        return {"version": page.version, "entries": [entry_json(e) for e in page.entries]}

    def around(self, board_id, player_id, radius):
        page = self.boards[board_id].around(player_id, radius)
        return {"version": page.version, "entries": [entry_json(e) for e in page.entries]}

    def invalidate(self, board_id, event_id, reason, moderator):
        r = self.boards[board_id].invalidate(event_id)
        self.boards[board_id]._check()
        return {"correction_event_id": r.correction_event_id, "player_id": r.player_id, "status": r.status.value,
                "value": r.value, "version": r.version}

    def state(self, board_id, state):
        return self.board(board_id) | {"state": self.boards[board_id].set_state(BoardState(state)).state.value}

    def quarantine(self, board_id):
        return {"events": [{"event_id": h.event_id, "reason": h.reason.value} for h in self.boards[board_id].quarantine()]}

    def changes(self, board_id, since_version):
        ch = self.boards[board_id].changes_since(since_version)
        return {"kind": ch.kind, "version": ch.version, "from_version": ch.from_version,
                "deltas": [{"version": d.version} for d in ch.deltas]}


@pytest.mark.parametrize("test_id", seeds.scenario_ids())
def test_seed_scenario(test_id):
    scenario = next(s for s in DATA["scenarios"] if s["test"] == test_id)
    driver = BoardDriver(scenario.get("friends", {}))
    seeds.load_initial(driver, DATA)
    assert seeds.run_scenario(driver, scenario) == len(scenario["steps"])


def test_scenario_file_has_all_eleven():
    assert seeds.scenario_ids() == list("ABCDEFGHIJK")


def test_i_beyond_delta_retention_answers_snapshot():
    driver = BoardDriver({}, delta_retention=2)
    board_id = "arena-clash:solo:S7:test-i"
    driver.create_board({"board_id": board_id, "policy": "best_score"})
    driver.events(seeds.improvement_events(board_id, 46))
    ch = driver.changes(board_id, 42)
    assert ch["kind"] == "snapshot" and ch["version"] == 46
    assert driver.changes(board_id, 44)["kind"] == "deltas"


def test_unknown_op_fails_loudly():
    with pytest.raises(AssertionError, match="unknown op"):
        seeds.run_scenario(BoardDriver({}), {"test": "Z", "steps": [{"op": "teleport"}]})


def test_errors_are_flowrank_errors():
    d = BoardDriver({})
    d.create_board({"board_id": "a:b:c:d", "policy": "best_score"})
    with pytest.raises(FlowRankError) as exc:
        d.player("a:b:c:d", "nobody")
    assert exc.value.code == "PLAYER_NOT_FOUND" and exc.value.status == 404

"""A seed-scenario driver over any EngineClient (LocalService, Ray cluster).

It renders engine records as the API's JSON so the same scenario runner
checks every layer. Calls run on a private event loop.
"""

from __future__ import annotations

import asyncio

from engine.core.errors import FlowRankError
from engine.core.model import BoardSpec, BoardState, Invalidation, Policy, ScoreEvent
from engine.core.timefmt import format_timestamp, parse_timestamp


def event_from_json(e: dict) -> ScoreEvent:
    achieved = parse_timestamp(e["achieved_at"])
    sub = e.get("submitted_at")
    return ScoreEvent(e["board_id"], e["event_id"], e["player_id"], e["value"], achieved,
                      achieved if sub is None else parse_timestamp(sub))


def entry_json(e) -> dict:
    return {"rank": e.rank, "player_id": e.player_id, "value": e.value, "achieved_at": format_timestamp(e.achieved_at)}


class ClientDriver:
    def __init__(self, loop: asyncio.AbstractEventLoop, client, friends: dict, board_shards: int | None = None):
        self.loop, self.c, self.friend_map, self.board_shards = loop, client, friends, board_shards

    def run(self, coro):
        return self.loop.run_until_complete(coro)

    def create_board(self, board: dict) -> dict:
        spec = BoardSpec(board["board_id"], Policy(board["policy"]), shards=board.get("shards", self.board_shards or 1))
        self.run(self.c.create_board(spec))
        return self.board(spec.board_id)

    def events(self, events: list[dict]) -> list[dict]:
        results = self.run(self.c.submit([event_from_json(e) for e in events]))
        return [{"event_id": r.event_id, "outcome": r.outcome.value, "version": r.version} for r in results]

    def top(self, board_id, limit):
        page = self.run(self.c.top(board_id, 0, limit))
        return {"version": page.version, "entries": [entry_json(e) for e in page.entries]}

    def player(self, board_id, player_id):
        v = self.run(self.c.player(board_id, player_id))
        return {"version": v.version, "player_id": v.player_id, "rank": v.rank, "value": v.value,
                "achieved_at": format_timestamp(v.achieved_at), "status": v.status.value}

    def board(self, board_id):
        i = self.run(self.c.board(board_id))
        return {"board_id": i.board_id, "policy": i.policy.value, "state": i.state.value, "version": i.version,
                "size": i.size, "shards": i.shards}

    def friends(self, board_id, player_id):
        page = self.run(self.c.ranked_subset(board_id, self.friend_map.get(player_id, [])))
        return {"version": page.version, "entries": [entry_json(e) for e in page.entries]}

    def around(self, board_id, player_id, radius):
        page = self.run(self.c.around(board_id, player_id, radius))
        return {"version": page.version, "entries": [entry_json(e) for e in page.entries]}

    def invalidate(self, board_id, event_id, reason, moderator):
        r = self.run(self.c.invalidate(Invalidation(board_id, event_id, reason, moderator)))
        return {"correction_event_id": r.correction_event_id, "player_id": r.player_id, "status": r.status.value,
                "value": r.value, "version": r.version}

    def state(self, board_id, state):
        return {"state": self.run(self.c.set_state(board_id, BoardState(state))).state.value}

    def quarantine(self, board_id):
        return {"events": [{"event_id": h.event_id, "reason": h.reason.value} for h in self.run(self.c.quarantine(board_id))]}

    def changes(self, board_id, since_version):
        ch = self.run(self.c.changes(board_id, since_version))
        return {"kind": ch.kind, "version": ch.version, "from_version": ch.from_version,
                "deltas": [{"version": d.version} for d in ch.deltas]}


__all__ = ["ClientDriver", "FlowRankError", "event_from_json", "entry_json"]

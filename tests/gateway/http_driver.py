"""A seed-scenario driver (``tests.seed_scenarios.Driver``) through HTTP.

Every operation is a request to the real FastAPI app (auth, validation,
rendering, routes) over httpx's ASGI transport, on the event loop that owns
the engine behind the app (``LocalService`` or ``ClusterEngine``). Answers are
the API's JSON as a client sees it; a non-2xx answer raises the matching
:mod:`engine.core.errors` class, as :class:`gateway.client.FlowRankClient` does.
"""

from __future__ import annotations

import asyncio
from urllib.parse import quote

import httpx

from gateway.client import _error_from

ADMIN, GAME_SERVER, MODERATOR, READER = "admin-key", "gs-key", "mod-key", "reader-key"


def _p(s: str) -> str:
    return quote(s, safe=":")


class HttpDriver:
    def __init__(self, loop: asyncio.AbstractEventLoop, app, board_shards: int | None = None):
        """``app``: one app, or a list of gateway apps that take the requests in turn."""
        from tests.gateway.conftest import RoundRobin  # noqa: PLC0415

        self.loop, self.board_shards = loop, board_shards
        apps = app if isinstance(app, list) else [app]
        self.http = httpx.AsyncClient(transport=RoundRobin(apps), base_url="http://flowrank.test", timeout=30)

    def close(self) -> None:
        self.loop.run_until_complete(self.http.aclose())

    def call(self, method: str, path: str, key: str, json=None, params=None, ok=(200,)) -> dict:
        async def go():
            return await self.http.request(method, path, json=json, params=params,
                                           headers={"Authorization": f"Bearer {key}"})

        resp = self.loop.run_until_complete(go())
        if resp.status_code not in ok:
            raise _error_from(resp)
        return resp.json()

    # -------------------------------------------------------------- Driver

    def create_board(self, board: dict) -> dict:
        body = dict(board)
        if self.board_shards is not None:
            body.setdefault("shards", self.board_shards)
        return self.call("POST", "/v1/boards", ADMIN, json=body, ok=(201,))

    def events(self, events: list[dict]) -> list[dict]:
        return self.call("POST", "/v1/events", GAME_SERVER, json={"events": events})["results"]

    def top(self, board_id: str, limit: int) -> dict:
        return self.call("GET", f"/v1/boards/{_p(board_id)}/top", READER, params={"limit": limit})

    def player(self, board_id: str, player_id: str) -> dict:
        return self.call("GET", f"/v1/boards/{_p(board_id)}/players/{_p(player_id)}", READER)

    def board(self, board_id: str) -> dict:
        return self.call("GET", f"/v1/boards/{_p(board_id)}", READER)

    def friends(self, board_id: str, player_id: str) -> dict:
        return self.call("GET", f"/v1/boards/{_p(board_id)}/players/{_p(player_id)}/friends", READER)

    def around(self, board_id: str, player_id: str, radius: int) -> dict:
        return self.call("GET", f"/v1/boards/{_p(board_id)}/players/{_p(player_id)}/around", READER,
                         params={"radius": radius})

    def invalidate(self, board_id: str, event_id: str, reason: str, moderator: str) -> dict:
        return self.call("POST", f"/v1/boards/{_p(board_id)}/invalidations", MODERATOR,
                         json={"event_id": event_id, "reason": reason, "moderator": moderator})

    def state(self, board_id: str, state: str) -> dict:
        return self.call("POST", f"/v1/boards/{_p(board_id)}/state", ADMIN, json={"state": state})

    def quarantine(self, board_id: str) -> dict:
        return self.call("GET", f"/v1/boards/{_p(board_id)}/quarantine", MODERATOR)

    def changes(self, board_id: str, since_version: int) -> dict:
        return self.call("GET", f"/v1/boards/{_p(board_id)}/changes", READER, params={"since_version": since_version})

    # ----------------------------------------------------------- extras

    def history(self, board_id: str, player_id: str) -> dict:
        return self.call("GET", f"/v1/boards/{_p(board_id)}/players/{_p(player_id)}/history", MODERATOR)

    def checksum(self, board_id: str) -> dict:
        return self.call("GET", f"/v1/boards/{_p(board_id)}/checksum", ADMIN)

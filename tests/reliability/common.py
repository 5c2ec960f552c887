"""Shared helpers of the reliability tests: an in-process app over a real
LocalService (``httpx.ASGITransport``), keys per role, a seeded board."""

from __future__ import annotations

import contextlib
from typing import AsyncIterator

import httpx

from engine.runtime.local import LocalService
from gateway.app import create_app
from gateway.settings import Settings

BOARD = "arena-clash:solo:S7:global"
KEYS = (
    {"name": "ops", "role": "admin", "key": "admin-key-7f3a9c"},
    {"name": "gs-eu-1", "role": "game_server", "key": "gs-key-51be02"},
    {"name": "mod-1", "role": "moderator", "key": "mod-key-c0ffee"},
    {"name": "web", "role": "reader", "key": "reader-key-9d8e7f"},
    {"name": "old", "role": "admin", "key": "revoked-key-deadbeef", "revoked": True},
)
ROLE_KEYS = {k["role"]: k["key"] for k in KEYS if not k.get("revoked")}


def H(role: str) -> dict:
    return {"Authorization": f"Bearer {ROLE_KEYS[role]}"}


def event(i: int, player: str | None = None, value: int | None = None, board: str = BOARD) -> dict:
    return {"event_id": f"evt-{i}", "board_id": board, "player_id": player or f"p-{i % 50:03d}",
            "value": 1000 + i if value is None else value, "achieved_at": 1_790_000_000_000 + i}


class App:
    def __init__(self, app, engine, client: httpx.AsyncClient):
        self.app, self.engine, self.client = app, engine, client

    async def seed(self, n: int = 20, policy: str = "best_score", board: str = BOARD) -> None:
        r = await self.client.post("/v1/boards", json={"board_id": board, "policy": policy, "shards": 2},
                                   headers=H("admin"))
        assert r.status_code == 201, r.text
        if n:
            r = await self.client.post("/v1/events", json={"events": [event(i, board=board) for i in range(n)]},
                                       headers=H("game_server"))
            assert r.status_code == 200, r.text

    async def fingerprint(self, board: str = BOARD) -> tuple:
        """(version, checksum, size): what a rejected request must leave unchanged."""
        c = await self.client.get(f"/v1/boards/{board}/checksum", headers=H("admin"))
        b = await self.client.get(f"/v1/boards/{board}", headers=H("admin"))
        assert c.status_code == 200 and b.status_code == 200, (c.text, b.text)
        return c.json()["version"], c.json()["checksum"], b.json()["size"]


def settings(**kw) -> Settings:
    base = dict(keys=KEYS, data_dir=None, live_window_ms=20, live_heartbeat_s=0.5)
    base.update(kw)
    return Settings(**base)


@contextlib.asynccontextmanager
async def open_app(settings_kw: dict | None = None, engine_kw: dict | None = None,
                   engine: LocalService | None = None) -> AsyncIterator[App]:
    eng = engine or await LocalService.open(**(engine_kw or {"data_dir": None}))
    app = create_app(settings(**(settings_kw or {})), eng)
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    try:
        async with app.router.lifespan_context(app):
            async with httpx.AsyncClient(transport=transport, base_url="http://test", timeout=30) as client:
                yield App(app, eng, client)
    finally:
        await eng.close()

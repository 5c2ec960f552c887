"""Fixtures for gateway tests: an app over the real engine
(:class:`engine.service.LocalService`, in memory, two in-process shards, no
Ray) and an httpx client per role. There is no second implementation of the
engine's semantics in the gateway tests."""

from __future__ import annotations

import asyncio
import threading
import time
from contextlib import contextmanager

import httpx
import pytest

from engine.service import LocalService
from gateway.app import create_app
from gateway.settings import Settings
from tests.loopback import free_port

BOARD = "arena-clash:solo:S7:global"

KEYS = (
    {"name": "ops", "role": "admin", "key": "admin-key"},
    {"name": "gs-eu-1", "role": "game_server", "key": "gs-key"},
    {"name": "mod-1", "role": "moderator", "key": "mod-key"},
    {"name": "web", "role": "reader", "key": "reader-key"},
    {"name": "old", "role": "admin", "key": "revoked-key", "revoked": True},
)
ROLE_KEYS = {"admin": "admin-key", "game_server": "gs-key", "moderator": "mod-key", "reader": "reader-key"}

SEED_EVENTS = [
    {"event_id": "evt-ava-1", "board_id": BOARD, "player_id": "p-ava", "value": 9800, "achieved_at": "2026-11-01T09:58:00Z"},
    {"event_id": "evt-ben-1", "board_id": BOARD, "player_id": "p-ben", "value": 9500, "achieved_at": "2026-11-01T10:01:00Z"},
    {"event_id": "evt-chloe-1", "board_id": BOARD, "player_id": "p-chloe", "value": 9500, "achieved_at": "2026-11-01T10:02:00Z"},
    {"event_id": "evt-dev-1", "board_id": BOARD, "player_id": "p-dev", "value": 9100, "achieved_at": "2026-11-01T10:03:00Z"},
    {"event_id": "evt-eli-1", "board_id": BOARD, "player_id": "p-eli", "value": 8700, "achieved_at": "2026-11-01T10:04:00Z"},
]


def H(role: str) -> dict:
    return {"Authorization": f"Bearer {ROLE_KEYS[role]}"}


@pytest.fixture
def anyio_backend():
    return "asyncio"


async def open_engine(delta_retention: int = 10_000, n_shards: int = 2) -> LocalService:
    """The real engine, in memory; the caller closes it (``await engine.close()``)."""
    return await LocalService.open(data_dir=None, n_shards=n_shards, delta_retention=delta_retention)


@pytest.fixture
async def engines():
    """A factory of LocalService engines, all closed at teardown."""
    opened: list[LocalService] = []

    async def make(**kw) -> LocalService:
        eng = await open_engine(**kw)
        opened.append(eng)
        return eng

    yield make
    for eng in opened:
        await eng.close()


def settings(**kw) -> Settings:
    base = dict(keys=KEYS, data_dir=None, live_window_ms=20, live_heartbeat_s=0.5)
    base.update(kw)
    return Settings(**base)


class Harness:
    def __init__(self, app, engine, client: httpx.AsyncClient):
        self.app, self.engine, self.client = app, engine, client

    async def seed(self) -> None:
        r = await self.client.post("/v1/boards", json={"board_id": BOARD, "policy": "best_score"}, headers=H("admin"))
        assert r.status_code == 201, r.text
        r = await self.client.post("/v1/events", json={"events": SEED_EVENTS}, headers=H("game_server"))
        assert r.status_code == 200, r.text

    async def board(self, board_id: str = BOARD) -> dict:
        r = await self.client.get(f"/v1/boards/{board_id}", headers=H("reader"))
        assert r.status_code == 200, r.text
        return r.json()


@pytest.fixture
async def harness(request):
    marker = request.node.get_closest_marker("settings")
    kw = dict(marker.kwargs) if marker else {}
    engine = await open_engine(kw.pop("delta_retention", 10_000))
    app = create_app(settings(**kw), engine)
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        yield Harness(app, engine, client)
    await app.state.gateway.hub.close()
    await engine.close()


@pytest.fixture
async def seeded(harness):
    await harness.seed()
    return harness


@contextmanager
def thread_server(make_settings=settings, wrap=None, **engine_kw):
    """uvicorn in a thread over a fresh LocalService opened on that thread's
    loop (httpx's ASGITransport buffers whole responses, so SSE needs a socket;
    schemathesis calls from its own loop). Yields the base URL."""
    import uvicorn  # noqa: PLC0415

    port = free_port()
    holder: dict = {}

    def run():
        async def main():
            engine = await open_engine(**engine_kw)
            try:
                app = create_app(make_settings(), engine)
                if wrap is not None:  # an ASGI wrapper around the app (tests that break it on purpose)
                    app = wrap(app)
                srv = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                                                    timeout_graceful_shutdown=1))
                holder["server"] = srv
                await srv.serve()
            finally:
                await engine.close()

        asyncio.run(main())

    t = threading.Thread(target=run, daemon=True)
    t.start()
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 15
    while time.time() < deadline:
        try:
            if httpx.get(f"{url}/readyz").status_code == 200:
                break
        except httpx.TransportError:
            time.sleep(0.05)
    else:
        raise RuntimeError("gateway thread server did not become ready")
    try:
        yield url
    finally:
        holder["server"].should_exit = True
        t.join(10)
